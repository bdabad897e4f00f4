#!/usr/bin/env bash
# FSDD on real speech: one LSTM-CTC model per fold, then per-speaker tables.
#   ./run.sh [--corpus-dir DIR/recordings] [--folds "loso_george split04"] [--stage N] [--stop-stage N] [--nj N]
#   ./run.sh --seeds "42 7 13"     # one model per seed and fold (exp/seed<S>/<fold>), combined by stages 8-9 into exp
#   ./run.sh --stage 8 --fuse "exp exp_seed7 exp_seed13" --exp exp_combined     # combine finished experiments
# Folds: loso_<spk> (leave one speaker out; the next speaker is dev) for every speaker, and split04 (the dataset's
# own split: indices 0-4 test). Only stage 1's preparation is corpus-specific (local/fsdd.py); the rest of stages 1-6
# are the shared ones of asrlib/pipeline.py, run once per fold with data=<data>/<fold> and exp=<exp>/<fold>. Stage 7 writes
# <exp>/RESULTS_fsdd_{tlg,greedy,isolated}.md (local.fsdd report). Stage 8 (only with --fuse): the models of several
# experiment folders (e.g. training seeds) combined per fold on the test set: each candidate word's total CTC
# probability summed over the models (steps.decode --method isolated), into --exp, with its own table; stage 9 (with
# --fuse) adapts each model to the test speaker against stage 8's words (steps.adapt_speaker: two-pass decoding,
# unsupervised) and combines the adapted models again (decode_test_isolated_sa, RESULTS_fsdd_isolated_sa.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
cd "$here"

stage=1
stop_stage=9
config=$here/config.yaml
corpus_dir=""       # default: data.corpus_dir of the config (downloaded from data.download_url when absent)
folds=all           # or a space-separated list, e.g. "loso_george split04"
nj=2
data=data
exp=exp
cmd=""
train_cmd=""
fuse=""             # stages 8-9: experiment folders (space-separated) whose models are combined into --exp
seeds=""            # training seeds (train.seed), e.g. "42 7 13": stages 4-7 once per seed into <exp>/seed<S>,
                    # stages 8-9 combine them into <exp> (--fuse defaults to those folders)
python=${PYTHON:-$ROOT/.venv/bin/python}
__po_options="stage stop_stage config corpus_dir folds nj data exp cmd train_cmd python fuse seeds"
. "$ROOT/utils/parse_options.sh"
. "$ROOT/utils/recipe_helpers.sh"
at() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }

corpus=$(cfg data.corpus)       # fsdd, or digits_fsdd (recipes/digits_fsdd/run.sh runs this script)
if at 1; then  # data: recordings → lhotse manifests, all/ (+ all_sp/), one Kaldi train/dev/test per fold
  run local.$corpus --config "$config" --out-dir "$data" --nj "$nj" ${corpus_dir:+--corpus-dir "$corpus_dir"}
fi
[ -f "$data/folds.txt" ] || { echo "$0: $data/folds.txt missing; run stage 1 first" >&2; exit 1; }
[ "$folds" = all ] && folds=$(cut -d' ' -f1 "$data/folds.txt")
data_root=$data exp_root=$exp
seed_exp() {  # seed_exp S: the experiment folder of training seed S ("" = no --seeds: --exp itself)
  echo "$exp_root${1:+/seed$1}"
}
fold_data() {  # fold_data FOLD: the fold's data dir (folds.txt)
  awk -v f="$1" '$1 == f {print $2}' "$data_root/folds.txt"
}
families() {  # the rotation families of folds.txt (loso, loso4) that stage 7's and 8-9's tables cover
  sed -n 's/^\(loso4\{0,1\}\)_.*/\1/p' "$data_root/folds.txt" | sort -u
}
seed_list=${seeds:-none}   # none: one experiment, --exp itself
for s in $seeds; do
  case $s in *[!0-9]*|"") echo "$0: --seeds takes whole numbers, got '$s'" >&2; exit 1 ;; esac
done
[ -z "$fuse" ] && [ -n "$seeds" ] && fuse=$(for s in $seeds; do seed_exp "$s"; done)
for fold in $folds; do
  data=$(fold_data "$fold")
  [ -n "$data" ] || { echo "$0: unknown fold $fold (see $data_root/folds.txt)" >&2; exit 1; }
  echo "=== fold $fold: data $data" >&2
  plan_stages $((stage > 1 ? stage : 1)) $((stop_stage < 3 ? stop_stage : 3)) --skip-prepare   # validate, fbank, lang
  for s in $seed_list; do
    [ "$s" = none ] && s=""
    exp=$(seed_exp "$s")/$fold
    config_set=()
    [ -n "$s" ] && config_set=(--set train.seed="$s")
    echo "=== fold $fold: exp $exp" >&2
    plan_stages $((stage > 4 ? stage : 4)) $((stop_stage < 6 ? stop_stage : 6))   # train, decode, score
  done
  config_set=()
done
if at 7; then
  for s in $seed_list; do
    [ "$s" = none ] && s=""
    for fam in $(families); do
      for m in tlg greedy isolated; do
        run local.fsdd report --data "$data_root" --exp "$(seed_exp "$s")" --method $m --family $fam \
          --title "$corpus${s:+, train.seed $s}"
      done
    done
  done
fi
if [ -n "$fuse" ] && { at 8 || at 9; }; then   # stages 8-9: several experiments' models, per fold, on its test set
  for fold in $folds; do
    data=$(fold_data "$fold")
    read -r _ lang methods <<< "$(set_langs test)"
    case " $methods " in *" isolated "*) ;; *)
      echo "$0: stages 8-9 combine one-word decodings; $config gives the test set no one-word grammar" \
           "(decode.set_grammars: {test: one_word})" >&2; exit 1 ;;
    esac
    lps=()
    for e in $fuse; do lps+=("$e/$fold/logprobs_test/logprobs.scp"); done
    absent=$(for f in "${lps[@]}"; do [ -f "$f" ] || printf ' %s' "$f"; done)
    if [ -n "$absent" ]; then
      echo "stages 8-9: fold $fold skipped, not decoded in every experiment: missing$absent" >&2
      continue
    fi
    out=$exp_root/$fold
    if at 8; then  # combination: each candidate word's total CTC probability, summed over the models
      run steps.decode --config "$config" --method isolated --logprobs "${lps[@]}" --lang-dir "$lang" \
        --out-dir "$out/decode_test_isolated"
      run steps.score --ref "$data/test/text" --hyp "$out/decode_test_isolated/hyp.txt" \
        --out-dir "$out/decode_test_isolated"
    fi
    if at 9; then  # speaker adaptation: each model's input transform fitted to stage 8's words, combined again
      sa=() i=0
      for e in $fuse; do
        i=$((i + 1))
        run steps.adapt_speaker --config "$config" --model "$e/$fold/final.pt" --feats "$data/fbank/test/feats.scp" \
          --utt2spk "$data/test/utt2spk" --hyp "$out/decode_test_isolated/hyp.txt" --lang-dir "$lang" \
          --out-dir "$out/sa_test_$i" --num-threads "$(cfg decode.num_threads)"
        sa+=("$out/sa_test_$i/logprobs.scp")
      done
      run steps.decode --config "$config" --method isolated --logprobs "${sa[@]}" --lang-dir "$lang" \
        --out-dir "$out/decode_test_isolated_sa"
      run steps.score --ref "$data/test/text" --hyp "$out/decode_test_isolated_sa/hyp.txt" \
        --out-dir "$out/decode_test_isolated_sa"
    fi
  done
  names=$(for e in $fuse; do basename "$e"; done | paste -sd' ')
  for fam in $(families); do
    at 8 && run local.fsdd report --data "$data_root" --exp "$exp_root" --method isolated --family $fam \
      --title "$corpus, $(echo $fuse | wc -w) models combined ($names)"
    at 9 && run local.fsdd report --data "$data_root" --exp "$exp_root" --method isolated_sa --family $fam \
      --title "$corpus, $(echo $fuse | wc -w) models combined ($names), speaker-adapted"
  done
fi
exit 0
