"""Shared plumbing for the ``steps/`` and ``local/`` command-line scripts.

:func:`run_main` runs a step's ``main`` holding the lock of the directory it writes into (by convention the one
given with ``--out-dir`` or ``--exp-dir``; a step that writes elsewhere names its option, e.g. prepare_lang's
``--lang-dir``), so that two runs of the same recipe at once cannot write into the same directory: the second
refuses with a message naming the lock and its holder. Errors the user can fix become one ``ERROR`` line.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

from asrlib.errors import AsrError
from asrlib.io.atomic import disk_write_error
from asrlib.io.stage import dir_lock


def setup_logging(log_file: Optional[Path] = None, level: int = logging.INFO) -> None:
    """Log to stderr and, when given, to a plain-text file as well."""
    handlers: List[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file))
    logging.basicConfig(
        level=level,
        handlers=handlers,
        force=True,
        format="%(asctime)s %(levelname)s [%(name)s] %(message)s",
        datefmt="%H:%M:%S",
    )


OUTPUT_DIR_OPTIONS = ("--out-dir", "--exp-dir")  # by convention, the directory a step writes into


def env_with_root(root: os.PathLike | str, env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``env`` (default: this process's environment) with ``root`` first on PYTHONPATH and the entries already there
    kept after it, so a child ``python -m steps.X`` finds this checkout and still finds packages the caller put on
    PYTHONPATH (a cluster's module system, a folder of carried wheels)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    return env


def option_values(argv: Sequence[str], options: Sequence[str]) -> Dict[str, Optional[str]]:
    """``{option: value or None}`` for the exact option names ``options`` in ``argv`` (``--opt V`` or ``--opt=V``;
    everything else in ``argv`` is ignored). An option given without a value counts as absent (the step's own
    parser says so)."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for opt in options:
        p.add_argument(opt, dest=opt)
    try:
        known, _ = p.parse_known_args(list(argv))
    except argparse.ArgumentError:
        return {opt: None for opt in options}
    return {opt: getattr(known, opt) for opt in options}


def output_dirs(argv: Sequence[str], options: Sequence[str] = OUTPUT_DIR_OPTIONS) -> List[Path]:
    """The directories that ``argv`` names with ``options`` (exact option names, ``--opt DIR`` or ``--opt=DIR``).

    Under torchrun only the learner with RANK 0 returns them: it holds the locks for the whole job, so the
    other learners of the same run (which write only their own logs) are not locked out.
    """
    if not options or os.environ.get("RANK", "0") != "0":
        return []
    return [Path(v) for v in option_values(argv, options).values() if v]


@contextlib.contextmanager
def output_locks(argv: Sequence[str], options: Sequence[str] = OUTPUT_DIR_OPTIONS) -> Iterator[List[Path]]:
    """Hold :func:`asrlib.io.stage.dir_lock` on every directory ``argv`` names with ``options``."""
    dirs = output_dirs(argv, options)
    with contextlib.ExitStack() as stack:
        for d in dirs:
            stack.enter_context(dir_lock(d))
        yield dirs


def run_main(
    main: Callable[[Optional[List[str]]], Optional[int]],
    argv: Optional[List[str]] = None,
    writes: Sequence[str] = OUTPUT_DIR_OPTIONS,
) -> None:
    """Run a step's ``main`` holding the lock of its output directories, the ones given by the options ``writes``
    (:func:`output_locks`: a second run writing there at the same time refuses to start).

    An :class:`AsrError`, and a write the disk could not take (full, over quota, read-only: see
    :func:`asrlib.io.atomic.disk_write_error`), become one ``ERROR:`` line and exit status 2 (no traceback).
    """
    args = sys.argv[1:] if argv is None else argv
    try:
        with output_locks(args, writes):
            rc = main(argv)
    except (AsrError, OSError) as e:
        err = e if isinstance(e, AsrError) else disk_write_error(e)
        if err is None:
            raise
        prog = Path(sys.argv[0]).stem
        print(f"ERROR [{prog}]: {err}", file=sys.stderr)
        sys.exit(2)
    sys.exit(rc or 0)


# the directory options of the steps (python -m steps.X), one meaning each
STEP_DIRS = {
    "data-dir": "holds the Kaldi data dirs <set>/ (text, wav.scp, utt2spk, ...)",
    "feats-dir": "holds <set>/feats.scp and the training set's cmvn.scp",
    "lang-dir": "lang dir: tokens.txt, words.txt, lexicon.txt (and TLG.fst)",
    "ali-dir": "steps.align output: <set>/pdf.scp, info.json",
    "exp-dir": "experiment dir (written)",
}


def step_parser(doc: Optional[str], dirs: Sequence[str] = (), sets: Sequence[str] = ("train", "dev")
                ) -> argparse.ArgumentParser:  # fmt: skip
    """A step's argument parser: ``--config``/``--set``, the required directory options ``dirs`` (keys of
    :data:`STEP_DIRS`) and ``--train-set`` / ``--dev-set`` for the ``sets`` named."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    for d in dirs:
        p.add_argument(f"--{d}", type=Path, required=True, help=STEP_DIRS[d])
    for s in sets:
        p.add_argument(f"--{s}-set", default=s)
    return p


def add_config_args(p: argparse.ArgumentParser, required: bool = True, help: str = "recipe YAML config") -> None:
    """``--config FILE`` and the repeatable ``--set SECTION.KEY=VALUE`` (``overrides``) of every command."""
    p.add_argument("--config", required=required, help=help)
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value (repeatable)",
    )
