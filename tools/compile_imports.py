"""Import every module of the project (asrlib, steps, local) and the libraries it imports inside functions, with
bytecode writing on, so that the .pyc files of all they import exist in .venv.

uv installs without compiling (pip compiled every module: 29 s of CPU time for the 13,000 files of requirements.txt,
half of pip's install). Without .pyc files each recipe step, a process of its own, compiles what it imports, or with
PYTHONDONTWRITEBYTECODE=1 set, compiles it again in every step: importing torch, lhotse, matplotlib and the rest took
about twice the CPU time. This compiles the 1,200 or so modules the steps load in a few seconds instead. A module that
fails to import is named on stderr and skipped: the install goes on (the tests catch the failure).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("asrlib", "steps", "local")
# imported inside functions somewhere in the project (grep for indented imports)
LAZY = (
    "matplotlib.pyplot",
    "onnx",
    "onnxruntime",
    "sentencepiece",
    "kaldi_native_fbank",
    "sherpa_onnx",
    "torch.utils.tensorboard",
    "wordfreq",
)


def module_names() -> list[str]:
    """The project's modules, packages first, then the lazily imported libraries."""
    names = []
    for top in PROJECT:
        package = importlib.import_module(top)
        names.append(top)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, top + ".")]
    return names + list(LAZY)


def import_all(names: list[str]) -> list[tuple[str, str]]:
    """Import each module; return (name, error) for those that failed."""
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any import error is reported, none stops the others
            failed.append((name, f"{type(e).__name__}: {e}"))
    return failed


def main() -> int:
    sys.dont_write_bytecode = False  # PYTHONDONTWRITEBYTECODE=1 would leave nothing written
    sys.path.insert(0, str(ROOT))
    failed = import_all(module_names())
    for name, error in failed:
        print(f"compile_imports: {name} not imported ({error})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
