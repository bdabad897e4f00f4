#!/usr/bin/env bash
# CMU AN4 read speech (local/an4.py: 16 kHz FLAC read in place, 5 training speakers held out as dev; --corpus-dir DIR/an4).
# Stages (asrlib/pipeline.py): 1 data, 2 features, 3 lang, 4 training, 5 decoding, 6 scoring, 7 mobile export.
#   ./run.sh [--stage N] [--stop-stage M] [--config FILE] [--nj N] ...   (all options: ./run.sh --help)
exec "$(dirname "$0")/../../utils/run_recipe.sh" "$(dirname "$0")" "$@"
