#!/usr/bin/env bash
# Synthetic connected digits: data → fbank → lang → LSTM-CTC → decode (greedy, TLG) → WER.
# Kaldi-style stages: ./run.sh --stage 4 restarts at training; every finished stage is skipped anyway.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
cd "$here"

stage=1
stop_stage=6
config=$here/config.yaml
nj=2
data=data
exp=exp/lstm_ctc
python=${PYTHON:-$ROOT/.venv/bin/python}
__po_options="stage stop_stage config nj data exp python"
. "$ROOT/utils/parse_options.sh"
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
run() { echo "+ $*" >&2; "$python" -m "$@"; }
at() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }
sets="train dev test"

if at 1; then  # data: synthetic corpus, lhotse manifests + Kaldi data dirs, validated
  run local.digits --config "$config" --out-dir "$data" --nj "$nj"
  for s in $sets; do run steps.validate_data_dir --data-dir "$data/$s" --vocab cmudict; done
fi
if at 2; then  # features: 80-dim log-mel fbank in Kaldi archives, global CMVN from train
  for s in $sets; do
    run steps.compute_fbank --config "$config" --data-dir "$data/$s" --out-dir "$data/fbank/$s" --nj "$nj"
  done
  run steps.compute_cmvn --feats "$data/fbank/train/feats.scp" --out-dir "$data/fbank/train"
fi
if at 3; then  # lang: lexicon, tokens, T/L/G → TLG.fst
  run steps.prepare_lang --config "$config" --text "$data/train/text" --lang-dir "$data/lang"
fi
if at 4; then  # train: LSTM CTC, resumable
  run steps.train --config "$config" --data-dir "$data" --feats-dir "$data/fbank" --lang-dir "$data/lang" \
    --exp-dir "$exp"
fi
if at 5; then  # decode: log-posteriors as Kaldi ark, then greedy and TLG search
  for s in dev test; do
    run steps.compute_logprobs --model "$exp/final.pt" --feats "$data/fbank/$s/feats.scp" --out-dir "$exp/logprobs_$s"
    for m in greedy tlg; do
      run steps.decode --config "$config" --method $m --logprobs "$exp/logprobs_$s/logprobs.scp" \
        --lang-dir "$data/lang" --out-dir "$exp/decode_${s}_$m"
    done
  done
fi
if at 6; then  # score: WER per set × method, RESULTS.md
  for s in dev test; do
    for m in greedy tlg; do
      run steps.score --ref "$data/$s/text" --hyp "$exp/decode_${s}_$m/hyp.txt" --out-dir "$exp/decode_${s}_$m"
    done
  done
  run steps.make_results --exp-dir "$exp"
fi
