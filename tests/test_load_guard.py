"""Every model and checkpoint load goes through asrlib/io/torchfile.py (torch's weights-only unpickler, issue 73).

The package, steps/, local/ and bench/ are parsed (not grepped: a call split over lines or imported under another
name counts too) for calls that can run a file's code when it is read: ``torch.load`` (and ``torch.serialization``'s
and ``torch.jit``'s), ``pickle.load(s)`` and ``pickle.Unpickler`` (and ``_pickle``/``cPickle``/``dill``/``joblib``),
``marshal.load(s)``, ``shelve.open``, ``pandas.read_pickle``, ``numpy.load`` with ``allow_pickle`` other than False,
``yaml.load`` without a safe loader, ``yaml.unsafe_load`` / ``full_load``. The only places allowed are the two
modules whose job it is, each for its own call: ``torchfile.py`` (``torch.load(..., weights_only=True)``) and
``old_pickles.py`` (an ``Unpickler`` that builds numpy data and nothing else, for ``asr convert-model --trust``).
The scanner itself is checked on a sample of every pattern, so this test fails if it stops seeing one."""

import ast
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("asrlib", "steps", "local", "bench")
# file -> the calls it may make (each with the reason in the module docstring above)
ALLOWED = {
    "asrlib/io/torchfile.py": {"torch.load"},
    "asrlib/io/old_pickles.py": {"pickle.Unpickler"},
}
UNPICKLING = {
    "torch.load",
    "torch.serialization.load",
    "torch.jit.load",
    "pickle.load",
    "pickle.loads",
    "pickle.Unpickler",
    "_pickle.load",
    "_pickle.loads",
    "_pickle.Unpickler",
    "cPickle.load",
    "cPickle.loads",
    "dill.load",
    "dill.loads",
    "joblib.load",
    "marshal.load",
    "marshal.loads",
    "shelve.open",
    "pandas.read_pickle",
    "yaml.unsafe_load",
    "yaml.full_load",
    "yaml.unsafe_load_all",
    "yaml.full_load_all",
}
SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}
ALIASES = {"np": "numpy", "pd": "pandas"}


def _dotted(node: ast.AST, names: dict) -> str:
    """``a.b.c`` of an attribute chain, its first name resolved through the file's imports ("" if not a name)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    head = names.get(node.id, ALIASES.get(node.id, node.id))
    return ".".join([head] + parts[::-1])


def _imports(tree: ast.AST) -> dict:
    """Local name -> what it is (``import numpy as np``: np -> numpy; ``from pickle import loads as l``: l ->
    pickle.loads), wherever the import is (lazy imports in functions count)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _kw(call: ast.Call, name: str):
    return next((k.value for k in call.keywords if k.arg == name), None)


def unsafe_loads(source: str) -> List[Tuple[int, str]]:
    """(line, what) for every call in ``source`` that can unpickle (or otherwise run code from) what it reads."""
    tree = ast.parse(source)
    names = _imports(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):  # class X(pickle.Unpickler): an unpickler of one's own
            for base in node.bases:
                if _dotted(base, names) in UNPICKLING:
                    found.append((node.lineno, _dotted(base, names)))
        if not isinstance(node, ast.Call):
            continue
        what = _dotted(node.func, names)
        if what in UNPICKLING:
            weights_only = _kw(node, "weights_only")
            if what == "torch.load" and not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                what += " without weights_only=True"
            found.append((node.lineno, what))
        elif what == "numpy.load":
            allow = _kw(node, "allow_pickle")
            if allow is not None and not (isinstance(allow, ast.Constant) and allow.value is False):
                found.append((node.lineno, "numpy.load(allow_pickle=...)"))
        elif what in ("yaml.load", "yaml.load_all"):
            loader = _kw(node, "Loader") or (node.args[1] if len(node.args) > 1 else None)
            if loader is None or _dotted(loader, names).split(".")[-1] not in SAFE_YAML_LOADERS:
                found.append((node.lineno, what + " without a safe Loader"))
    return sorted(found)


def _scanned_files():
    for top in SCANNED:
        yield from sorted((ROOT / top).rglob("*.py"))


def test_every_load_goes_through_torchfile():
    files = list(_scanned_files())
    assert len(files) > 100 and ROOT / "asrlib/io/torchfile.py" in files  # the walk did find the code
    bad, used = [], set()
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        for line, what in unsafe_loads(path.read_text()):
            if what in ALLOWED.get(rel, ()):
                used.add((rel, what))
            else:
                bad.append(f"{rel}:{line}: {what}")
    assert bad == [], "load torch files with asrlib.io.torchfile.load_torch; nothing else may unpickle:\n" + "\n".join(
        bad
    )
    # each exception is still needed (a stale one would let that module's next unsafe call through unseen)
    assert used == {(f, w) for f, ws in ALLOWED.items() for w in ws}


def test_the_scanner_sees_every_pattern():
    sample = '''
import torch, pickle, marshal, shelve, yaml
import numpy as np
import pandas as pd
from pickle import loads as from_bytes
from torch import load
import joblib

def f(p, b):
    torch.load(p)                                 # 10
    torch.load(p, weights_only=False)             # 11
    load(p, weights_only=True)                    # 12: allowed form, but not outside torchfile.py
    torch.serialization.load(p)                   # 13
    pickle.load(open(p, "rb"))                    # 14
    from_bytes(b)                                 # 15
    np.load(p, allow_pickle=True)                 # 16
    pd.read_pickle(p)                             # 17
    marshal.loads(b)                              # 18
    shelve.open(p)                                # 19
    yaml.load(b)                                  # 20
    yaml.load(b, Loader=yaml.FullLoader)          # 21
    yaml.unsafe_load(b)                           # 22
    joblib.load(p)                                # 23
    torch.jit.load(p)                             # 24
    np.load(p, allow_pickle=flag)                 # 25

class Mine(pickle.Unpickler):                     # 27
    pass

def fine(p, b):
    np.load(p)
    np.load(p, allow_pickle=False)
    yaml.load(b, Loader=yaml.SafeLoader)
    yaml.safe_load(b)
    torch.save({}, p)
    pickle.dumps(b)
'''
    found = unsafe_loads(sample)
    assert [line for line, _ in found] == [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27], found
    assert dict(found)[10] == dict(found)[11] == "torch.load without weights_only=True"
    assert dict(found)[12] == "torch.load" and dict(found)[27] == "pickle.Unpickler"
