#!/usr/bin/env bash
# Switchboard: data (lhotse prepare_switchboard + eval2000, sides as speakers) → fbank → lang → LSTM-CTC → decode.
#   ./run.sh [--config config_2000.yaml] [--corpus-dir DIR (holding LDC97S62/ ...)] [--stage N] [--stop-stage N] [--nj N]
#            [--cmd "srun --ntasks=1 --cpus-per-task=32"] [--train-cmd "srun --gres=gpu:8"]
# Only stage 1 is corpus-specific (local/switchboard.py); stages 2-6 are the shared ones of utils/recipe_stages.sh.
# Several learners: run stage 4 through Snakemake with profiles/slurm (torchrun over the allocated nodes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
cd "$here"

stage=1
stop_stage=7
config=$here/config.yaml
corpus_dir=""
nj=32
data=data
exp=exp/lstm_ctc
cmd=""
train_cmd=""
python=${PYTHON:-$ROOT/.venv/bin/python}
__po_options="stage stop_stage config corpus_dir nj data exp cmd train_cmd python"
. "$ROOT/utils/parse_options.sh"
. "$ROOT/utils/recipe_stages.sh"
at() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }
eval_sets=$(cfg data.eval_sets)

if at 1; then  # data: lhotse manifests + one wav per conversation side + Kaldi dirs with segments (corpus-specific: local/switchboard.py)
  run local.switchboard --config "$config" --out-dir "$data" --nj "$nj" ${corpus_dir:+--corpus-dir "$corpus_dir"}
  stage_validate train dev $eval_sets
fi
at 2 && stage_features train dev $eval_sets
at 3 && stage_lang train
at 4 && stage_train train dev
at 5 && stage_decode $eval_sets
at 6 && stage_score $eval_sets
at 7 && stage_export train dev           # mobile bundle (unidirectional models; a BLSTM is skipped with a message)
exit 0
