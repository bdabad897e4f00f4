#!/usr/bin/env bash
# Helpers for a recipe whose run.sh does more than the shared stages (recipes/fsdd/run.sh: folds, seeds, stages
# 8-9); the shared stages themselves are declared once in asrlib/pipeline.py and run by `plan_stages`.
# Expects: ROOT, python, config, data, exp, nj set by the recipe. Optional: config_set, an array of
# --set SECTION.KEY=VALUE overrides given to every step (e.g. a training seed); cmd, a launcher prefixed to every step
# (Kaldi's --cmd: e.g. "srun --ntasks=1 --cpus-per-task=4"), and train_cmd for the training steps (default: cmd).

export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
run() { echo "+ ${cmd:+$cmd }$*" >&2; ${cmd:-} "$python" -m "$@"; }

plan_stages() {  # plan_stages FIRST LAST [steps.plan options]: the shared stages FIRST..LAST (an empty range: none)
  local first=$1 last=$2
  shift 2
  [ "$first" -le "$last" ] || return 0
  "$python" -m steps.plan --run --config "$config" ${config_set[@]+"${config_set[@]}"} --data "$data" --exp "$exp" \
    --nj "$nj" --stage "$first" --stop-stage "$last" --python "$python" --cmd "${cmd:-}" \
    ${train_cmd:+--train-cmd "$train_cmd"} "$@"
}

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

set_langs() {  # set_langs [SET...]: "SET LANG_DIR METHOD..." lines: the lang dir that searches each SET and the
               # searches stage 5 runs on it (asrlib.config's set_lang_dir and set_decode_methods, as the pipeline);
               # no SET: every set decode.set_grammars or decode.set_words names
  "$python" - "$config" "$data/lang" "$@" <<'PY'
import sys
from asrlib.config import load_config, set_decode_methods, set_lang_dir
cfg = load_config(sys.argv[1])
for s in sys.argv[3:] or sorted(set(cfg.decode.set_grammars) | set(cfg.decode.set_words)):
    print(s, set_lang_dir(sys.argv[2], cfg.decode, s), *set_decode_methods(cfg, s))
PY
}
