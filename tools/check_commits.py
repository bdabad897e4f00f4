"""Check commit messages against the project's rule (CONTRIBUTING.md, "Commits"): a subject line of at most 72
characters saying what changed, then, when there is more to say, a blank line and the detail.

    python tools/check_commits.py                 # every commit after BASE up to HEAD (make lint runs this)
    python tools/check_commits.py --range A..B    # the commits of a git revision range instead
    python tools/check_commits.py --message FILE  # one message (a commit-msg hook: .pre-commit-config.yaml)

Commits up to ``BASE`` (the last one before the rule) are exempt. A failure names each offending commit, its
subject and what is wrong (how long the subject is). Exit status: 0 when every message keeps the rule, 1 when one
does not, 2 when the commits cannot be listed (not a git checkout; a clone without ``BASE``, e.g. a shallow one).
Standard library only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

BASE = "fdd31829914840d71282a12a91652835e1722e6c"  # fdd3182: the last commit before the rule
MAX_SUBJECT = 72


class GitError(Exception):
    """The commits could not be listed."""


def problems(message: str) -> List[str]:
    """What is wrong with one commit message (empty: nothing)."""
    lines = message.rstrip("\n").split("\n")
    subject = lines[0]
    found = []
    if not subject.strip():
        found.append("the subject line is empty")
    elif len(subject) > MAX_SUBJECT:
        found.append(f"the subject is {len(subject)} characters long, {len(subject) - MAX_SUBJECT} over {MAX_SUBJECT}")
    if len(lines) > 1 and lines[1].strip():
        found.append("the second line is not blank (subject, blank line, then the detail)")
    return found


def commit_messages(rev_range: str, repo: Optional[Path] = None) -> List[Tuple[str, str]]:
    """``(commit, raw message)`` of each commit of ``rev_range`` (``git log``'s order: newest first)."""

    def git(*args: str) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, encoding="utf-8")
        except FileNotFoundError:
            raise GitError("git is not installed") from None

    if git("rev-parse", "--git-dir").returncode != 0:
        raise GitError(f"{(repo or Path.cwd()).resolve()} is not a git checkout: there are no commits to check")
    for rev in rev_range.split(".."):
        if rev and git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").returncode != 0:
            shallow = git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
            raise GitError(
                f"commit {rev} is not in this clone"
                + (" (a shallow clone: run `git fetch --unshallow`)" if shallow else "")
                + "; the commits after it cannot be listed"
            )
    out = git("log", "-z", "--format=%H%n%B", rev_range)
    if out.returncode != 0:
        raise GitError(f"git log {rev_range} failed: {out.stderr.strip()}")
    found = []
    for record in out.stdout.split("\0"):
        if record.strip():
            commit, _, message = record.lstrip("\n").partition("\n")
            found.append((commit, message))
    return found


def message_of_file(path: Path) -> str:
    """A message as ``git commit`` will record it: comment lines and what follows the scissors line dropped,
    blank lines at the start dropped."""
    lines = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.startswith("# ------------------------ >8 ------------------------"):
            break
        if not line.startswith("#"):
            lines.append(line.rstrip())
    return "\n".join(lines).lstrip("\n")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--range", default=f"{BASE}..HEAD", help="git revision range to check (default: BASE..HEAD)")
    p.add_argument("--message", type=Path, help="check this message file instead (commit-msg hook)")
    p.add_argument("--repo", type=Path, default=None, help="the git checkout (default: the current directory)")
    a = p.parse_args(argv)
    if a.message is not None:
        bad = problems(message_of_file(a.message))
        for why in bad:
            print(f"commit message: {why}", file=sys.stderr)
        if bad:
            print("the rule: a subject line of at most 72 characters, a blank line, then the detail", file=sys.stderr)
        return 1 if bad else 0
    try:
        commits = commit_messages(a.range, a.repo)
    except GitError as e:
        print(f"check_commits: {e}", file=sys.stderr)
        return 2
    shown = a.range.replace(BASE, BASE[:7])
    failed = 0
    for commit, message in commits:
        bad = problems(message)
        if bad:
            failed += 1
            subject = message.split("\n", 1)[0]
            print(f"commit {commit[:10]} \"{subject[:60]}{'...' if len(subject) > 60 else ''}\":", file=sys.stderr)
            for why in bad:
                print(f"  {why}", file=sys.stderr)
    if failed:
        print(
            f"check_commits: {failed} of {len(commits)} commit(s) in {shown} break the rule (CONTRIBUTING.md, "
            "Commits: a subject of at most 72 characters, a blank line, then the detail); reword them with "
            "`git rebase -i` before they reach main",
            file=sys.stderr,
        )
        return 1
    print(f"check_commits: {len(commits)} commit(s) in {shown}: subjects of at most {MAX_SUBJECT} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
