"""The error type of the toolkit: :class:`AsrError` is a problem with the user's input or set-up, printed as one
clear message without a traceback (:func:`asrlib.cli.run_main`)."""

from __future__ import annotations

import os
from typing import Union


PathLike = Union[str, os.PathLike]


class AsrError(Exception):
    """An error caused by the user's input or set-up; printed as one clear message, without a traceback."""
