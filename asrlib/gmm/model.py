"""A GMM-HMM acoustic model: HMM topology, phonetic tree, transition model and diagonal GMMs, and its files.

Files of a model directory (``exp/mono``):

- ``final.mdl``: the whole model (:data:`FORMAT` version :data:`VERSION`), holding the transition model, the GMMs,
  the tree, the topology text, the phone table and the feature settings. kaldi-hmm-gmm 1.1.4 cannot write Kaldi's
  binary ``.mdl``; its objects expose their exact state (``__getstate__``: numbers, lists, arrays and nested objects
  of its own types), which is stored as a numpy ``.npz`` archive: the arrays, and the structure as JSON. Loading
  reads it with ``allow_pickle=False`` and rebuilds only the kaldi-hmm-gmm types of :data:`KHG_TYPES` from their
  state, so a model file cannot run code (an older asrlib wrote a Python pickle: ``asr convert-model --trust``
  rewrites a trusted one);
- ``tree``: the phonetic decision tree in Kaldi's binary format (``ContextDependency::Write``; readable by Kaldi's
  ``tree-info``);
- ``topo``, ``phones.txt``: Kaldi text formats, for inspection and Kaldi tools.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from asrlib.features.cmvn import check_cmvn_mode
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_open, atomic_path, write_text
from asrlib.kaldi_imports import khg
from asrlib.gmm.feats import GmmFeatureMaker
from asrlib.gmm.lang import GmmLang, make_topology

FORMAT = "asrlib-gmm-hmm"
VERSION = 2  # 1: a Python pickle (refused; asr convert-model --trust)
# the kaldi-hmm-gmm classes a model file may hold, rebuilt from their state (nothing else is ever constructed)
KHG_TYPES = ("AmDiagGmm", "ContextDependency", "DiagGmm", "HmmState", "HmmTopology", "TransitionModel",
             "TransitionModelTuple")  # fmt: skip


@dataclass
class GmmModel:
    topo_text: str
    tree: "khg.ContextDependency"
    tm: "khg.TransitionModel"
    am: "khg.AmDiagGmm"
    phones: Dict[str, int]
    sil_phone: str
    feature_type: str = "mfcc_deltas"
    num_ceps: int = 13
    cmvn_mean: Optional[np.ndarray] = None  # the fbank's global CMVN (applied before the GMM features)
    cmvn_inv_std: Optional[np.ndarray] = None
    info: dict = field(default_factory=dict)
    _maker: Optional[GmmFeatureMaker] = field(default=None, repr=False, compare=False)

    @property
    def id2phone(self) -> Dict[int, str]:
        return {i: p for p, i in self.phones.items()}

    @property
    def sil_id(self) -> int:
        return self.phones[self.sil_phone]

    @property
    def cmn(self) -> str:
        """The mean normalisation of its fbank input (steps.train_mono records features.cmvn): ``""`` for global,
        else speaker or utterance (asrlib.features.cmvn.open_features)."""
        return check_cmvn_mode(self.info.get("cmvn") or "global")

    def features(self, fbank: np.ndarray) -> np.ndarray:
        """Raw fbank (T, D) of the feature stage -> this model's features (CMVN, then MFCC + deltas or fbank)."""
        if self._maker is None:
            self._maker = GmmFeatureMaker(self.feature_type, self.num_ceps)
        x = np.asarray(fbank, dtype=np.float32)
        if self.cmvn_mean is not None:
            if x.ndim != 2 or x.shape[1] != len(self.cmvn_mean):
                raise AsrError(
                    f"features of shape {x.shape} do not match the GMM's {len(self.cmvn_mean)}-dim "
                    f"fbank (other feature settings?)"
                )
            x = (x - self.cmvn_mean) * self.cmvn_inv_std
        return self._maker(x)

    def num_gauss(self) -> int:
        return int(self.am.num_gauss)

    def pdf_of_tid(self) -> np.ndarray:
        """Array indexed by transition id (0 unused) giving the pdf id."""
        return np.asarray([-1] + [self.tm.transition_id_to_pdf(t) for t in range(1, self.tm.num_transition_ids + 1)])

    def phone_of_tid(self) -> np.ndarray:
        return np.asarray([0] + [self.tm.transition_id_to_phone(t) for t in range(1, self.tm.num_transition_ids + 1)])

    def pdf_phones(self) -> List[str]:
        """For every pdf id, the phone it belongs to (monophone: exactly one)."""
        out = [""] * int(self.tm.num_pdfs)
        names = self.id2phone
        for t in range(1, self.tm.num_transition_ids + 1):
            out[self.tm.transition_id_to_pdf(t)] = names[self.tm.transition_id_to_phone(t)]
        return out


def init_mono(
    lang: GmmLang,
    topo_text: str,
    global_mean: np.ndarray,
    global_var: np.ndarray,
    feature_type: str,
    num_ceps: int,
    cmvn_mean: Optional[np.ndarray] = None,
    cmvn_inv_std: Optional[np.ndarray] = None,
) -> GmmModel:
    """Kaldi's gmm-init-mono: one Gaussian per pdf, all equal to the global mean and variance of the features."""
    topo = make_topology(topo_text)
    tree = khg.monophone_context_dependency(
        phones=topo.phones, phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes()
    )
    dim = len(global_mean)
    proto = khg.DiagGmm(nmix=1, dim=dim)
    proto.set_weights(np.ones(1, dtype=np.float32))
    proto.set_means(np.asarray(global_mean, dtype=np.float32)[None, :])
    proto.set_invvars((1.0 / np.maximum(np.asarray(global_var, dtype=np.float32), 1e-6))[None, :])
    proto.compute_gconsts()
    am = khg.AmDiagGmm()
    for _ in range(tree.num_pdfs):
        am.add_pdf(proto)
    tm = khg.TransitionModel(ctx_dep=tree, hmm_topo=topo)
    return GmmModel(
        topo_text, tree, tm, am, dict(lang.phones), lang.sil_phone, feature_type, num_ceps, cmvn_mean, cmvn_inv_std
    )


def _encode(obj, arrays: List[np.ndarray]):
    """``obj`` as JSON-able data; arrays (and bytes) appended to ``arrays`` and referred to by index."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (np.ndarray, bytes)):
        arrays.append(np.frombuffer(obj, np.uint8) if isinstance(obj, bytes) else np.asarray(obj))
        return {"$bytes" if isinstance(obj, bytes) else "$array": len(arrays) - 1}
    if isinstance(obj, list):
        return [_encode(v, arrays) for v in obj]
    if isinstance(obj, tuple):
        return {"$tuple": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, dict):
        return {"$dict": [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]}
    name = type(obj).__name__
    if name in KHG_TYPES and type(obj).__module__.lstrip("_") == "kaldi_hmm_gmm":
        return {"$khg": name, "state": _encode(obj.__getstate__(), arrays)}
    raise TypeError(f"cannot store a {type(obj).__module__}.{name} in a GMM model file")


def _decode(x, arrays, where: Path):
    """The inverse of :func:`_encode`: plain data, arrays, and objects of :data:`KHG_TYPES` only."""
    if isinstance(x, list):
        return [_decode(v, arrays, where) for v in x]
    if not isinstance(x, dict):
        return x
    if "$array" in x or "$bytes" in x:
        key = f"a{int(x.get('$array', x.get('$bytes')))}"
        if key not in arrays:
            raise AsrError(f"{where}: damaged GMM model (array {key} missing); rerun steps.train_mono")
        return arrays[key] if "$array" in x else arrays[key].tobytes()
    if "$tuple" in x:
        return tuple(_decode(v, arrays, where) for v in x["$tuple"])
    if "$dict" in x:
        return {_decode(k, arrays, where): _decode(v, arrays, where) for k, v in x["$dict"]}
    if x.get("$khg") in KHG_TYPES:
        import _kaldi_hmm_gmm

        cls = getattr(_kaldi_hmm_gmm, x["$khg"])
        obj = cls.__new__(cls)
        obj.__setstate__(_decode(x["state"], arrays, where))
        return obj
    raise AsrError(f"{where}: damaged GMM model (unknown entry {str(x)[:80]}); rerun steps.train_mono")


def save_gmm(model: GmmModel, model_dir: PathLike, name: str = "final.mdl") -> Path:
    """Write ``name`` (npz: arrays + JSON structure), ``tree`` (Kaldi binary), ``topo`` and ``phones.txt``
    atomically."""
    model_dir = Path(model_dir)
    path = model_dir / name
    state = {
        "format": FORMAT,
        "version": VERSION,
        "topo_text": model.topo_text,
        "tree": model.tree,
        "transition_model": model.tm,
        "am": model.am,
        "phones": model.phones,
        "sil_phone": model.sil_phone,
        "feature_type": model.feature_type,
        "num_ceps": model.num_ceps,
        "cmvn_mean": model.cmvn_mean,
        "cmvn_inv_std": model.cmvn_inv_std,
        "info": model.info,
    }
    arrays: List[np.ndarray] = []
    structure = json.dumps(_encode(state, arrays)).encode("utf-8")
    with atomic_open(path, "wb") as f:
        np.savez(f, structure=np.frombuffer(structure, np.uint8), **{f"a{i}": a for i, a in enumerate(arrays)})
    with atomic_path(model_dir / "tree") as tmp:
        model.tree.write(True, str(tmp))
    write_text(model_dir / "topo", model.topo_text)
    rows = [("<eps>", 0)] + sorted(model.phones.items(), key=lambda kv: kv[1])
    write_text(model_dir / "phones.txt", "".join(f"{p} {i}\n" for p, i in rows))
    return path


def load_gmm(path: PathLike) -> GmmModel:
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"GMM model {path} does not exist (run steps.train_mono first)")
    with open(path, "rb") as f:
        head = f.read(2)
    if head[:1] == b"\x80":  # a pickle (protocol 2+): what asrlib wrote before VERSION 2
        raise AsrError(
            f"{path} is a GMM model in the old format, a Python pickle, which could run code when loaded; asrlib "
            f"refuses it. If you trust where it came from, convert it once with `asr convert-model --trust {path}`, "
            f"or rerun steps.train_mono"
        )
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        st = _decode(json.loads(arrays.pop("structure").tobytes().decode("utf-8")), arrays, path)
    except AsrError:
        raise
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: zip, JSON or kaldi-hmm-gmm errors
        raise AsrError(
            f"{path} is not a readable GMM model ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
            f"rerun steps.train_mono"
        ) from None
    if not isinstance(st, dict) or st.get("format") != FORMAT or st.get("version") != VERSION:
        raise AsrError(f"{path} is not an {FORMAT} model of version {VERSION}; rerun steps.train_mono")
    return _from_state(st)


# the model's fields in a file's state, in GmmModel's order (then "info", optional)
STATE_KEYS = ("topo_text", "tree", "transition_model", "am", "phones", "sil_phone", "feature_type", "num_ceps",
              "cmvn_mean", "cmvn_inv_std")  # fmt: skip


def _from_state(st: dict) -> GmmModel:
    return GmmModel(*(st[k] for k in STATE_KEYS), st.get("info", {}))


def convert_trusted_gmm(path: PathLike) -> bool:
    """Rewrite a GMM model of the old pickle format in the current one, in place (atomically). Returns False when it
    is already in the current format. The pickle is read by :func:`asrlib.io.old_pickles.load_data`, which builds
    numpy data and the kaldi-hmm-gmm types of :data:`KHG_TYPES` only: even a trusted file runs no code."""
    import _kaldi_hmm_gmm

    from asrlib.io.old_pickles import NUMPY_DATA, load_data

    path = Path(path)
    allowed = {**NUMPY_DATA, **{("_kaldi_hmm_gmm", n): getattr(_kaldi_hmm_gmm, n) for n in KHG_TYPES}}
    with open(path, "rb") as f:
        if f.read(1) != b"\x80":
            load_gmm(path)  # the current format (or a clear error)
            return False
        st = load_data(f.seek(0) or f, allowed, f"GMM model {path}")
    if not isinstance(st, dict) or any(k not in st for k in STATE_KEYS):
        raise AsrError(f"{path} is not an old asrlib GMM model (a pickle without its keys); rerun steps.train_mono")
    save_gmm(_from_state(st), path.parent, path.name)
    load_gmm(path)
    return True
