#!/usr/bin/env bash
# Synthetic digits + FSDD: the FSDD fold rotation of recipes/fsdd/run.sh (same stages, same report) with the 8 kHz
# synthetic corpus mixed into every training set (local/digits_fsdd.py, data.mix_weights) and the synthetic test
# voices decoded as a second test set (test_synth). Options are those of recipes/fsdd/run.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../fsdd/run.sh" --config "$here/config.yaml" --data "$here/data" --exp "$here/exp" "$@"
