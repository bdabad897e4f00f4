"""Print the `uv pip install` options that give uv the package sources pip is configured with, one per line.

uv reads none of pip's configuration (pip.conf files, PIP_* variables), so without this it would see only PyPI: on a
machine whose pip takes torch's CPU build from a local --find-links folder, uv would pick PyPI's CUDA build of the
same version instead. `make install` runs this with the venv's python and passes the lines on to uv:

    index-url, extra-index-url, find-links, constraint, no-index  ->  the uv option of the same name
    and always `--index-strategy unsafe-best-match`: like pip, take the best version across all the indexes

The values come from `python -m pip config list`, with pip's precedence: a PIP_* variable over the `install`
section over the `global` one. A local find-links folder that does not exist is left out (pip skips it with a
warning; uv would stop).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Callable

# pip's option -> the uv option and whether it takes one value per whitespace-separated item
OPTIONS = {
    "index-url": ("--index-url", False),
    "extra-index-url": ("--extra-index-url", True),
    "find-links": ("--find-links", True),
    "constraint": ("--constraint", True),
}
SECTIONS = (":env:", "install", "global")  # highest precedence first


def parse_config_list(text: str) -> dict[str, str]:
    """`pip config list` output (lines `section.key='value'`) -> {key: value of the highest-precedence section}."""
    found: dict[tuple[str, str], str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        section, dot, key = name.strip().rpartition(".")
        if not sep or not dot:
            continue
        try:
            found[(section, key)] = str(ast.literal_eval(value.strip()))
        except (ValueError, SyntaxError):
            found[(section, key)] = value.strip()
    chosen: dict[str, str] = {}
    for section in reversed(SECTIONS):  # lowest precedence first, so a higher one overwrites it
        for (sec, key), value in found.items():
            if sec == section:
                chosen[key] = value
    return chosen


def _is_true(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _missing_local(location: str, exists: Callable[[str], bool]) -> bool:
    if "://" in location and not location.startswith("file://"):
        return False
    path = location.removeprefix("file://")
    return not exists(path)


def uv_args(config: dict[str, str], exists: Callable[[str], bool] = os.path.exists) -> list[str]:
    """The uv options for pip's configuration `config` (from parse_config_list)."""
    args: list[str] = []
    for key, (option, many) in OPTIONS.items():
        if key not in config:
            continue
        values = config[key].split() if many else [config[key].strip()]
        for value in values:
            if key == "find-links" and _missing_local(value, exists):
                continue
            args += [option, value]
    if _is_true(config.get("no-index", "")):
        args.append("--no-index")
    args += ["--index-strategy", "unsafe-best-match"]
    return args


def main() -> int:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    print("\n".join(uv_args(parse_config_list(listed))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
