"""tools/check_commits.py (run by `make lint`): commit subjects of at most 72 characters and a blank second line,
checked over the commits after a base, on throw-away git repositories, cloned as CI clones them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "check_commits.py"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.org",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.org",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env={**os.environ, **GIT_ENV})
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def commit(repo: Path, message: str) -> str:
    (repo / "f.txt").write_text(message)  # a change for every commit
    git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "--cleanup=verbatim", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    commit(r, "x" * 120)  # before the base: exempt
    return r


def test_commits_after_the_base_are_checked_and_each_failure_named(repo):
    base = commit(repo, "the base")
    ok = [commit(repo, "a short subject\n\nthe detail, as long as it likes " + "y" * 200), commit(repo, "x" * 72)]
    assert check("--range", f"{base}..HEAD", cwd=repo).returncode == 0
    long = commit(repo, "z" * 80 + "\n\nbody")
    glued = commit(repo, "subject\nno blank line before the detail")
    r = check("--range", f"{base}..HEAD", cwd=repo)
    assert r.returncode == 1
    assert f"commit {long[:10]}" in r.stderr and "80 characters long, 8 over 72" in r.stderr
    assert f"commit {glued[:10]}" in r.stderr and "second line is not blank" in r.stderr
    assert not any(f"commit {c[:10]}" in r.stderr for c in ok + [base])
    assert "2 of 4 commit(s)" in r.stderr


def test_a_fresh_clone_is_checked_and_a_shallow_one_says_why_not(repo, tmp_path):
    base = commit(repo, "the base")
    commit(repo, "w" * 73)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))  # full history, as CI clones
    r = check("--range", f"{base}..HEAD", cwd=clone)
    assert r.returncode == 1 and "73 characters long, 1 over 72" in r.stderr
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    r = check("--range", f"{base}..HEAD", cwd=shallow)
    assert r.returncode == 2 and f"commit {base} is not in this clone" in r.stderr and "--unshallow" in r.stderr
    r = check("--range", f"{base}..HEAD", cwd=tmp_path)  # no checkout at all
    assert r.returncode == 2 and "not a git checkout" in r.stderr


def test_the_commit_msg_hook_checks_the_message_git_will_record(tmp_path):
    msg = tmp_path / "COMMIT_EDITMSG"
    comment = "# Please enter the commit message for your changes. Lines starting with '#' will be ignored, " * 2
    msg.write_text(f"\nA subject that fits\n\nThe detail.\n{comment}\n")
    assert check("--message", str(msg), cwd=tmp_path).returncode == 0
    msg.write_text("v" * 90 + "\n" + comment + "\n")
    r = check("--message", str(msg), cwd=tmp_path)
    assert r.returncode == 1 and "90 characters long, 18 over 72" in r.stderr
    msg.write_text("subject\ndetail glued to it\n")
    assert check("--message", str(msg), cwd=tmp_path).returncode == 1


def test_the_base_is_in_this_projects_history():
    """make lint checks the commits after BASE: it must be a commit of this repository (where it is a clone)."""
    sys.path.insert(0, str(TOOL.parent))
    try:
        import check_commits
    finally:
        sys.path.remove(str(TOOL.parent))
    inside = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    if inside.returncode != 0 or inside.stdout.strip() == "true":
        pytest.skip("not a full git clone of the project")
    r = subprocess.run(["git", "cat-file", "-t", check_commits.BASE], cwd=ROOT, capture_output=True, text=True)
    assert r.stdout.strip() == "commit", r.stderr
