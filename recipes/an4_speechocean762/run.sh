#!/usr/bin/env bash
# AN4 + speechocean762 pooled into one training set (local/pooled.py: each corpus prepared by its own local module; one lexicon and LM over both).
# Stages (asrlib/pipeline.py): 1 data, 2 features, 3 lang, 4 training, 5 decoding, 6 scoring, 7 mobile export.
#   ./run.sh [--stage N] [--stop-stage M] [--config FILE] [--nj N] ...   (all options: ./run.sh --help)
exec "$(dirname "$0")/../../utils/run_recipe.sh" "$(dirname "$0")" "$@"
