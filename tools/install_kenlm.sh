#!/bin/bash
# Build KenLM's lmplz (the disk-based modified Kneser-Ney estimator; the kenlm wheels on PyPI hold only the query
# module) from the kenlm 0.3.0 source package on PyPI, with Boost and cmake from Debian, into .venv/bin/lmplz.
# asrlib finds it there (or on PATH) for `steps.train_lm --toolkit kenlm` / `lang.lm_toolkit: kenlm`.
#
#   tools/install_kenlm.sh            # about 4 minutes on 2 cores; does nothing when .venv/bin/lmplz exists
#
# (The kenlm-ex 0.2.1 fork on PyPI, Boost-free, was tried first: its lmplz aborts on its own --help option clash and
# wrote misplaced unigram back-off weights on a test text, so it is not used.)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.venv/bin/lmplz
if [ -x "$dest" ]; then echo "lmplz already built: $dest"; exit 0; fi
[ -x .venv/bin/python ] || { echo "no .venv: run 'make install' first" >&2; exit 1; }

need=""
for f in /usr/include/boost/program_options.hpp /usr/include/boost/thread.hpp /usr/include/boost/test/unit_test.hpp \
         /usr/include/zlib.h; do
  [ -e "$f" ] || need=yes
done
command -v cmake >/dev/null && command -v g++ >/dev/null || need=yes
if [ -n "$need" ]; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq cmake g++ make zlib1g-dev libbz2-dev liblzma-dev \
    libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/python -m pip download -q --no-deps --no-binary kenlm kenlm==0.3.0 -d "$tmp"
tar -xzf "$tmp"/kenlm-0.3.0.tar.gz -C "$tmp"
cmake -S "$tmp/kenlm-0.3.0" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release >"$tmp/cmake.log" 2>&1 \
  || { tail -20 "$tmp/cmake.log" >&2; exit 1; }
make -C "$tmp/build" -j"$(nproc)" lmplz >"$tmp/make.log" 2>&1 || { tail -20 "$tmp/make.log" >&2; exit 1; }
install -m 755 "$tmp/build/bin/lmplz" "$dest"
echo "built $dest"
