#!/usr/bin/env bash
# speechocean762 read English of non-native children and adults (local/speechocean762.py: audio read in place, 10 training speakers held out as dev; --corpus-dir DIR).
# Stages (asrlib/pipeline.py): 1 data, 2 features, 3 lang, 4 training, 5 decoding, 6 scoring, 7 mobile export.
#   ./run.sh [--stage N] [--stop-stage M] [--config FILE] [--nj N] ...   (all options: ./run.sh --help)
exec "$(dirname "$0")/../../utils/run_recipe.sh" "$(dirname "$0")" "$@"
