"""A trained model as a directory that ``asr transcribe`` and :class:`asrlib.app.recognizer.Recognizer` can load.

Three layouts are accepted by :func:`open_model_dir`:

* a **packaged model** (written by :func:`package_model` / ``asr package``): ``model.json`` plus the files it names,
  self-contained and relocatable::

      model.json           {"format": "asrlib-model", "format_version": 1, "type": "torch", ...}
      final.pt             weights, model config, CMVN (asrlib.models.saved)
      lang/tokens.txt  lang/words.txt  lang/lexicon.txt  lang/TLG.fst

* a **mobile bundle** (``steps.export_mobile``: ``bundle.json``, the int8 ONNX models, ``tokens.txt``,
  ``words.txt``, ``lexicon.txt``, ``TLG.fst``): type ``onnx-bundle``, run with ONNX Runtime (the streaming model,
  LSTM state carried), decoded with the bundle's settings (those sherpa-onnx uses);

* a **training experiment dir** (e.g. ``recipes/digits/exp/lstm_ctc``) holding ``final.pt``; its lang dir is
  ``lang/`` beside ``final.pt`` if present, else the ``lang_dir`` recorded in ``final.pt`` at training time (the
  path steps.train resolved, else the one it was given: an absolute path, or a relative one found from the current
  directory or from a parent of the experiment dir). Its
  decode settings are those of its newest TLG decode stage run after training (``decode_*/.decode.done``: the
  recipe's tuned beam, acoustic scale and blank penalty), else :class:`DecodeConfig`'s defaults.

``model.json`` keys: ``format``, ``format_version`` (this asrlib reads :data:`MODEL_DIR_VERSION` and older),
``type`` (which backend runs the network: ``torch``, or ``onnx-bundle`` for a mobile bundle; see :data:`BACKENDS`),
``model`` and ``lang`` (paths relative to the dir), ``files`` (size and sha256 of every file, checked by
``asr info --verify``), ``sample_rate``, ``num_mel_bins``, ``frame_shift``, ``subsampling``, ``decode`` (beam,
max_active, acoustic_scale, blank_penalty: the recipe's decode settings) and ``source`` / ``asrlib_version``
(provenance, informational).

A backend turns raw fbank frames into CTC log-probabilities incrementally (:class:`AcousticStream`), so a long
recording is processed in bounded memory: the torch backend carries the LSTM state from chunk to chunk
(unidirectional models: identical to one pass over the whole recording) or, for a bidirectional model or one
trained with per-utterance CMN (which needs the recording's mean), collects the frames and runs them at the end
(see :class:`_WholeRecordingStream`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Protocol

import numpy as np

from asrlib.config import DecodeConfig
from asrlib.decode.endpoint import OFFLINE_CALLS, OFFLINE_CHEAP_CALLS, CallSizes
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_open
from asrlib.io.files import sha256_file

log = logging.getLogger(__name__)

MODEL_DIR_FORMAT = "asrlib-model"
MODEL_DIR_VERSION = 1
LANG_FILES_REQUIRED = ("tokens.txt", "words.txt", "lexicon.txt")
LANG_FILES_OPTIONAL = ("TLG.fst",)
FRAME_SHIFT = 0.01  # seconds per fbank frame (asrlib.features.fbank)
# DecodeConfig fields kept in model.json: the search, and how long recordings are segmented
DECODE_KEYS = (
    "beam",
    "max_active",
    "acoustic_scale",
    "blank_penalty",
    "segment",
    "segment_min_silence",
    "segment_pad",
    "segment_max_seconds",
    "segment_threshold_db",
    "segment_context",
)


# ------------------------------------------------------------------------------------------------ backends
class AcousticStream(Protocol):
    """Incremental log-probabilities: feed raw fbank chunks, get the CTC frames they complete."""

    def accept(self, feats: np.ndarray) -> np.ndarray:
        """Raw (un-normalised) fbank ``[n, num_mel_bins]`` → log-probs ``[m, V]`` of the output frames now final."""

    def finish(self) -> np.ndarray:
        """Log-probs of the frames still pending at the end of the recording (may be empty)."""


class AcousticBackend(Protocol):
    """What a model type provides to the recognizer."""

    num_mel_bins: int
    subsampling: int  # fbank frames per output frame
    vocab_size: int
    # its stream gives each output frame's log-probs once that frame's stack has come (a unidirectional network
    # with causal CMN): an endpointer can run it (decode.segment: endpoint); else its output comes at the end
    causal: bool
    # how the offline endpointer calls its network (asrlib.decode.endpoint.CallSizes): the fewer, the longer the
    # reruns; chosen by measurement for what a call costs this engine (torch: OFFLINE_CALLS; ONNX Runtime:
    # OFFLINE_CHEAP_CALLS)
    endpoint_calls: CallSizes

    def stream(self) -> AcousticStream:
        """A fresh stream (no state from earlier recordings)."""

    def describe(self) -> Dict[str, object]:
        """Facts for ``asr info`` (parameters, layers, ...)."""


class _StackedStream:
    """Buffers raw fbank frames and hands whole stacks of ``stack`` frames to :meth:`_run`; frames that do not fill
    a last stack are dropped at the end, exactly as the model does for a whole utterance."""

    def __init__(self, stack: int, feat_dim: int, vocab_size: int) -> None:
        self.stack, self.vocab_size = stack, vocab_size
        self.pending = np.zeros((0, feat_dim), np.float32)

    def _run(self, feats: np.ndarray) -> np.ndarray:
        """Log-probs ``[len(feats) // stack, V]`` of raw fbank ``feats`` (a whole number of stacks)."""
        raise NotImplementedError

    def accept(self, feats: np.ndarray) -> np.ndarray:
        buf = np.concatenate([self.pending, feats]) if len(self.pending) else np.asarray(feats, np.float32)
        usable = len(buf) // self.stack * self.stack
        self.pending = np.array(buf[usable:], np.float32)
        if usable == 0:
            return np.zeros((0, self.vocab_size), np.float32)
        return self._run(buf[:usable])

    def finish(self) -> np.ndarray:
        return np.zeros((0, self.vocab_size), np.float32)


class _UnidirectionalStream(_StackedStream):
    """Frame stacking + LSTM layers run chunk by chunk with the recurrent state carried over (exact)."""

    def __init__(self, saved) -> None:
        self.saved, self.model = saved, saved.model
        super().__init__(self.model.stack, self.model.feat_dim, self.model.vocab_size)
        self.state: List[Optional[tuple]] = [None] * len(self.model.layers)
        self.cmvn, self.cmvn_state = saved.cmvn, None  # features.cmvn online: the running mean is carried too

    def _run(self, feats: np.ndarray) -> np.ndarray:
        import torch

        from asrlib.models.lstm import _PeepholeLayer, _TorchLstmLayer

        z, self.cmvn_state = self.cmvn.apply_chunk(np.asarray(feats, np.float32), self.cmvn_state)
        x = torch.from_numpy(z).reshape(1, len(feats) // self.stack, -1).to(self.saved.device)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LSTM with projections is not supported")
            for i, layer in enumerate(self.model.layers):
                if isinstance(layer, _TorchLstmLayer):
                    x, self.state[i] = layer.lstm(x, self.state[i])
                elif isinstance(layer, _PeepholeLayer):
                    x, self.state[i] = layer.fwd(x, self.state[i])
                else:  # pragma: no cover - a new layer type must say how it streams
                    raise AsrError(f"internal error: cannot stream layer type {type(layer).__name__}")
            return self.model.output(x).log_softmax(dim=-1)[0].cpu().numpy()


class _LcStream:
    """A latency-controlled BLSTM (``model.chunk_frames``) with a causal CMN, run chunk by chunk
    (:class:`asrlib.models.lc_blstm.LcStream`): each chunk's log-probs come once its right context has come, equal
    to the whole recording's. Not ``causal`` in the endpointer's sense (its output lags by a chunk)."""

    def __init__(self, saved) -> None:
        from asrlib.models.lc_blstm import LcStream

        self.saved, self.cmvn, self.cmvn_state = saved, saved.cmvn, None
        self.net = LcStream(saved.model)

    def accept(self, feats: np.ndarray) -> np.ndarray:
        z, self.cmvn_state = self.cmvn.apply_chunk(np.asarray(feats, np.float32), self.cmvn_state)
        return self.net.accept(z).cpu().numpy()

    def finish(self) -> np.ndarray:
        return self.net.finish().cpu().numpy()


class _WholeRecordingStream:
    """For a bidirectional LSTM (which cannot carry state forwards only), a model with a look-ahead convolution and a
    model trained with ``features.cmvn: utterance`` (whose input is the recording minus its mean, known at the end):
    the features are collected and, at the end, reduced by their mean (utterance CMN) and run in windows of
    ``window`` output frames with ``context`` frames of extra audio on each side (whose outputs are dropped). A
    recording of at most ``window + 2 * context`` output frames runs in one pass (exact, as steps.compute_logprobs);
    a longer one is approximate at the window edges, by an amount that shrinks with ``context``."""

    def __init__(self, saved, window: int = 1000, context: int = 100) -> None:
        self.saved, self.window, self.context = saved, window, context
        self.chunks: List[np.ndarray] = []

    def accept(self, feats: np.ndarray) -> np.ndarray:
        self.chunks.append(np.asarray(feats, np.float32))
        return np.zeros((0, self.saved.model.vocab_size), np.float32)

    def finish(self) -> np.ndarray:
        stack = self.saved.model.stack
        feats = np.concatenate(self.chunks) if self.chunks else np.zeros((0, self.saved.model.feat_dim), np.float32)
        t_out = len(feats) // stack
        if t_out == 0:
            return np.zeros((0, self.saved.model.vocab_size), np.float32)
        if self.saved.cmn == "utterance":
            from asrlib.features.cmvn import utterance_cmn

            feats = utterance_cmn(feats)  # over every frame, as the feature readers do
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LSTM with projections is not supported")
            if t_out <= self.window + 2 * self.context:
                return self.saved.log_probs(feats[: t_out * stack])
            outs = []
            for s in range(0, t_out, self.window):
                e = min(s + self.window, t_out)
                a, b = max(0, s - self.context), min(t_out, e + self.context)
                lp = self.saved.log_probs(feats[a * stack : b * stack])
                outs.append(lp[s - a : s - a + (e - s)])
            return np.concatenate(outs)


class TorchBackend:
    """A ``final.pt`` of :mod:`asrlib.models.saved` (weights + CMVN), run with torch on ``device`` (auto: CUDA when
    there is one; fp32 either way)."""

    def __init__(self, model_path: Path, device: str = "auto") -> None:
        from asrlib.models.device import resolve_device
        from asrlib.models.saved import load_model

        self.model_path = Path(model_path)
        self.saved = load_model(self.model_path).to(resolve_device(device, "--device"))
        if self.saved.cmn == "speaker":
            raise AsrError(
                f"{self.model_path} was trained with per-speaker CMN (features.cmvn: speaker): its input "
                f"needs the mean of all of a speaker's audio, which a recording-at-a-time recognizer does "
                f"not have; decode a data dir with steps.compute_fbank, steps.compute_cmvn --utt2spk and "
                f"steps.compute_logprobs instead, or train with features.cmvn: global"
            )
        m = self.saved.model
        self.num_mel_bins, self.subsampling, self.vocab_size = m.feat_dim, m.stack, m.vocab_size
        self.bidirectional = bool(m.cfg.bidirectional)
        # a look-ahead convolution needs frames after the current one: run as a whole recording, as a BLSTM
        self.causal = not (self.bidirectional or self.saved.cmn == "utterance" or m.cfg.lookahead > 0)
        self.endpoint_calls = OFFLINE_CALLS  # oneDNN's LSTM: a call costs as much as ~52 output frames

    def stream(self) -> AcousticStream:
        if self.saved.model.cfg.chunk_frames > 0 and self.saved.cmn != "utterance":
            return _LcStream(self.saved)
        return _UnidirectionalStream(self.saved) if self.causal else _WholeRecordingStream(self.saved)

    def describe(self) -> Dict[str, object]:
        from asrlib.models.lstm import count_parameters

        return {"parameters": count_parameters(self.saved.model), **asdict(self.saved.model.cfg)}


class _OnnxStream(_StackedStream):
    """Raw fbank → the bundle's streaming ONNX model (CMVN folded in), whole stacks at a time, its state carried
    (LSTM h, c; with online CMN its running sum and count too)."""

    def __init__(self, backend: "OnnxBundleBackend") -> None:
        super().__init__(backend.subsampling, backend.num_mel_bins, backend.vocab_size)
        self.network = backend.model.stream()

    def _run(self, feats: np.ndarray) -> np.ndarray:
        return self.network.accept(feats)


class OnnxBundleBackend:
    """A mobile bundle (``steps.export_mobile``): ``model.streaming.int8.onnx`` run with ONNX Runtime, its LSTM
    state carried from chunk to chunk (the same network sherpa-onnx runs from ``model.int8.onnx``; an LC-BLSTM's
    chunk model runs window by window, :class:`asrlib.export.runtime.LcChunkOnnxModel`), on the CPU:
    ``device`` may be auto or cpu (an int8 phone model has no CUDA path here)."""

    def __init__(self, bundle_dir: Path, num_threads: int = 1, device: str = "auto") -> None:
        from asrlib.export.bundle import check_bundle
        from asrlib.export.runtime import LcChunkOnnxModel, open_streaming_model

        if device not in ("auto", "cpu"):
            raise AsrError(
                f"{bundle_dir} is a mobile bundle, run with ONNX Runtime on the CPU; --device {device} is for "
                f"torch models (an experiment dir or an `asr package` dir)"
            )

        self.bundle = check_bundle(bundle_dir, verify=False)  # open_model_dir has verified the files
        self.num_mel_bins, self.subsampling = self.bundle.feat_dim, self.bundle.subsampling
        self.model = open_streaming_model(self.bundle.path("model.streaming.int8.onnx"), self.num_mel_bins, num_threads)
        self.vocab_size = self.model.vocab_size
        # an LC-BLSTM's chunk model: its output lags by up to a chunk and its right context (as _LcStream's)
        self.lc = isinstance(self.model, LcChunkOnnxModel)
        self.causal = not self.lc
        self.endpoint_calls = OFFLINE_CHEAP_CALLS  # ONNX Runtime: a call costs as much as ~4 output frames

    def stream(self) -> AcousticStream:
        return self.model.stream() if self.lc else _OnnxStream(self)  # the chunk model's stream: accept, finish

    def describe(self) -> Dict[str, object]:
        m, files = self.model, self.bundle.info.get("files", {})
        shape = {"chunk_frames": m.n, "right_context": m.m} if self.lc else {"state_dim": m.state_dim}
        return {
            "engine": "onnxruntime (int8)",
            "layers": m.state_shapes[0][0] if self.lc else m.num_layers,
            **shape,
            "cell_dim": m.state_shapes[1][2] if self.lc else m.hidden,
            "vocab_size": m.vocab_size,
            "bundle_bytes": sum(int(f.get("bytes", 0)) for f in files.values()),
            **{k: v for k, v in self.bundle.info.items() if k in ("compression", "streaming")},
        }


def resolve_segment_method(method: str, backend: AcousticBackend, where: str) -> str:
    """The ``decode.segment`` method that runs on ``backend``: ``auto`` is ``endpoint`` for a causal model (its
    stream can be cut as it is heard) and ``blank`` for a bidirectional one or one with utterance CMN, whose output
    needs the whole segment; ``endpoint`` on such a model is an :class:`AsrError` naming ``where``."""
    if method == "auto":
        return "endpoint" if backend.causal else "blank"
    if method == "endpoint" and not backend.causal:
        raise AsrError(
            f"{where}: decode.segment endpoint needs a model whose output for a frame depends only on the audio up "
            f"to it; this one is bidirectional, looks ahead or normalises by the utterance's mean: use --segment "
            f"blank (or auto)"
        )
    return method


#: model.json ``type`` → loader(model dir, model.json dict, device) → backend. A new bundle type registers itself
#: here. ``device``: where a torch model runs (asr transcribe --device; auto, cpu, cuda, cuda:N).
BACKENDS: Dict[str, Callable[[Path, dict, str], AcousticBackend]] = {
    "torch": lambda root, meta, device: TorchBackend(root / meta.get("model", "final.pt"), device),
    "onnx-bundle": lambda root, meta, device: OnnxBundleBackend(root, device=device),
}


# ------------------------------------------------------------------------------------------------ model dirs
@dataclass
class ModelDir:
    """A resolved model directory: where its files are and the settings to run it with."""

    root: Path
    type: str
    model_path: Path
    lang_dir: Path
    meta: dict = field(default_factory=dict)  # model.json (synthesised for an experiment dir)
    packaged: bool = False

    @property
    def sample_rate(self) -> int:
        return int(self.meta.get("sample_rate", 16000))

    def decode_config(self) -> DecodeConfig:
        return DecodeConfig(**{k: v for k, v in self.meta.get("decode", {}).items() if k in DECODE_KEYS})

    def load_backend(self, device: str = "auto") -> AcousticBackend:
        return BACKENDS[self.type](self.root, self.meta, device)


def _missing_lang_files(lang_dir: Path) -> List[str]:
    return [f for f in LANG_FILES_REQUIRED if not (lang_dir / f).is_file()]


def _find_relative(rel: Path, exp_dir: Path) -> Optional[Path]:
    """``rel`` (a relative lang_dir recorded at training time) from the cwd or from a parent of ``exp_dir``."""
    for base in [Path.cwd(), *exp_dir.resolve().parents]:
        cand = base / rel
        if cand.is_dir() and not _missing_lang_files(cand):
            return cand
    return None


def _read_model_json(path: Path) -> dict:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise AsrError(f"{path} is not readable JSON ({e}); re-create the model dir with `asr package`") from None
    if not isinstance(meta, dict) or meta.get("format") != MODEL_DIR_FORMAT:
        raise AsrError(f"{path} is not an asrlib model description (\"format\" must be \"{MODEL_DIR_FORMAT}\")")
    version = meta.get("format_version")
    if not isinstance(version, int):
        raise AsrError(f"{path}: \"format_version\" is missing or not an integer")
    if version > MODEL_DIR_VERSION:
        from asrlib import __version__

        raise AsrError(
            f"{path.parent} is a model dir of format version {version}, made by a newer asrlib "
            f"({meta.get('asrlib_version', '?')}); this asrlib {__version__} reads format versions "
            f"up to {MODEL_DIR_VERSION}: upgrade asrlib"
        )
    _check_fields(meta, path)
    if meta.get("type") not in BACKENDS:
        raise AsrError(
            f"{path}: model type '{meta.get('type')}' is not supported by this asrlib "
            f"(known types: {', '.join(sorted(BACKENDS))})"
        )
    return meta


def _check_fields(meta: dict, path: Path) -> None:
    """The values ``model.json`` (or ``bundle.json``) gives are of the right kind and range: an :class:`AsrError`
    naming the file and the field otherwise (a damaged or crafted file never reaches the recognizer)."""
    from asrlib.config import _build, check_segment_settings

    ranges = {
        "sample_rate": (int, 1000, 384000),
        "num_mel_bins": (int, 1, 1024),
        "subsampling": (int, 1, 64),
        "frame_shift": (float, 1e-4, 1.0),
    }
    for key, (kind, lo, hi) in ranges.items():
        v = meta.get(key)
        ok = v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi)
        if not ok or (kind is int and v is not None and v != int(v)):
            raise AsrError(f"{path}: \"{key}\" must be {kind.__name__} in [{lo}, {hi}], got {v!r}")
    decode = meta.get("decode", {})
    if not isinstance(decode, dict):
        raise AsrError(f"{path}: \"decode\" must be a mapping, got {type(decode).__name__}")
    cfg = _build(DecodeConfig, {k: v for k, v in decode.items() if k in DECODE_KEYS}, f"{path}: decode")
    check_segment_settings(cfg, str(path))
    files = meta.get("files", {})
    if not isinstance(files, dict) or not all(
        isinstance(f, dict) and isinstance(f.get("size", 0), int) and isinstance(f.get("sha256", ""), str)
        for f in files.values()
    ):
        raise AsrError(f"{path}: \"files\" must map names to {{\"size\": int, \"sha256\": str}}")
    for key in ("model", "lang"):
        v = meta.get(key)
        if v is not None and (not isinstance(v, str) or "\0" in v or Path(v).is_absolute() or ".." in Path(v).parts):
            raise AsrError(f"{path}: \"{key}\" must be a path inside the model dir, got {v!r}")


def open_model_dir(path: PathLike) -> ModelDir:
    """Resolve a packaged model dir, an experiment dir or a ``final.pt`` path (see the module docstring).

    Every problem is an :class:`AsrError` that names the missing or incompatible file.
    """
    path = Path(path)
    if not path.exists():
        raise AsrError(f"model {path} does not exist")
    if path.is_file():
        if path.name == "model.json":
            path = path.parent
        elif path.suffix == ".pt":
            return _experiment_dir(path.parent, path)
        else:
            raise AsrError(f"model {path} is a file; give a model directory (with model.json or final.pt)")
    if (path / "bundle.json").is_file() and not (path / "model.json").is_file():
        return _bundle_dir(path)
    if (path / "model.json").is_file():
        meta = _read_model_json(path / "model.json")
        model_path = path / meta.get("model", "final.pt")
        lang_dir = path / meta.get("lang", "lang")
        missing = [str(p.relative_to(path)) for p in (model_path,) if not p.exists()]
        missing += [str((lang_dir / f).relative_to(path)) for f in _missing_lang_files(lang_dir)]
        if missing:
            raise AsrError(
                f"model dir {path} is incomplete: missing {', '.join(missing)} "
                f"(copy the whole directory, or re-create it with `asr package`)"
            )
        for name, info in meta.get("files", {}).items():
            p = path / name
            if p.is_file() and "size" in info and p.stat().st_size != info["size"]:
                raise AsrError(
                    f"model dir {path}: {name} has {p.stat().st_size} bytes, model.json says "
                    f"{info['size']} (truncated or replaced copy?); re-copy the model dir"
                )
        return ModelDir(path, meta["type"], model_path, lang_dir, meta, packaged=True)
    return _experiment_dir(path, path / "final.pt")


def _bundle_dir(path: Path) -> ModelDir:
    """A mobile bundle as a model dir: the bundle is its own lang dir (tokens, words, lexicon, TLG.fst)."""
    from asrlib.export.bundle import check_bundle

    b = check_bundle(path)
    if not (path / "lexicon.txt").is_file():
        raise AsrError(
            f"bundle {path} has no lexicon.txt (made by an older asrlib), which `asr transcribe` needs "
            f"for word times: re-run steps.export_mobile, or copy the recipe's data/lang/lexicon.txt "
            f"into the bundle"
        )
    dec = b.info.get("decode", {})
    meta = {
        "format": MODEL_DIR_FORMAT,
        "format_version": MODEL_DIR_VERSION,
        "type": "onnx-bundle",
        "model": "model.streaming.int8.onnx",
        "lang": ".",
        "sample_rate": b.sample_rate,
        "num_mel_bins": b.feat_dim,
        "frame_shift": b.info.get("frame_shift_ms", 10) / 1000,
        "subsampling": b.subsampling,
        "decode": {k: v for k, v in dec.items() if k in DECODE_KEYS},
        "files": b.info.get("files", {}),
        "bundle": {k: b.info[k] for k in ("format", "version")},
    }
    _check_fields(meta, path / "bundle.json")
    return ModelDir(path, "onnx-bundle", path / "model.streaming.int8.onnx", path, meta, packaged=True)


def _experiment_dir(exp_dir: Path, model_path: Path) -> ModelDir:
    if not model_path.is_file():
        raise AsrError(
            f"{exp_dir} has no model.json and no {model_path.name}: give a packaged model dir "
            f"(`asr package`) or a training experiment dir whose training has finished"
        )
    lang_dir = exp_dir / "lang"
    if not lang_dir.is_dir():
        from asrlib.io.torchfile import load_torch

        info = load_torch(model_path).get("info", {})
        recorded = info.get("lang_dir")
        if not recorded:
            raise AsrError(
                f"{exp_dir} has no lang/ dir and {model_path} does not record its lang dir; "
                f"package it with `asr package {exp_dir} LANG_DIR OUT_DIR`"
            )
        rec, absolute = Path(recorded), info.get("lang_dir_abs")  # as given to steps.train, and resolved there
        if absolute and Path(absolute).is_dir() and not _missing_lang_files(Path(absolute)):
            found: Optional[Path] = Path(absolute)
        elif rec.is_absolute():
            found = rec if rec.is_dir() else None
        else:
            found = _find_relative(rec, exp_dir)
        if found is None:
            raise AsrError(
                f"{exp_dir} has no lang/ dir and the lang dir recorded in {model_path} ('{recorded}') "
                f"is not found; package the model with `asr package {exp_dir} LANG_DIR OUT_DIR`"
            )
        lang_dir = found
    missing = _missing_lang_files(lang_dir)
    if missing:
        raise AsrError(f"lang dir {lang_dir} lacks {', '.join(missing)}; run the lang stage (steps.prepare_lang)")
    meta = {
        "format": MODEL_DIR_FORMAT,
        "format_version": MODEL_DIR_VERSION,
        "type": "torch",
        "model": os.path.relpath(model_path, exp_dir),
        **_recipe_decode_settings(exp_dir, model_path),
    }
    return ModelDir(exp_dir, "torch", model_path, lang_dir, meta, packaged=False)


def _recipe_decode_settings(exp_dir: Path, model_path: Path) -> dict:
    """``{"decode": ..., "decode_source": ...}`` from the newest TLG decode stage of ``exp_dir``
    (``decode_*/.decode.done``, written by steps.decode after ``model_path``), so that an experiment dir
    decodes with the recipe's (tuned) settings, as its decode stage did; ``{}`` (the defaults) if there is none."""
    best, best_mtime = None, model_path.stat().st_mtime
    for done in exp_dir.glob("decode_*/.decode.done"):
        try:
            fp = json.loads(done.read_text(encoding="utf-8")).get("_fingerprint", {})
        except (OSError, ValueError):
            continue
        if fp.get("method") == "tlg" and done.stat().st_mtime >= best_mtime:
            best, best_mtime = (done, fp), done.stat().st_mtime
    if best is None:
        return {}
    done, fp = best
    return {"decode": {k: fp[k] for k in DECODE_KEYS if k in fp}, "decode_source": str(done)}


# ------------------------------------------------------------------------------------------------ packaging
def verify_files(md: ModelDir) -> List[str]:
    """Problems found by re-hashing the files listed in ``model.json`` (empty list: all intact)."""
    problems = []
    for name, info in md.meta.get("files", {}).items():
        p = md.root / name
        if not p.is_file():
            problems.append(f"{name}: missing")
        elif info.get("sha256") and sha256_file(p) != info["sha256"]:
            problems.append(f"{name}: checksum differs from model.json (corrupt or replaced)")
    return problems


def package_model(
    exp_dir: PathLike,
    lang_dir: PathLike,
    out_dir: PathLike,
    decode: Optional[DecodeConfig] = None,
    sample_rate: int = 16000,
    force: bool = False,
) -> Path:
    """Copy ``exp_dir/final.pt`` and the lang files into a new self-contained ``out_dir`` with ``model.json``.

    ``exp_dir`` may also be the path of a ``.pt`` model file. The directory is built under a temporary name
    beside ``out_dir`` and renamed into place when complete; an existing ``out_dir`` is an :class:`AsrError`
    unless ``force`` (then it is replaced). ``decode`` (the recipe's decode settings) and ``sample_rate`` (of the
    training audio) are recorded for ``asr transcribe``. Returns ``out_dir``.
    """
    from asrlib import __version__
    from asrlib.lang.lexicon import read_tokens

    exp_dir, lang_dir, out_dir = Path(exp_dir), Path(lang_dir), Path(out_dir)
    model_path = exp_dir if exp_dir.is_file() else exp_dir / "final.pt"
    if not model_path.is_file():
        raise AsrError(f"{model_path} does not exist (has training finished in {exp_dir}?)")
    missing = _missing_lang_files(lang_dir)
    if missing:
        raise AsrError(f"lang dir {lang_dir} lacks {', '.join(missing)}; run the lang stage (steps.prepare_lang)")
    if out_dir.exists() and not force:
        raise AsrError(f"{out_dir} already exists; remove it or pass --force to replace it")
    backend = TorchBackend(model_path, "cpu")  # checks the model file's format version
    num_tokens = len(read_tokens(lang_dir / "tokens.txt"))
    if num_tokens != backend.vocab_size:
        raise AsrError(
            f"{model_path} outputs {backend.vocab_size} tokens but {lang_dir / 'tokens.txt'} has "
            f"{num_tokens}: this lang dir is not the one the model was trained with"
        )
    lang_files = [f for f in LANG_FILES_REQUIRED + LANG_FILES_OPTIONAL if (lang_dir / f).is_file()]
    if "TLG.fst" not in lang_files:
        log.warning("%s has no TLG.fst: the packaged model can only decode with --method greedy", lang_dir)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        shutil.copyfile(model_path, tmp / "final.pt")
        (tmp / "lang").mkdir()
        for f in lang_files:
            shutil.copyfile(lang_dir / f, tmp / "lang" / f)
        names = ["final.pt"] + [f"lang/{f}" for f in lang_files]
        meta = {
            "format": MODEL_DIR_FORMAT,
            "format_version": MODEL_DIR_VERSION,
            "type": "torch",
            "model": "final.pt",
            "lang": "lang",
            "sample_rate": int(sample_rate),
            "num_mel_bins": backend.num_mel_bins,
            "frame_shift": FRAME_SHIFT,
            "subsampling": backend.subsampling,
            "decode": {k: v for k, v in asdict(decode or DecodeConfig()).items() if k in DECODE_KEYS},
            "files": {n: {"size": (tmp / n).stat().st_size, "sha256": sha256_file(tmp / n)} for n in names},
            "asrlib_version": __version__,
            "source": {"model": str(model_path.resolve()), "lang_dir": str(lang_dir.resolve())},
        }
        with atomic_open(tmp / "model.json") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.write("\n")
        os.chmod(tmp, 0o777 & ~_umask())
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
