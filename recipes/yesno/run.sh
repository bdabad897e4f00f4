#!/usr/bin/env bash
# Kaldi's yesno on real speech: data (lhotse prepare_yesno) → fbank → lang → LSTM-CTC → decode → WER (test).
#   ./run.sh [--corpus-dir DIR/waves_yesno] [--stage N] [--stop-stage N] [--nj N] [--cmd "srun ..."]
# Only stage 1 is corpus-specific (local/yesno.py); stages 2-6 are the shared ones of utils/recipe_stages.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
cd "$here"

stage=1
stop_stage=7
config=$here/config.yaml
corpus_dir=""       # default: data.corpus_dir of the config (downloaded from data.download_url when absent)
nj=2
data=data
exp=exp/lstm_ctc
cmd=""              # launcher for every step, e.g. "srun --ntasks=1"
train_cmd=""        # launcher for training (default: cmd), e.g. "srun --gres=gpu:1"
python=${PYTHON:-$ROOT/.venv/bin/python}
__po_options="stage stop_stage config corpus_dir nj data exp cmd train_cmd python"
. "$ROOT/utils/parse_options.sh"
. "$ROOT/utils/recipe_stages.sh"
at() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }
eval_sets=$(cfg data.eval_sets)

if at 1; then  # data: the 60 wavs → lhotse manifests + Kaldi dirs train/dev/test (corpus-specific: local/yesno.py)
  run local.yesno --config "$config" --out-dir "$data" --nj "$nj" ${corpus_dir:+--corpus-dir "$corpus_dir"}
  stage_validate train dev test
fi
at 2 && stage_features train dev $eval_sets
at 3 && stage_lang train
at 4 && stage_train train dev
at 5 && stage_decode $eval_sets
at 6 && stage_score $eval_sets
at 7 && stage_export train dev           # mobile bundle (unidirectional models; a BLSTM is skipped with a message)
exit 0
