"""Shared plumbing for the ``steps/`` and ``local/`` command-line scripts."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Callable, List, Optional

from asrlib.io_utils import AsrError


def setup_logging(log_file: Optional[Path] = None, level: int = logging.INFO) -> None:
    """Log to stderr and, when given, to a plain-text file as well."""
    handlers: List[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file))
    logging.basicConfig(level=level, handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s [%(name)s] %(message)s", datefmt="%H:%M:%S")


def run_main(main: Callable[[Optional[List[str]]], Optional[int]], argv: Optional[List[str]] = None) -> None:
    """Run a step's ``main``: an :class:`AsrError` becomes one ``ERROR:`` line and exit status 2 (no traceback)."""
    try:
        rc = main(argv)
    except AsrError as e:
        prog = Path(sys.argv[0]).stem
        print(f"ERROR [{prog}]: {e}", file=sys.stderr)
        sys.exit(2)
    sys.exit(rc or 0)


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="recipe YAML config")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value (repeatable)")
