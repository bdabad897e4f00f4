"""Memory of a process that runs torch's CPU LSTM on inputs of ever new lengths (a recogniser's segments): importing
asrlib bounds oneDNN's per-shape primitive cache (asrlib/__init__.py), which otherwise grows by about half a MiB a
shape."""

import os
import subprocess
import sys

# the peak of this process's own memory (VmHWM): getrusage's ru_maxrss would also count the parent's, which Linux
# folds into it at exec (a large pytest process would hide the growth)
PROBE = """
import sys
if sys.argv[1] == "asrlib":
    import asrlib  # noqa: F401
import torch

def peak_kib():
    return int(next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1])

torch.set_num_threads(1)
lstm = torch.nn.LSTM(80, 160, 2, bidirectional=True, batch_first=True).eval()
with torch.inference_mode():
    lstm(torch.randn(1, 50, 80))
    before = peak_kib()
    for t in range(100, 400):
        lstm(torch.randn(1, t, 80))
print((peak_kib() - before) / 1024)
"""


def _growth_mib(mode: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}  # as a fresh shell has it
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def test_asrlib_bounds_the_memory_of_lstm_inference_over_many_input_lengths():
    assert _growth_mib("asrlib") < 40
    assert _growth_mib("plain") > 100  # without it: what the bound is for (300 shapes)
