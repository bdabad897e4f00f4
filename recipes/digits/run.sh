#!/usr/bin/env bash
# Synthetic connected digits: data → fbank → lang → LSTM-CTC → decode (greedy, TLG) → WER.
# Kaldi-style stages: ./run.sh --stage 4 restarts at training; every finished stage is skipped anyway.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
cd "$here"

stage=1
stop_stage=7
config=$here/config.yaml
nj=2
data=data
exp=exp/lstm_ctc
python=${PYTHON:-$ROOT/.venv/bin/python}
num_learners=1          # >1: distributed training (train.dist.algo) through torchrun
nnodes=1
threads_per_learner=1
rdzv_endpoint=
max_restarts=0          # torchrun restarts the job this often when a learner dies (it resumes from the last checkpoint)
__po_options="stage stop_stage config nj data exp python num_learners nnodes threads_per_learner rdzv_endpoint max_restarts"
. "$ROOT/utils/parse_options.sh"
. "$ROOT/utils/recipe_stages.sh"
at() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }

if at 1; then  # data: synthetic corpus → lhotse manifests + Kaldi data dirs (corpus-specific: local/digits.py)
  run local.digits --config "$config" --out-dir "$data" --nj "$nj"
  stage_validate train dev test
fi
at 2 && stage_features train dev test   # 80-dim log-mel fbank in Kaldi archives, global CMVN from train
at 3 && stage_lang train                # lexicon, tokens, T/L/G → TLG.fst
at 4 && stage_train train dev           # LSTM CTC, resumable (train.init: ce → mono GMM, alignments, CE first)
at 5 && stage_decode dev test           # log-posteriors ark, greedy + TLG search
at 6 && stage_score dev test            # WER, RESULTS.md
at 7 && stage_export train dev          # mobile: compressed int8 ONNX + sherpa-onnx bundle in $exp/mobile
exit 0
