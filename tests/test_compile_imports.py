"""tools/compile_imports.py: which modules `make install` imports to write their .pyc files, and that a failing one
is reported, not raised."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("compile_imports", ROOT / "tools" / "compile_imports.py")
compile_imports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compile_imports)


def test_every_step_and_the_lazy_libraries_are_listed():
    names = compile_imports.module_names()
    steps = {p.stem for p in (ROOT / "steps").glob("*.py") if p.stem != "__init__"}
    assert {f"steps.{s}" for s in steps} <= set(names)
    assert "asrlib.app.cli_asr" in names and "local.digits" in names
    assert names[-len(compile_imports.LAZY) :] == list(compile_imports.LAZY)


def test_a_failing_import_is_reported_and_the_others_still_run():
    failed = compile_imports.import_all(["json", "no_such_module_xyz", "csv"])
    assert [name for name, _ in failed] == ["no_such_module_xyz"]
    assert "ModuleNotFoundError" in failed[0][1]
