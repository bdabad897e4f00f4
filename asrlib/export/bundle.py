"""The deployable mobile bundle, and sherpa-onnx (the on-device engine) running it.

Bundle layout (written by :func:`write_bundle`, checked by :func:`check_bundle`)::

    model.int8.onnx            offline model, sherpa-onnx zipformer2_ctc contract (x, x_lens → log_probs, lens)
    model.streaming.int8.onnx  the same network with carried LSTM state (x, h, c → log_probs, h_out, c_out); for a
                               latency-controlled BLSTM its chunk model (x, valid, h, c; asrlib.export.lc_onnx)
    tokens.txt                 CTC tokens, <blk> = 0 (sherpa-onnx reads it)
    words.txt                  word ids of the graph's output labels (sherpa-onnx returns ids: map them here)
    TLG.fst                    decoding graph, OpenFst binary; input label = token id + 1 (0 = epsilon)
    lexicon.txt                pronunciations (word times in ``asr transcribe BUNDLE``; not needed on device)
    bundle.json                format, sizes and sha256 of every file, front-end and decoding settings
    README.md                  how to run it (sherpa-onnx Python/C++/Android, and asrlib's streaming recogniser)

sherpa-onnx facts this relies on (checked by tests/test_sherpa.py): ``OfflineRecognizer.from_zipformer_ctc``
loads any CTC model with inputs ``x`` (N, T, F) float32 and ``x_lens`` (N,) int64 and outputs log-probs (N, T', V)
(V static) and lengths; its features are kaldi-native-fbank with dither 0, snip_edges false, high_freq −400 (the
settings of our feature stage) and no CMVN (ours is folded into the model); with ``ctc_graph`` it searches the
graph with kaldi-decoder's FasterDecoder (beam 16 — not configurable — and ``ctc_max_active``), returning nothing
when no final state is reached; ``result.words`` holds word ids. Its reported timestamps assume subsampling 4
(ours is 3): multiply them by 3/4.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from asrlib.export.runtime import LC_SIGNATURE, ONLINE_CMN_STATE, StreamingOnnxModel
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_path, write_json, write_text
from asrlib.io.files import sha256_file as sha256

log = logging.getLogger(__name__)

BUNDLE_FORMAT = "asrlib-mobile-bundle"
BUNDLE_VERSION = 1
SHERPA_BEAM = 16.0  # kaldi-decoder FasterDecoderOptions default; sherpa-onnx does not expose it
SHERPA_MAX_ACTIVE = 3000
REQUIRED = ("model.int8.onnx", "model.streaming.int8.onnx", "tokens.txt", "words.txt", "TLG.fst")
OPTIONAL = ("lexicon.txt",)  # word times in `asr transcribe BUNDLE` (bundles of asrlib < 0.2 lack it)
SHERPA_ONLINE = "model.sherpa-online.int8.onnx"  # an LC-BLSTM's chunk model for sherpa-onnx's OnlineRecognizer
SHERPA_ONLINE_TAIL_SECONDS = 0.5  # zeros after its input: the last window's right context (fixed, not tuned)


def sherpa_search(lang_dir: PathLike):
    """The TLG search that sherpa-onnx's CTC FST decoder runs on a bundle: its fixed beam and max-active, acoustic
    scale 1, no blank penalty (a :class:`asrlib.decode.search.TlgDecoder`), over the networks' output as it is
    (which carries the recipe's scale and penalty: :meth:`asrlib.export.onnx_model.ScanAcousticModel.fold_search`)."""
    from asrlib.decode.search import TlgDecoder

    return TlgDecoder(lang_dir, beam=SHERPA_BEAM, max_active=SHERPA_MAX_ACTIVE)


def _copy(src: Path, dst: Path) -> None:
    if not src.is_file():
        raise AsrError(f"{src} does not exist; cannot build the bundle")
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


@dataclass
class Bundle:
    """A checked bundle directory."""

    dir: Path
    info: dict

    def path(self, name: str) -> Path:
        return self.dir / name

    @property
    def sample_rate(self) -> int:
        return int(self.info["sample_rate"])

    @property
    def feat_dim(self) -> int:
        return int(self.info["feat_dim"])

    @property
    def subsampling(self) -> int:
        return int(self.info["subsampling"])

    def id2word(self) -> Dict[int, str]:
        from asrlib.lang.lexicon import read_words

        return read_words(self.path("words.txt"))


def write_bundle(
    out_dir: PathLike,
    offline_int8: PathLike,
    streaming_int8: PathLike,
    lang_dir: PathLike,
    feat_dim: int,
    subsampling: int,
    sample_rate: int = 16000,
    decode: Optional[dict] = None,
    extra: Optional[dict] = None,
    sherpa_online_int8: Optional[PathLike] = None,
) -> Bundle:
    """Copy the models and the lang files into ``out_dir``, then write README.md and bundle.json (last).
    ``sherpa_online_int8``: an LC-BLSTM's chunk model in sherpa-onnx's streaming contract
    (:mod:`asrlib.export.sherpa_online`), copied as :data:`SHERPA_ONLINE`."""
    out, lang = Path(out_dir), Path(lang_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bundle.json").unlink(missing_ok=True)  # an incomplete bundle has no bundle.json
    _copy(Path(offline_int8), out / "model.int8.onnx")
    _copy(Path(streaming_int8), out / "model.streaming.int8.onnx")
    for name in ("tokens.txt", "words.txt", "TLG.fst", "lexicon.txt"):
        _copy(lang / name, out / name)
    if sherpa_online_int8 is not None:
        _copy(Path(sherpa_online_int8), out / SHERPA_ONLINE)
    else:
        (out / SHERPA_ONLINE).unlink(missing_ok=True)
    names = _input_names(out / "model.streaming.int8.onnx")
    online_cmn = ONLINE_CMN_STATE[0] in names  # features.cmvn: online
    lc = None
    if names == LC_SIGNATURE:  # a latency-controlled BLSTM's chunk model: its chunk and right context
        meta = {p.key: p.value for p in _load_onnx(out / "model.streaming.int8.onnx").metadata_props}
        lc = (int(meta["chunk_frames"]), int(meta["right_context"]))
    dec = decode or {}
    search = (float(dec.get("acoustic_scale", 1.0)), float(dec.get("blank_penalty", 0.0)))
    readme = bundle_readme(feat_dim, subsampling, sample_rate, online_cmn, search, lc)
    if sherpa_online_int8 is not None:
        readme += sherpa_online_readme(lc[0] if lc else 0, sample_rate, feat_dim)
    write_text(out / "README.md", readme)
    extra_files = (SHERPA_ONLINE,) if sherpa_online_int8 is not None else ()
    files = {
        name: {"bytes": (out / name).stat().st_size, "sha256": sha256(out / name)}
        for name in (*REQUIRED, *OPTIONAL, *extra_files, "README.md")
    }
    info = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "sample_rate": sample_rate,
        "feat_dim": feat_dim,
        "subsampling": subsampling,
        "frame_shift_ms": 10,
        "model_type": "zipformer2_ctc (sherpa-onnx contract)",
        "cmvn": "folded+online" if online_cmn else "folded",
        "decode": {"beam": SHERPA_BEAM, "max_active": SHERPA_MAX_ACTIVE, **(decode or {})},
        "files": files,
        **(extra or {}),
    }
    write_json(out / "bundle.json", info)
    return Bundle(out, info)


def check_bundle(bundle_dir: PathLike, verify: bool = True) -> Bundle:
    """Check that ``bundle_dir`` is a complete bundle (every file present and, with ``verify``, unchanged) and
    that the model's input dimension matches the front end; AsrError naming the problem otherwise."""
    d = Path(bundle_dir)
    if not d.is_dir():
        raise AsrError(f"bundle directory {d} does not exist (run steps.export_mobile)")
    meta = d / "bundle.json"
    if not meta.is_file():
        raise AsrError(f"{d} is not a complete bundle: bundle.json is missing (re-run steps.export_mobile)")
    try:
        info = json.loads(meta.read_text())
    except ValueError as e:
        raise AsrError(f"{meta}: not valid JSON ({e})") from None
    if info.get("format") != BUNDLE_FORMAT or int(info.get("version", 0)) > BUNDLE_VERSION:
        raise AsrError(
            f"{meta}: format {info.get('format')!r} version {info.get('version')!r} is not an "
            f"{BUNDLE_FORMAT} this asrlib reads (version ≤ {BUNDLE_VERSION})"
        )
    missing = [n for n in REQUIRED if not (d / n).is_file()]
    if missing:
        raise AsrError(
            f"bundle {d} is incomplete: missing {', '.join(missing)} (copy the whole directory, or "
            f"re-run steps.export_mobile)"
        )
    if verify:
        for name, rec in info.get("files", {}).items():
            p = d / name
            if p.is_file() and (p.stat().st_size != rec["bytes"] or sha256(p) != rec["sha256"]):
                raise AsrError(
                    f"bundle {d}: {name} differs from the file the bundle was built with "
                    f"(size/sha256 mismatch); re-run steps.export_mobile"
                )
    b = Bundle(d, info)
    _check_model_dim(d / "model.int8.onnx", b.feat_dim, ("x", "x_lens"))
    _check_model_dim(d / "model.streaming.int8.onnx", b.feat_dim, *StreamingOnnxModel.SIGNATURES, LC_SIGNATURE)
    return b


def _load_onnx(path: Path):
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - corrupt file: one clear message
        raise AsrError(f"{path}: not a readable ONNX model ({' '.join(str(e).split())[:200]})") from None


def _input_names(path: Path) -> List[str]:
    return [i.name for i in _load_onnx(path).graph.input]


def _check_model_dim(path: Path, feat_dim: int, *signatures: Sequence[str]) -> None:
    """``path``'s inputs are one of ``signatures`` and its features ``feat_dim``-dimensional, else AsrError."""
    m = _load_onnx(path)
    names = [i.name for i in m.graph.input]
    if tuple(names) not in {tuple(sig) for sig in signatures}:
        raise AsrError(f"{path}: inputs are {names}, expected {' or '.join(str(list(sig)) for sig in signatures)}")
    dims = m.graph.input[0].type.tensor_type.shape.dim
    got = dims[2].dim_value if len(dims) == 3 else None
    if got != feat_dim:
        raise AsrError(
            f"{path}: the model expects {got}-dim input features but the bundle's front end produces "
            f"{feat_dim}-dim fbank (bundle.json feat_dim); the model and the bundle do not belong "
            f"together — re-run steps.export_mobile"
        )


def check_audio(samples: np.ndarray, sample_rate: int, expected_rate: int, where: str = "audio") -> np.ndarray:
    """Mono float32 samples in [-1, 1] at ``expected_rate``; AsrError for another rate or shape."""
    if int(sample_rate) != int(expected_rate):
        raise AsrError(
            f"{where}: sample rate {sample_rate} Hz, but the model was trained on {expected_rate} Hz audio; "
            f"resample it first (e.g. sox in.wav -r {expected_rate} out.wav)"
        )
    x = np.asarray(samples)
    if x.ndim != 1:
        raise AsrError(f"{where}: expected mono samples (1-D), got shape {x.shape}; downmix first")
    if x.dtype.kind in "iu":
        x = x.astype(np.float32) / float(np.iinfo(x.dtype).max + 1)
    return x.astype(np.float32, copy=False)


def _open_mono(path: PathLike, expected_rate: int):
    """An open ``soundfile.SoundFile``; AsrError for a missing or unreadable file, another rate or several channels."""
    import soundfile as sf

    path = Path(path)
    if not path.is_file():
        raise AsrError(f"audio file {path} does not exist")
    try:
        f = sf.SoundFile(str(path))
    except Exception as e:  # noqa: BLE001
        raise AsrError(f"cannot read audio {path}: {' '.join(str(e).split())}") from None
    if f.channels != 1:
        f.close()
        raise AsrError(f"{path}: {f.channels} channels; the recogniser takes mono audio (downmix first)")
    if f.samplerate != expected_rate:
        f.close()
        check_audio(np.zeros(0, np.float32), f.samplerate, expected_rate, str(path))
    return f


def _read(f, path: PathLike, frames: int = -1) -> np.ndarray:
    try:
        return f.read(frames, dtype="float32")
    except Exception as e:  # noqa: BLE001
        raise AsrError(f"cannot read audio {path}: {' '.join(str(e).split())}") from None


def read_wav(path: PathLike, expected_rate: int) -> np.ndarray:
    """A mono audio file as float32 samples; AsrError for a missing file, another rate or several channels."""
    with _open_mono(path, expected_rate) as f:
        return _read(f, path)


def read_wav_blocks(path: PathLike, expected_rate: int, block: int) -> Iterator[np.ndarray]:
    """A mono audio file as float32 blocks of ``block`` samples (the last one shorter), read as they are consumed,
    so that memory does not grow with the file; the file's errors are raised here, as :func:`read_wav`'s."""
    f = _open_mono(path, expected_rate)

    def blocks() -> Iterator[np.ndarray]:
        with f:
            while len(x := _read(f, path, block)):
                yield x

    return blocks()


class SherpaRecognizer:
    """sherpa-onnx's offline recogniser with its CTC FST decoder on a bundle; words mapped through words.txt."""

    def __init__(self, bundle_dir: PathLike, num_threads: int = 1, max_active: int = SHERPA_MAX_ACTIVE):
        import sherpa_onnx

        self.bundle = check_bundle(bundle_dir)  # sherpa-onnx exits the process on a missing file: check first
        b = self.bundle
        self.id2word = b.id2word()
        self.recognizer = sherpa_onnx.OfflineRecognizer.from_zipformer_ctc(
            model=str(b.path("model.int8.onnx")),
            tokens=str(b.path("tokens.txt")),
            num_threads=num_threads,
            sample_rate=b.sample_rate,
            feature_dim=b.feat_dim,
            decoding_method="greedy_search",
            ctc_graph=str(b.path("TLG.fst")),
            ctc_max_active=max_active,
        )

    def _words(self, result) -> List[str]:
        out = []
        for w in result.words:
            if int(w) not in self.id2word:
                raise AsrError(f"sherpa-onnx returned word id {w}, which is not in {self.bundle.path('words.txt')}")
            out.append(self.id2word[int(w)])
        return out

    def recognize(self, samples: np.ndarray, sample_rate: int) -> List[str]:
        x = check_audio(samples, sample_rate, self.bundle.sample_rate)
        s = self.recognizer.create_stream()
        s.accept_waveform(self.bundle.sample_rate, x)
        self.recognizer.decode_stream(s)
        return self._words(s.result)

    def recognize_batch(self, items: Sequence[np.ndarray], sample_rate: int) -> List[List[str]]:
        streams = []
        for x in items:
            x = check_audio(x, sample_rate, self.bundle.sample_rate)
            s = self.recognizer.create_stream()
            s.accept_waveform(self.bundle.sample_rate, x)
            streams.append(s)
        self.recognizer.decode_streams(streams)
        return [self._words(s.result) for s in streams]


def bundle_readme(
    feat_dim: int,
    subsampling: int,
    sample_rate: int,
    online_cmn: bool = False,
    search: Tuple[float, float] = (1.0, 0.0),
    lc: Optional[Tuple[int, int]] = None,
) -> str:
    cmvn = (
        "No CMVN at runtime: it is part of the model (the training set's mean and variance,\nthen the "
        "running mean of the utterance so far: online CMN)."
        if online_cmn
        else "No CMVN at runtime: it is part of the model."
    )
    state = (
        ", and `cmn_sum` (N, {0}), `cmn_count` (N, 1): the\nonline CMN's running sum and frame count "
        "(zeros at the start); it returns `log_probs`, `h_out`, `c_out`, `cmn_sum_out`,\n`cmn_count_out`".format(
            feat_dim
        )
        if online_cmn
        else " (zeros at the start); it returns `log_probs`, `h_out`, `c_out`"
    )
    zeros = ", `cmn_sum`, `cmn_count`" if online_cmn else ""
    scale, penalty = search
    if lc is None:
        model = (
            f"The streaming model takes `x` (N, T, {feat_dim}) with T a multiple of {subsampling}, and the state `h` "
            f"(L, N, P), `c`\n(L, N, H){state}. No look-ahead: a unidirectional LSTM."
        )
    else:
        n, m = lc
        w = (n + m) * subsampling
        model = (
            f"The streaming model is a latency-controlled BLSTM's chunk model, one call per window of {w} fbank "
            f"frames (a chunk of\n{n} output frames and {m} of right context): `x` (1, {w}, {feat_dim}) raw fbank "
            f"(zeros past the input's end), `valid` (1,)\nint64 the window's real stacked frames ({n + m} but at the "
            f"end), `h`, `c` (L, 1, H) the forward state after the previous\nchunk (zeros at the start); it returns "
            f"`log_probs` (1, {n}, V) (the first min({n}, valid) real), `h_out`, `c_out`. The next\nwindow starts "
            f"{n * subsampling} frames later. Look-ahead: {m} output frames ({m * subsampling * 10} ms) past the "
            f"chunk.\n`model.int8.onnx` runs the same windows in one call (a Scan over them)."
        )
    output = (
        "`log_probs` holds the CTC log-probabilities (log-softmax) of each output frame."
        if (scale, penalty) == (1.0, 0.0)
        else f"`log_probs` carries the recipe's search: (log-softmax - {penalty:g} at the blank) x {scale:g}\n"
        "(`bundle.json`'s `decode` `blank_penalty`, `acoustic_scale`), so that sherpa-onnx's CTC graph search, which\n"
        "has neither setting, searches as the recipe's decode stage does. For probabilities, divide it by "
        f"{scale:g} and\nadd {penalty:g} to the blank's (token 0) column."
    )
    return f"""# asrlib mobile bundle (LSTM-CTC, int8)

Files: `model.int8.onnx` (offline), `model.streaming.int8.onnx` (streaming, carried LSTM state), `tokens.txt`,
`words.txt`, `TLG.fst` (decoding graph), `bundle.json` (sizes, sha256, settings).

## Input
{sample_rate} Hz mono audio → {feat_dim}-dim log-mel fbank exactly as kaldi-native-fbank computes it with
`dither=0`, `snip_edges=false`, `low_freq=20`, `high_freq=-400`, povey window, 25 ms / 10 ms (sherpa-onnx's
defaults). {cmvn} The network stacks {subsampling} frames, so it emits one
CTC frame per {10 * subsampling} ms.

## Output
{output}

## Run with sherpa-onnx (Python; the C++/Android/iOS APIs take the same fields)
```python
import sherpa_onnx, soundfile as sf
rec = sherpa_onnx.OfflineRecognizer.from_zipformer_ctc(
    model="model.int8.onnx", tokens="tokens.txt", num_threads=1, sample_rate={sample_rate},
    feature_dim={feat_dim}, ctc_graph="TLG.fst", ctc_max_active={SHERPA_MAX_ACTIVE})
samples, sr = sf.read("audio.wav", dtype="float32")
s = rec.create_stream(); s.accept_waveform(sr, samples); rec.decode_stream(s)
id2word = dict((int(i), w) for w, i in (l.split() for l in open("words.txt")))
print(" ".join(id2word[w] for w in s.result.words))   # result.text holds tokens, result.words word ids
```
sherpa-onnx's timestamps assume subsampling 4; multiply them by {subsampling}/4.
The C++ command line takes the same fields (option names of sherpa-onnx's sources; the binary is not part of the
Python wheel, so this line is untested here): `sherpa-onnx-offline --zipformer-ctc-model=model.int8.onnx
--tokens=tokens.txt --ctc.graph=TLG.fst --ctc.max-active={SHERPA_MAX_ACTIVE} --feat-dim={feat_dim} \\
--num-threads=1 audio.wav`
(prints the token text; map word ids with words.txt).

Batching several utterances in one call works (sherpa-onnx pads with log(1e-10)); the int8 model quantizes each
time step's activations over the batch, so batched results can differ slightly from one-at-a-time results.

## Streaming (asrlib)
```python
from asrlib.export.streaming import StreamingRecognizer
rec = StreamingRecognizer("path/to/bundle")
stream = rec.new_stream()
for chunk in chunks:                       # float32 samples at {sample_rate} Hz, any chunk size
    stream.accept_waveform({sample_rate}, chunk)
    print(stream.partial())                # words so far
print(stream.finish())                     # final words; identical to whole-utterance decoding
```
{model}

## Long recordings (minutes to hours)
The model was trained on utterances of seconds: cut a long input into segments at its pauses and start each from a
zero state (`h`, `c`{zeros}). asrlib does it with the settings in `bundle.json`'s `decode`:
`StreamingRecognizer("path/to/bundle", endpoint=EndpointRules.of_bundle(check_bundle("path/to/bundle")))`
(`asrlib.export.streaming`, `asrlib.export.bundle`); `stream.segments` then holds each segment's words and times.
To do the same in an app's own loop: a pause is a run of frames whose most probable token (of the log-probabilities,
see Output) is the blank (id 0) of at least
`segment_min_silence` seconds after some speech. Do not restart where that run reaches `segment_min_silence`: the
model emits a word's token after the word, so by then the next word may have begun. Keep the last `segment_pad`
seconds of fbank frames, let the model run on with its old state until it emits a non-blank token, then start the
next segment from a zero state in the middle of the pause (at most `segment_pad` before that token) and run the kept
frames again from there. On the digits recipe this takes long-form WER from 2.2-2.6 points above the same speech as
separate utterances to within 0.3 of its per-utterance WER, on five trained seeds (asrlib's docs/long-recordings.md).

## Labels
`TLG.fst` input labels are token id + 1 (0 = epsilon, 1 = blank), output labels are word ids of `words.txt`.
"""


def sherpa_online_readme(chunk_frames: int, sample_rate: int, feat_dim: int) -> str:
    """The bundle README's section on running :data:`asrlib.export.bundle.SHERPA_ONLINE` with sherpa-onnx."""
    return f"""
## Streaming with sherpa-onnx (`model.sherpa-online.int8.onnx`)
The chunk model in sherpa-onnx's streaming WeNet CTC contract (its metadata gives the sizes; the forward LSTM state
rides in the convolution cache). `OnlineRecognizer.from_wenet_ctc` has no graph option, so build the config:
```python
from sherpa_onnx.lib import _sherpa_onnx as so
cfg = so.OnlineRecognizerConfig(
    feat_config=so.FeatureExtractorConfig(sampling_rate={sample_rate}, feature_dim={feat_dim}),
    model_config=so.OnlineModelConfig(wenet_ctc=so.OnlineWenetCtcModelConfig(
        model="model.sherpa-online.int8.onnx", chunk_size={chunk_frames}, num_left_chunks=0),
        tokens="tokens.txt", num_threads=1),
    endpoint_config=so.EndpointConfig(), decoding_method="greedy_search",
    ctc_fst_decoder_config=so.OnlineCtcFstDecoderConfig(graph="TLG.fst", max_active=3000))
rec = so.OnlineRecognizer(cfg); s = rec.create_stream()
# s.accept_waveform({sample_rate}, chunk) as audio comes, decoding while rec.is_ready(s); at the end feed
# {SHERPA_ONLINE_TAIL_SECONDS} s of zeros (the last window's right context), s.input_finished(), decode, then
# rec.get_result(s).words: word ids of words.txt
```
"""
