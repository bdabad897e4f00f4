#!/usr/bin/env bash
# FSDD on real speech: one LSTM-CTC model per fold, then per-speaker tables.
#   ./run.sh [--corpus-dir DIR/recordings] [--folds "loso_george split04"] [--stage N] [--stop-stage N] [--nj N]
# Folds: loso_<spk> (leave one speaker out; the next speaker is dev) for every speaker, and split04 (the dataset's
# own split: indices 0-4 test). Only stage 1 is corpus-specific (local/fsdd.py); stages 2-6 are the shared ones of
# utils/recipe_stages.sh, run once per fold with data=<data>/<fold> and exp=<exp>/<fold>. Stage 7 writes
# <exp>/RESULTS_fsdd_{tlg,greedy}.md (local.fsdd report).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
cd "$here"

stage=1
stop_stage=7
config=$here/config.yaml
corpus_dir=""       # default: data.corpus_dir of the config (downloaded from data.download_url when absent)
folds=all           # or a space-separated list, e.g. "loso_george split04"
nj=2
data=data
exp=exp
cmd=""
train_cmd=""
python=${PYTHON:-$ROOT/.venv/bin/python}
__po_options="stage stop_stage config corpus_dir folds nj data exp cmd train_cmd python"
. "$ROOT/utils/parse_options.sh"
. "$ROOT/utils/recipe_stages.sh"
at() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }

corpus=$(cfg data.corpus)       # fsdd, or digits_fsdd (recipes/digits_fsdd/run.sh runs this script)
eval_sets=$(cfg data.eval_sets)
if at 1; then  # data: recordings → lhotse manifests, all/ (+ all_sp/), one Kaldi train/dev/test per fold
  run local.$corpus --config "$config" --out-dir "$data" --nj "$nj" ${corpus_dir:+--corpus-dir "$corpus_dir"}
fi
[ -f "$data/folds.txt" ] || { echo "$0: $data/folds.txt missing; run stage 1 first" >&2; exit 1; }
[ "$folds" = all ] && folds=$(cut -d' ' -f1 "$data/folds.txt")
data_root=$data exp_root=$exp
for fold in $folds; do
  data=$(awk -v f="$fold" '$1 == f {print $2}' "$data_root/folds.txt")
  [ -n "$data" ] || { echo "$0: unknown fold $fold (see $data_root/folds.txt)" >&2; exit 1; }
  exp=$exp_root/$fold
  echo "=== fold $fold: data $data, exp $exp" >&2
  at 1 && stage_validate train dev $eval_sets
  at 2 && stage_features train dev $eval_sets
  at 3 && stage_lang train
  at 4 && stage_train train dev
  at 5 && stage_decode $eval_sets
  at 6 && stage_score $eval_sets
done
if at 7; then
  for fam in $(sed -n 's/^\(loso4\{0,1\}\)_.*/\1/p' "$data_root/folds.txt" | sort -u); do
    for m in tlg greedy; do
      run local.fsdd report --data "$data_root" --exp "$exp_root" --method $m --title "$corpus" --family $fam
    done
  done
fi
exit 0
