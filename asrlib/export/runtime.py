"""Running exported models with ONNX Runtime, without importing torch (the recogniser's memory stays small)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Tuple

import numpy as np

from asrlib.decode.search_scores import undo_search
from asrlib.errors import AsrError, PathLike


def ort_session(path: PathLike, num_threads: int = 1):
    """An ONNX Runtime CPU session with ``num_threads`` intra-op threads (and no inter-op parallelism)."""
    import onnxruntime as ort

    path = Path(path)
    if not path.is_file():
        raise AsrError(f"ONNX model {path} does not exist")
    so = ort.SessionOptions()
    so.intra_op_num_threads = num_threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - a corrupt or foreign file: one clear message
        raise AsrError(f"{path}: ONNX Runtime cannot load this model: {' '.join(str(e).split())[:300]}") from None


def model_metadata(session) -> Dict[str, str]:
    return dict(session.get_modelmeta().custom_metadata_map)


def folded_search(meta: Dict[str, str]) -> Tuple[float, float]:
    """The search an exported model's output carries (its metadata ``search_acoustic_scale``,
    ``search_blank_penalty``): the output is ``(log_softmax - blank_penalty at the blank) * acoustic_scale``, what
    sherpa-onnx's CTC graph search, which has neither setting, then searches with the recipe's. (1.0, 0.0): plain
    log-probs (a model exported before the fold, or a recipe with neither setting). Unfolded to log-probs by
    :func:`asrlib.decode.search_scores.undo_search`."""
    return float(meta.get("search_acoustic_scale", 1.0)), float(meta.get("search_blank_penalty", 0.0))


def check_features(feats: np.ndarray, feat_dim: int, where: str) -> np.ndarray:
    """(T, F) or (N, T, F) float features with F == ``feat_dim``, else AsrError."""
    feats = np.asarray(feats)
    if feats.ndim not in (2, 3) or feats.shape[-1] != feat_dim:
        raise AsrError(
            f"{where}: features have shape {feats.shape}, but the model expects {feat_dim}-dim frames "
            f"((frames, {feat_dim}) or (batch, frames, {feat_dim})); were they computed with "
            f"num_mel_bins={feat_dim}?"
        )
    return feats.astype(np.float32, copy=False)


class OnnxAcousticModel:
    """Run an exported offline model: raw fbank (T, F) → log-probs (T // stack, V)."""

    def __init__(self, path: PathLike, num_threads: int = 1):
        self.path = Path(path)
        self.session = ort_session(self.path, num_threads)
        self.meta = model_metadata(self.session)
        inputs = [i.name for i in self.session.get_inputs()]
        if inputs != ["x", "x_lens"]:
            raise AsrError(f"{self.path}: inputs are {inputs}, expected ['x', 'x_lens'] (an offline model)")
        self.feat_dim = int(self.session.get_inputs()[0].shape[2])
        self.stack = int(self.meta.get("subsampling", "3"))
        self.search = folded_search(self.meta)

    def scores(self, feats: np.ndarray) -> np.ndarray:
        """The model's output as it is: what sherpa-onnx searches (log-probs with the folded search applied)."""
        feats = check_features(feats, self.feat_dim, str(self.path))
        x = feats[None] if feats.ndim == 2 else feats
        lens = np.full((x.shape[0],), x.shape[1], dtype=np.int64)
        out, _ = self.session.run(None, {"x": x, "x_lens": lens})
        return out[0] if feats.ndim == 2 else out

    def log_probs(self, feats: np.ndarray) -> np.ndarray:
        """CTC log-probs (T // stack, V) of raw fbank (T, F) (or a batch (N, T, F))."""
        return undo_search(self.scores(feats), *self.search)


ONLINE_CMN_STATE = ("cmn_sum", "cmn_count")  # the streaming signature's extra state with features.cmvn: online


class StreamingOnnxModel:
    """Run an exported streaming model: raw fbank chunks (a multiple of ``stack`` frames) → log-probs, with the
    state (LSTM ``h`` (L, 1, P), ``c`` (L, 1, H); with online CMN also ``cmn_sum`` (1, F), ``cmn_count`` (1, 1))
    carried by the caller as one tuple (:meth:`zero_state`, :meth:`run`), or by a :meth:`stream`."""

    SIGNATURES = (["x", "h", "c"], ["x", "h", "c", *ONLINE_CMN_STATE])

    def __init__(self, path: PathLike, feat_dim: int, num_threads: int = 1):
        self.path = Path(path)
        self.session = ort_session(self.path, num_threads)
        ins = self.session.get_inputs()
        self.names = [i.name for i in ins]
        if self.names not in self.SIGNATURES:
            raise AsrError(
                f"{self.path}: inputs {self.names} are not a streaming model's {' or '.join(map(str, self.SIGNATURES))}"
            )
        if ins[0].shape[2] != feat_dim:
            raise AsrError(
                f"{self.path}: the model expects {ins[0].shape[2]}-dim features, the bundle's front end "
                f"produces {feat_dim}"
            )
        self.feat_dim = int(feat_dim)
        self.num_layers, self.state_dim, self.hidden = int(ins[1].shape[0]), int(ins[1].shape[2]), int(ins[2].shape[2])
        self.vocab_size = int(self.session.get_outputs()[0].shape[2])
        self.search = folded_search(model_metadata(self.session))

    def zero_state(self) -> Tuple[np.ndarray, ...]:
        state = (
            np.zeros((self.num_layers, 1, self.state_dim), np.float32),
            np.zeros((self.num_layers, 1, self.hidden), np.float32),
        )
        if len(self.names) == 5:
            state += (np.zeros((1, self.feat_dim), np.float32), np.zeros((1, 1), np.float32))
        return state

    def stream(self) -> "OnnxNetworkStream":
        """The network from a zero state, which carries its state from call to call."""
        return OnnxNetworkStream(self)

    def run(self, feats: np.ndarray, state: Tuple[np.ndarray, ...]) -> Tuple[np.ndarray, Tuple[np.ndarray, ...]]:
        """(log-probs [T // stack, V], the next state) for raw fbank ``feats`` [T, F] of one utterance (the folded
        search taken out of the output: :func:`asrlib.decode.search_scores.undo_search`)."""
        feeds = dict(zip(self.names, (np.ascontiguousarray(feats[None], np.float32),) + tuple(state)))
        out, *state = self.session.run(None, feeds)
        return undo_search(out[0], *self.search), tuple(state)


class OnnxNetworkStream:
    """A :class:`StreamingOnnxModel` from a zero state, its state carried: ``accept(fbank)`` (whole stacks) →
    log-probs (an endpointer's network stream, :mod:`asrlib.decode.endpoint`)."""

    def __init__(self, model: StreamingOnnxModel) -> None:
        self.model, self.state = model, model.zero_state()

    def accept(self, feats: np.ndarray) -> np.ndarray:
        scores, self.state = self.model.run(feats, self.state)
        return scores
