#!/usr/bin/env bash
# The generic stages every recipe shares (sourced by recipes/<corpus>/run.sh after its corpus-specific data stage).
# Each function calls the same `python -m steps.*` commands as the Snakefile's rules; each step skips finished work.
# Expects: ROOT, python, config, data, exp, nj set by the recipe (see recipes/digits/run.sh). Optional: config_set,
# an array of --set SECTION.KEY=VALUE overrides given to every step after --config (e.g. a training seed); cmd, a
# launcher prefixed to every step (Kaldi's --cmd: e.g. "srun --ntasks=1 --cpus-per-task=4"), and train_cmd for the
# training step (default: cmd; e.g. "srun --gres=gpu:1").

export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
run() { echo "+ ${cmd:+$cmd }$*" >&2; ${cmd:-} "$python" -m "$@"; }

cfg() {  # cfg SECTION.KEY...: values of the recipe config (defaults filled in), one line, lists space-joined
  "$python" - "$config" "$@" <<'PY'
import sys
from asrlib.config import load_config
out = []
for dotted in sys.argv[2:]:
    v = load_config(sys.argv[1])
    for k in dotted.split("."):
        v = getattr(v, k)
    if isinstance(v, dict):      # a mapping: key=value pairs
        v = [f"{k}={x}" for k, x in v.items()]
    out.append(" ".join(map(str, v)) if isinstance(v, list) else str(v))
print(" ".join(out))
PY
}

stage_validate() {  # stage_validate SET...: Kaldi data dir checks; bad utterances excluded and listed
  local s sr mind maxd vals
  vals=$(cfg data.sample_rate data.min_duration data.max_duration) || return 1
  read -r sr mind maxd <<< "$vals"
  for s in "$@"; do
    run steps.validate_data_dir --data-dir "$data/$s" --vocab "${vocab:-cmudict}" --sample-rate "$sr" \
      --min-duration "$mind" --max-duration "$maxd"
  done
}

stage_features() {  # stage_features TRAIN_SET SET...: fbank for every set, global CMVN from the first
  local s mode spk=()                   # (features.cmvn: speaker — per-speaker stats of every set, then global;
                                        #  utterance — global stats over utterance-normalised features;
                                        #  online — the global stats: the model applies the causal mean itself)
  mode=$(cfg features.cmvn) || return 1
  [ "$mode" = speaker ] && spk=(--utt2spk "$data/$1/utt2spk")
  [ "$mode" = utterance ] && spk=(--cmn utterance)   # global stats over utterance-normalised features, no others
  for s in "$@"; do
    run steps.compute_fbank --config "$config" ${config_set[@]+"${config_set[@]}"} --data-dir "$data/$s" --out-dir "$data/fbank/$s" --nj "$nj"
    if [ "$mode" = speaker ] && [ "$s" != "$1" ]; then
      run steps.compute_cmvn --feats "$data/fbank/$s/feats.scp" --utt2spk "$data/$s/utt2spk" \
        --out-dir "$data/fbank/$s" --speaker-only
    fi
  done
  run steps.compute_cmvn --feats "$data/fbank/$1/feats.scp" --out-dir "$data/fbank/$1" "${spk[@]}"
}

stage_lang() {  # stage_lang TRAIN_SET: data/lang, and the lang dir of each eval set that decode.set_grammars or
  local s dir      # decode.set_words gives another grammar or vocabulary (data/lang_<grammar>, data/lang_<set>)
  run steps.prepare_lang --config "$config" ${config_set[@]+"${config_set[@]}"} --text "$data/$1/text" --lang-dir "$data/lang" || return 1
  while read -r s dir _ <&3; do
    [ "$dir" = "$data/lang" ] || run steps.prepare_lang --config "$config" ${config_set[@]+"${config_set[@]}"} --eval-set "$s" --text "$data/$1/text" \
      --lang-dir "$dir" || return 1
  done 3< <(set_langs)
}

set_langs() {  # set_langs [SET...]: "SET LANG_DIR METHOD..." lines: the lang dir that searches each SET and the
               # searches stage 5 runs on it (asrlib.config's set_lang_dir and set_decode_methods, the Snakefile's
               # too); no SET: every set decode.set_grammars or decode.set_words names
  "$python" - "$config" "$data/lang" "$@" <<'PY'
import sys
from asrlib.config import load_config, set_decode_methods, set_lang_dir
cfg = load_config(sys.argv[1])
for s in sys.argv[3:] or sorted(set(cfg.decode.set_grammars) | set(cfg.decode.set_words)):
    print(s, set_lang_dir(sys.argv[2], cfg.decode, s), *set_decode_methods(cfg, s))
PY
}

gmm_dirs() {  # where the GMM system, its alignments and the CE model go (override with mono=..., ce=...)
  mono=${mono:-$(dirname "$exp")/mono}
  ali=${mono}_ali
  ce=${ce:-${exp}_ce}
}

stage_gmm_ce() {  # stage_gmm_ce TRAIN_SET DEV_SET: monophone GMM-HMM, alignments, cross-entropy LSTM (train.init: ce)
  gmm_dirs
  run steps.train_mono --config "$config" ${config_set[@]+"${config_set[@]}"} --data-dir "$data" --feats-dir "$data/fbank" --lang-dir "$data/lang" \
    --exp-dir "$mono" --train-set "$1" || return 1
  run steps.align --config "$config" ${config_set[@]+"${config_set[@]}"} --model "$mono/final.mdl" --data-dir "$data" --feats-dir "$data/fbank" \
    --lang-dir "$data/lang" --out-dir "$ali" --sets "$1" "$2" || return 1
  cmd=${train_cmd:-${cmd:-}} run steps.train_ce --config "$config" ${config_set[@]+"${config_set[@]}"} --feats-dir "$data/fbank" --ali-dir "$ali" \
    --exp-dir "$ce" --train-set "$1" --dev-set "$2"
}

stage_train() {  # stage_train TRAIN_SET DEV_SET: CTC; with train.init: ce the GMM + CE stages run first
  local init init_opt=()
  init=$(cfg train.init) || return 1
  if [ "$init" = ce ]; then
    stage_gmm_ce "$1" "$2" || return 1
    init_opt=(--init-model "$ce/final.pt")
  fi
  local launch=(steps.train)  # several learners (train.dist.algo picks the algorithm): torchrun via steps.train_dist
  if [ "${num_learners:-1}" -gt 1 ] || [ "${nnodes:-1}" -gt 1 ] || [ "${max_restarts:-0}" -gt 0 ]; then
    launch=(steps.train_dist --num-learners "${num_learners:-1}" --nnodes "${nnodes:-1}"
            --threads-per-learner "${threads_per_learner:-1}" ${rdzv_endpoint:+--rdzv-endpoint "$rdzv_endpoint"}
            --max-restarts "${max_restarts:-0}" --)
  fi
  cmd=${train_cmd:-${cmd:-}} run "${launch[@]}" --config "$config" ${config_set[@]+"${config_set[@]}"} --data-dir "$data" --feats-dir "$data/fbank" \
    --lang-dir "$data/lang" --exp-dir "$exp" --train-set "$1" --dev-set "$2" "${init_opt[@]}"
}

stage_decode() {  # stage_decode SET...: log-posteriors as a Kaldi ark, then greedy and TLG search (+ GMM: mono),
                  # each set through its lang dir (set_langs); the GMM's HCLG in graph<the lang dir's suffix>
  local s m threads methods lang line
  threads=$(cfg decode.num_threads) || return 1
  gmm_dirs
  for s in "$@"; do
    line=$(set_langs "$s") || return 1
    read -r _ lang methods <<< "$line"
    run steps.compute_logprobs --model "$exp/final.pt" --feats "$data/fbank/$s/feats.scp" --out-dir "$exp/logprobs_$s" \
      --num-threads "$threads"
    for m in $methods; do
      if [ "$m" = mono ]; then
        run steps.decode_gmm --config "$config" ${config_set[@]+"${config_set[@]}"} --model "$mono/final.mdl" --lang-dir "$lang" \
          --feats "$data/fbank/$s/feats.scp" --graph-dir "$mono/graph${lang#"$data/lang"}" \
          --out-dir "$exp/decode_${s}_$m"
      else
        run steps.decode --config "$config" ${config_set[@]+"${config_set[@]}"} --method $m --logprobs "$exp/logprobs_$s/logprobs.scp" \
          --lang-dir "$lang" --out-dir "$exp/decode_${s}_$m"
      fi
    done
  done
}

stage_score() {  # stage_score SET...: WER per set × method (set_langs), then exp/RESULTS.md
  local s m methods line
  for s in "$@"; do
    line=$(set_langs "$s") || return 1
    read -r _ _ methods <<< "$line"
    for m in $methods; do
      run steps.score --ref "$data/$s/text" --hyp "$exp/decode_${s}_$m/hyp.txt" --out-dir "$exp/decode_${s}_$m"
    done
  done
  run steps.make_results --exp-dir "$exp"
}

stage_export() {  # stage_export TRAIN_SET DEV_SET: low-rank + pruning (fine-tuned), ONNX fp32/int8, sherpa-onnx bundle
  local bi
  bi=$(cfg model.bidirectional) || return 1
  if [ "$bi" = True ]; then  # a BLSTM needs the whole utterance: no streaming on-device model to export
    echo "stage 7 (mobile export) skipped: $config has a bidirectional model, which cannot stream on a device" \
         "(set model.bidirectional: false to get a mobile bundle)"
    return 0
  fi
  run steps.export_mobile --config "$config" ${config_set[@]+"${config_set[@]}"} --model "$exp/final.pt" --data-dir "$data" --feats-dir "$data/fbank" \
    --lang-dir "$data/lang" --out-dir "$exp/mobile" --train-set "$1" --dev-set "$2"
}
