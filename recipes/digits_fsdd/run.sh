#!/usr/bin/env bash
# Synthetic digits + FSDD: the FSDD fold rotation of recipes/fsdd/run.sh (same stages, same report) with the 8 kHz
# synthetic corpus mixed into every training set (local/digits_fsdd.py, data.mix_weights) and the synthetic test
# voices decoded as a second test set (test_synth). Options are those of recipes/fsdd/run.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Relative --data/--exp/--config/--corpus-dir/--fuse are this recipe's paths, as in every other recipe (each run.sh works
# in its own directory): made absolute here, or ../fsdd/run.sh would read them as recipes/fsdd's.
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --data|--exp|--config|--corpus-dir)
      [ $# -ge 2 ] || { echo "$0: $1 needs a value" >&2; exit 1; }
      case $2 in /*) args+=("$1" "$2") ;; *) args+=("$1" "$here/$2") ;; esac
      shift 2 ;;
    --fuse)   # a list of experiment folders
      [ $# -ge 2 ] || { echo "$0: $1 needs a value" >&2; exit 1; }
      abs=""
      for e in $2; do case $e in /*) abs+=" $e" ;; *) abs+=" $here/$e" ;; esac; done
      args+=("$1" "${abs# }")
      shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
exec "$here/../fsdd/run.sh" --config "$here/config.yaml" --data "$here/data" --exp "$here/exp" "${args[@]}"
