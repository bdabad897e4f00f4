"""docs/configuration.md is what `python -m asrlib.config_reference` prints, and documents every key."""

from pathlib import Path

from asrlib.config_reference import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_committed_reference_is_current():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    fix = "python -m asrlib.config_reference > docs/configuration.md"
    assert page == markdown(), f"docs/configuration.md is stale: {fix}"


def test_every_key_has_a_meaning():
    rows = [line for line in markdown().splitlines() if line.startswith("| `")]
    assert len(rows) > 100
    assert [r for r in rows if r.endswith("|  |")] == []
