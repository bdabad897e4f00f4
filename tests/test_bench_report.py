"""bench/report.py: docs/benchmarks.md's table is what the generator writes from bench/results, every results file a
docs page cites is in it, and a results file without its commit and date is refused until stamped."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402  (bench/ is not a package)


def test_committed_page_is_current():
    page = report.PAGE.read_text(encoding="utf-8")
    assert report.page(page) == page, "docs/benchmarks.md is stale: run python bench/report.py"


def test_check_fails_on_a_stale_page_and_passes_once_rewritten(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "benchmarks.md"
    text = report.PAGE.read_text(encoding="utf-8")
    stale.write_text(text.replace("| `augment_speed.py` | warp + masks", "| `augment_speed.py` | warp and masks", 1))
    monkeypatch.setattr(report, "PAGE", stale)
    assert report.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert report.main([]) == 0
    assert stale.read_text(encoding="utf-8") == text
    assert report.main(["--quick"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["current"] is True


def test_every_results_file_a_docs_page_cites_is_in_the_table():
    listed = {r.file for r in report.RESULTS}
    names = {p.name for p in report.RESULTS_DIR.glob("*.json")}
    cited = {}
    for page in (ROOT / "docs").glob("*.md"):
        if page.name == "benchmarks.md":
            continue
        for name in re.findall(r"[\w.-]+\.json", page.read_text(encoding="utf-8")):
            if name in names:
                cited.setdefault(name, page.name)
    assert {n: p for n, p in cited.items() if n not in listed} == {}


def test_every_row_reads_its_file():
    rows = [line for line in report.table().splitlines() if line.startswith("| `")]
    assert len(rows) == len(report.RESULTS)
    for row in rows:
        commit, date = [c.strip() for c in row.strip("|").split("|")][-2:]
        assert re.fullmatch(r"[0-9a-f]{7,40}", commit) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), row


def test_a_results_file_without_commit_and_date_is_refused_until_stamped(tmp_path, monkeypatch):
    result = {
        "bench": "augment_speed",
        "shape": [1, 2, 3],
        "ms_per_call": {"threads1": {"warp_masks": 1.0, "warp_masks_as_fill": 2.0, "lhotse_time_warp80": 3.0}},
    }
    path = tmp_path / "augment_speed.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(report, "RESULTS", [report.Result(path.name, "augment_speed.py", report.augment_speed, "cmd")])
    with pytest.raises(SystemExit, match="--stamp"):
        report.table()

    assert report.stamp(path) is True
    stamped = json.loads(path.read_text())
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    assert stamped["commit"] == head.strip() and stamped["date"] == time.strftime("%Y-%m-%d")
    assert path.read_text().splitlines()[1].startswith('  "bench"')  # the file's own indent kept
    assert report.stamp(path) is False  # a stamped file is left as it is
    row = [line for line in report.table().splitlines() if line.startswith("| `")]
    assert row == [
        f"| `augment_speed.py` | warp + masks on a 1 x 2 x 3 batch, 1 thread: 1.0 ms (as one fill 2.0; "
        f"lhotse's 3.0) | `cmd` | `augment_speed.json` | {stamped['commit']} | {stamped['date']} |"
    ]


def test_benches_without_a_result_are_named():
    tail = report.table().split("Benches without a committed result:")[1]
    for bench in ("chaos.py", "network_calls.py"):
        assert f"`{bench}`" in tail
    assert "`long_form.py`" not in tail and "`report.py`" not in tail
