"""The Kaldi extension modules are imported in one place (asrlib.kaldi_imports), in the order that cannot hang."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OWNED = ("kaldi_hmm_gmm", "kaldifst", "kaldi_decoder", "kaldilm")


def _run(code: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (a hang shows up as TimeoutExpired, not as a stuck test run)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def _direct_imports(path: Path) -> list:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in OWNED]
    return found


def _tracked_sources() -> list:
    out = subprocess.run(
        ["git", "ls-files", "asrlib", "steps", "local", "bench"], cwd=ROOT, capture_output=True, text=True
    )
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.stdout.split() if p.endswith(".py")]


def test_owned_list_matches_module():
    from asrlib import kaldi_imports

    assert tuple(kaldi_imports.OWNED_MODULES) == OWNED


def test_only_kaldi_imports_imports_the_kaldi_packages():
    offenders = [hit for p in _tracked_sources() if p.name != "kaldi_imports.py" for hit in _direct_imports(p)]
    assert not offenders, "import these through asrlib.kaldi_imports (kaldi_hmm_gmm must come first): " + "; ".join(
        offenders
    )


def test_scanner_sees_a_direct_import(tmp_path):
    # the scan above can fail: a file with a direct import is reported
    bad = ROOT / "asrlib" / "_tmp_import_order_probe.py"
    bad.write_text("def f():\n    import kaldifst\n    from kaldi_decoder import FasterDecoder\n")
    try:
        hits = _direct_imports(bad)
    finally:
        bad.unlink()
    assert [h.split()[-1] for h in hits] == ["kaldifst", "kaldi_decoder"]


def test_every_order_through_asrlib_finishes():
    # the decode and graph modules first (they used to import kaldifst / kaldi_decoder directly), then the GMM code
    code = (
        "import asrlib.decode.search, asrlib.lang.graphs, asrlib.gmm.model\n"
        "import kaldilm, sys\n"  # after kaldi_hmm_gmm kaldilm is harmless
        "assert list(sys.modules).index('kaldi_hmm_gmm') < list(sys.modules).index('kaldifst')\n"
        "print('ok')"
    )
    r = _run(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_kaldilm_first_is_a_clear_error_not_a_hang():
    r = _run("import kaldilm\nimport asrlib.lang.graphs\n")
    assert r.returncode != 0
    assert "KaldiImportOrderError" in r.stderr and "python -m kaldilm" in r.stderr
