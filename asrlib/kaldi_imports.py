"""The one place that imports the Kaldi extension modules, in the only order that cannot hang.

kaldi_hmm_gmm must be loaded before kaldilm in a process: ``import kaldilm`` followed by ``import kaldi_hmm_gmm``
hangs forever (measured with kaldilm 1.15.5 + kaldi-hmm-gmm 1.1.4; with the OpenFst 1.8 family of kaldifst /
kaldi-decoder the same happens for those two as well). Every asrlib module therefore takes these modules from
here instead of importing them itself::

    from asrlib.kaldi_imports import kaldifst, kaldi_decoder, khg

Importing this module loads kaldi_hmm_gmm first, then kaldifst and kaldi_decoder. If kaldilm was already imported
in this process (before kaldi_hmm_gmm), loading kaldi_hmm_gmm would hang, so this module raises
:class:`KaldiImportOrderError` at once instead. kaldilm itself is only ever run as a child process
(``python -m kaldilm``, see :func:`asrlib.lang.graphs.make_arpa_fst`). ``tests/test_import_order.py`` checks both
the behaviour and that no other module imports these packages directly.
"""

from __future__ import annotations

import sys

#: Packages that only this module may import (tests/test_import_order.py enforces it).
OWNED_MODULES = ("kaldi_hmm_gmm", "kaldifst", "kaldi_decoder", "kaldilm")


class KaldiImportOrderError(ImportError):
    """kaldilm was imported before kaldi_hmm_gmm in this process: importing kaldi_hmm_gmm now would hang."""


if "kaldilm" in sys.modules and "kaldi_hmm_gmm" not in sys.modules:
    raise KaldiImportOrderError(
        "kaldilm is already imported in this process, and importing kaldi_hmm_gmm after it hangs forever. "
        "Do not import kaldilm in-process: run it as a command (python -m kaldilm ...), and import the Kaldi "
        "packages through asrlib.kaldi_imports"
    )

import kaldi_hmm_gmm as khg  # noqa: E402  (first: see the module docstring)
import kaldifst  # noqa: E402
import kaldi_decoder  # noqa: E402

__all__ = ["khg", "kaldifst", "kaldi_decoder", "KaldiImportOrderError", "OWNED_MODULES"]
