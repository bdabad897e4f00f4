"""Older asrlib files were Python pickles: converting them rebuilds data only, never runs the file's code.

``asr convert-model --trust`` rewrites such a file in today's safe format. Trust is the user's word that the file
should be converted, not a licence for the file to run code: the pickle is read by an unpickler that builds only
what those files held — numpy arrays and scalars (:data:`NUMPY_DATA`, through numpy's own reconstruction
functions) and, in GMM models, the kaldi-hmm-gmm types asrlib stores — and refuses any other global (``os.system``,
``builtins.open``, ...) with an :class:`AsrError` naming it. Torch files go through torch's ``weights_only``
unpickler with the numpy globals allowed (:func:`torch_numpy_globals`); GMM pickles through :func:`load_data`.
"""

from __future__ import annotations

import pickle
from typing import Any, BinaryIO, Dict, List, Tuple

import numpy as np
from numpy._core import multiarray

from asrlib.errors import AsrError

Global = Tuple[str, str]  # (module, name) as a pickle names it
# numpy's data constructors, under the module names of numpy 2 and of numpy 1 (which pickled them as numpy.core)
NUMPY_DATA: Dict[Global, Any] = {
    (mod, name): obj
    for mod in ("numpy._core.multiarray", "numpy.core.multiarray")
    for name, obj in (("_reconstruct", multiarray._reconstruct), ("scalar", multiarray.scalar))
}
NUMPY_DATA.update({("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype})


def torch_numpy_globals() -> List[Tuple[Any, str]]:
    """:data:`NUMPY_DATA` in the form ``torch.serialization.safe_globals`` takes, with numpy's dtype classes (torch's
    unpickler sets a dtype's state only on an allowed class; a plain unpickler needs no name for them)."""
    dtypes = [c for c in vars(np.dtypes).values() if isinstance(c, type) and issubclass(c, np.dtype)]
    return [(obj, f"{mod}.{name}") for (mod, name), obj in NUMPY_DATA.items()] + dtypes


class DataUnpickler(pickle.Unpickler):
    """An unpickler that builds only the globals of ``allowed`` (``{(module, name): object}``)."""

    def __init__(self, f: BinaryIO, allowed: Dict[Global, Any], where: str) -> None:
        super().__init__(f)
        self.allowed, self.where = allowed, where

    def find_class(self, module: str, name: str) -> Any:
        obj = self.allowed.get((module, name))
        if obj is None:
            raise AsrError(
                f"{self.where} holds a {module}.{name}, which no asrlib file ever held; asrlib builds only data "
                f"from an old file, so it does not convert this one (loading it could run code)"
            )
        return obj


def load_data(f: BinaryIO, allowed: Dict[Global, Any], where: str) -> Any:
    """The pickle of ``f``, built by :class:`DataUnpickler`; a damaged one is an :class:`AsrError` too."""
    try:
        return DataUnpickler(f, allowed, where).load()
    except AsrError:
        raise
    except Exception as e:  # noqa: BLE001 - a truncated or damaged pickle: EOFError, UnpicklingError, ...
        raise AsrError(f"{where} is not a readable pickle ({type(e).__name__}: {' '.join(str(e).split())[:200]})")
