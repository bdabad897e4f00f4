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


LC_SIGNATURE = ["x", "valid", "h", "c"]  # a latency-controlled BLSTM's chunk model (asrlib.export.lc_onnx)


class LcChunkOnnxModel:
    """Run an exported LC-BLSTM chunk model (:mod:`asrlib.export.lc_onnx`): one call per window of ``N + M`` stacked
    frames, the forward state carried; its chunk size N, right context M and stack S come from the metadata.
    :meth:`stream` runs it on a stream of raw fbank frames."""

    def __init__(self, path: PathLike, feat_dim: int = 0, num_threads: int = 1):
        self.path = Path(path)
        self.session = ort_session(self.path, num_threads)
        ins = self.session.get_inputs()
        names = [i.name for i in ins]
        if names != LC_SIGNATURE:
            raise AsrError(f"{self.path}: inputs {names} are not an LC-BLSTM chunk model's {LC_SIGNATURE}")
        meta = model_metadata(self.session)
        try:
            self.n, self.m = int(meta["chunk_frames"]), int(meta["right_context"])
            self.stack = int(meta["subsampling"])
        except (KeyError, ValueError):
            raise AsrError(f"{self.path}: no chunk_frames / right_context / subsampling in its metadata") from None
        self.feat_dim = int(ins[0].shape[2])
        if feat_dim and feat_dim != self.feat_dim:
            raise AsrError(
                f"{self.path}: the model expects {self.feat_dim}-dim features, the front end produces {feat_dim}"
            )
        self.window = (self.n + self.m) * self.stack  # raw frames per call
        self.state_shapes = (tuple(ins[2].shape), tuple(ins[3].shape))
        self.vocab_size = int(self.session.get_outputs()[0].shape[2])
        self.search = folded_search(meta)

    def stream(self) -> "LcOnnxNetworkStream":
        return LcOnnxNetworkStream(self)

    def run(self, frames: np.ndarray, keep: int, state: Tuple[np.ndarray, np.ndarray]):
        """One window (its real raw frames, at most :attr:`window`) from ``state`` → (log-probs of its first ``keep``
        output frames, the state after the chunk)."""
        x = np.zeros((1, self.window, self.feat_dim), np.float32)
        x[0, : len(frames)] = frames
        valid = np.array([len(frames) // self.stack], np.int64)
        out, h, c = self.session.run(None, {"x": x, "valid": valid, "h": state[0], "c": state[1]})
        return undo_search(out[0, :keep], *self.search), (h, c)


class LcOnnxNetworkStream:
    """An :class:`LcChunkOnnxModel` on a stream of raw fbank frames (any number at a time): :meth:`accept` returns
    the log-probs of every chunk whose window (N + M stacked frames) is complete, :meth:`finish` the rest (frames
    short of a last stack dropped). The concatenated output equals the whole-utterance model's."""

    def __init__(self, model: LcChunkOnnxModel) -> None:
        self.model = model
        self.state = tuple(np.zeros(s, np.float32) for s in model.state_shapes)
        self.buf = np.zeros((0, model.feat_dim), np.float32)  # raw frames from the current chunk's start
        self.empty = np.zeros((0, model.vocab_size), np.float32)
        self.frames_out = 0
        self.lag = model.n + model.m  # output frames held back at most (an endpointer's NetworkStream)

    def _emit(self, frames: np.ndarray, keep: int) -> np.ndarray:
        out, self.state = self.model.run(frames, keep, self.state)
        self.frames_out += keep
        return out

    def accept(self, feats: np.ndarray) -> np.ndarray:
        mdl = self.model
        feats = np.asarray(feats, np.float32).reshape(-1, mdl.feat_dim)
        self.buf = np.concatenate([self.buf, feats]) if len(self.buf) else feats
        step, out = mdl.n * mdl.stack, []
        while len(self.buf) >= mdl.window:
            out.append(self._emit(self.buf[: mdl.window], mdl.n))
            self.buf = self.buf[step:]
        return np.concatenate(out) if out else self.empty

    def finish(self) -> np.ndarray:
        mdl = self.model
        buf = self.buf[: len(self.buf) // mdl.stack * mdl.stack]
        out, step = [], mdl.n * mdl.stack
        while len(buf):
            out.append(self._emit(buf[: mdl.window], min(mdl.n, len(buf) // mdl.stack)))
            buf = buf[step:]
        self.buf = self.buf[:0]
        return np.concatenate(out) if out else self.empty


def open_streaming_model(path: PathLike, feat_dim: int, num_threads: int = 1):
    """A bundle's streaming network by its signature: :class:`StreamingOnnxModel` (a unidirectional LSTM, state
    carried frame by frame) or :class:`LcChunkOnnxModel` (an LC-BLSTM's chunk model)."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise AsrError(f"ONNX model {path} does not exist")
    try:
        names = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
    except Exception as e:  # noqa: BLE001 - a corrupt or foreign file: one clear message
        raise AsrError(f"{path}: not a readable ONNX model ({' '.join(str(e).split())[:200]})") from None
    if names == LC_SIGNATURE:
        return LcChunkOnnxModel(path, feat_dim, num_threads)
    return StreamingOnnxModel(path, feat_dim, num_threads)
