#!/usr/bin/env bash
# Run a recipe's stages as asrlib/pipeline.py declares them (python -m steps.plan --run), Kaldi style:
#   recipes/<corpus>/run.sh [--stage N] [--stop-stage M] [--config FILE] [--data DIR] [--exp DIR] [--nj N]
#                           [--corpus-dir DIR] [--cmd "srun ..."] [--train-cmd "srun --gres=gpu:1"] [--set K=V]
#                           [--num-learners N] [--nnodes N] [--threads-per-learner N] [--rdzv-endpoint H:P]
#                           [--max-restarts N] [--python PY]
# Each recipe's run.sh is `exec utils/run_recipe.sh RECIPE_DIR "$@"`: it runs in the recipe dir (relative --data,
# --exp and --config are the recipe's), with the recipe's config.yaml unless --config names another. Every step
# skips finished work, so a rerun (or --stage N) continues where a failed or killed run stopped.
set -euo pipefail
recipe=$(cd "$1" && pwd)
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$ROOT/.venv/bin/python}
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
for ((i = 1; i <= $#; i++)); do   # the interpreter: --python PY also runs the planner itself
  case ${!i} in
    --python) j=$((i + 1)); python=${!j} ;;
    --python=*) python=${!i#--python=} ;;
    --help|-h) exec "$python" -m steps.plan --help ;;
  esac
done
cd "$recipe"
exec "$python" -m steps.plan --config "$recipe/config.yaml" --run "$@"
