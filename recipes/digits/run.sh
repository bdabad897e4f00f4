#!/usr/bin/env bash
# Synthetic connected digits (local/digits.py: espeak-ng and flite voices, test voices unseen in training):
# data → fbank → lang → LSTM-CTC → decode (greedy, TLG) → WER → int8 mobile bundle. The default recipe of `make run`.
# Stages (asrlib/pipeline.py): 1 data, 2 features, 3 lang, 4 training, 5 decoding, 6 scoring, 7 mobile export.
#   ./run.sh [--stage N] [--stop-stage M] [--config FILE] [--nj N] ...   (all options: ./run.sh --help)
exec "$(dirname "$0")/../../utils/run_recipe.sh" "$(dirname "$0")" "$@"
