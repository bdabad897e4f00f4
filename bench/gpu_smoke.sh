#!/usr/bin/env bash
# The GPU smoke test of issue 25 on a CUDA machine: install what bench/gpu_smoke.py needs into .venv-gpu, then run it
# (one epoch of the digits recipe in bf16, utterances/s, peak GPU memory, test WER, resume of the GPU checkpoint on
# the CPU, 1 against 2 learners when there are two GPUs; last line one JSON object).
#
#   bash bench/gpu_smoke.sh [--wheels DIR] [bench/gpu_smoke.py options, e.g. --data recipes/digits/data --quick]
#
# torch: the machine's own when it already sees a GPU (a CUDA image's python3; the venv sees its site-packages),
# else the pinned torch==2.13.0 from PyPI, whose Linux x86_64 wheels are CUDA builds (this project's .venv holds the
# CPU build, which cannot run CUDA code). The rest of requirements.txt is installed as pinned. Without internet,
# --wheels DIR installs from a folder of wheels (pip download -r requirements.txt -d DIR on a connected machine).
# The digits data (stages 1-3: espeak-ng/flite synthesis, fbank, lang) must exist: run `make run` or
# `recipes/digits/run.sh --stop-stage 3` on a machine with the TTS packages and copy recipes/digits/data over.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GPU_VENV:-.venv-gpu}
PYTHON=${PYTHON:-python3}
pip_opts=(-q --disable-pip-version-check)
if [ "${1:-}" = "--wheels" ]; then
  pip_opts+=(--no-index --find-links "$2")
  shift 2
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv --system-site-packages "$VENV"
py="$VENV/bin/python"
if ! "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "gpu_smoke: installing torch==2.13.0 (CUDA build) into $VENV"
  "$py" -m pip install "${pip_opts[@]}" torch==2.13.0
fi
grep -v '^torch==' requirements.txt > "$VENV/requirements-without-torch.txt"
"$py" -m pip install "${pip_opts[@]}" -r "$VENV/requirements-without-torch.txt"
if ! "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  echo "gpu_smoke: torch $("$py" -c 'import torch; print(torch.__version__)') sees no CUDA device here;" \
       "for the CPU dry run of the same steps: .venv/bin/python bench/gpu_smoke.py --quick" >&2
  exit 1
fi
"$py" -c 'import torch; print("gpu_smoke: torch", torch.__version__, "CUDA", torch.version.cuda, "on",
  ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))'
exec "$py" bench/gpu_smoke.py --device cuda "$@"
