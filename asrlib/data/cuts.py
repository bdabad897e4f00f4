"""Lazy lhotse cut manifests: what the trainer's data path reads, one ``cuts.jsonl.gz`` per feature directory.

A Kaldi data dir (``wav.scp`` + optional ``segments``, ``text``, ``utt2spk``) and its feature dir (``feats.scp``,
``utt2num_frames``) stay the interchange format between stages; :func:`write_cuts` turns them into lhotse
``MonoCut``\\ s, streamed to disk (memory does not grow with the corpus): the recording where the audio lies (no
copy), the supervision (text, speaker) and the features, a matrix in a Kaldi archive (``storage_type``
:data:`KALDI_ARK`, read by :class:`KaldiArkReader`, compressed or not). :func:`open_cuts` opens such a manifest
lazily; a line that does not parse is an :class:`AsrError` naming the file and the line.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Dict, Iterator, Optional

import numpy as np
from lhotse import CutSet, Features, MonoCut, Recording, SupervisionSegment
from lhotse.audio import AudioSource
from lhotse.features.io import FeaturesReader, register_reader
from lhotse.lazy import LazyManifestIterator
from lhotse.serialization import deserialize_item, open_best

from asrlib.errors import AsrError, PathLike
from asrlib.io.tables import read_table, read_table_dict

KALDI_ARK = "kaldi_ark"  # lhotse storage_type of features in a Kaldi archive: storage_path the .ark, key the offset
CUTS_NAME = "cuts.jsonl.gz"


@register_reader
class KaldiArkReader(FeaturesReader):
    """lhotse features reader of one matrix in a Kaldi archive (float32 or compressed) through kaldi_native_io."""

    name = KALDI_ARK

    def __init__(self, storage_path: PathLike, *args, **kwargs) -> None:
        super().__init__()
        self.storage_path = str(storage_path)

    def read(self, key: str, left_offset_frames: int = 0, right_offset_frames: Optional[int] = None) -> np.ndarray:
        import kaldi_native_io as knio

        arr = knio.FloatMatrix.read(f"{self.storage_path}:{key}").numpy()
        return arr[left_offset_frames:right_offset_frames]


class NumberedManifest(LazyManifestIterator):
    """lhotse's lazy JSONL manifest iterator, with errors that name the file and the line."""

    def __len__(self) -> int:  # one pass through the checked reader (lhotse's own count reads the raw stream)
        return sum(1 for _ in self)

    def __iter__(self):
        path = self.source.path
        n = 0
        with open_best(path, "r") as f:
            while True:
                try:
                    line = f.readline()
                except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:  # a damaged gzip stream or text
                    raise AsrError(f"{path}:{n + 1}: damaged manifest ({type(e).__name__}: {str(e)[:150]})") from None
                if not line:
                    return
                n += 1
                if not line.strip():
                    continue
                try:
                    item = deserialize_item(json.loads(line))
                except Exception as e:  # noqa: BLE001 - bad JSON or a dict lhotse cannot make an object of
                    why = " ".join(str(e).split())[:200] or type(e).__name__
                    raise AsrError(f"{path}:{n}: not a lhotse manifest line ({type(e).__name__}: {why})") from None
                yield item


def open_cuts(path: PathLike) -> CutSet:
    """The cuts of a ``.jsonl(.gz)`` manifest, read lazily (one line at a time, as iterated)."""
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"cut manifest {path} does not exist; the feature stage (steps.compute_fbank) writes it")
    return CutSet(NumberedManifest(path))


def _audio_info(path: str, cache: Dict[str, tuple]) -> tuple:
    if path not in cache:
        import soundfile as sf

        info = sf.info(path)
        cache.clear()  # segments of one recording are consecutive in sorted data dirs: keep just the last one
        cache[path] = (info.samplerate, info.frames)
    return cache[path]


def iter_cuts(data_dir: Optional[PathLike], feats_dir: Optional[PathLike] = None) -> Iterator[MonoCut]:
    """The cuts of a Kaldi data dir (in its utterance order), with the features of ``feats_dir`` when given (an
    utterance without features there, e.g. excluded at the feature stage for the reason in the feature dir's
    ``excluded.txt``, is a cut without features: the trainer lists it as such). No data dir, or one without
    ``wav.scp`` (features imported without their audio), gives cuts of the features alone (without transcripts when
    there is no data dir)."""
    from asrlib.features.fbank import Segment, read_segments

    data_dir = Path(data_dir) if data_dir is not None else Path("/nonexistent-data-dir")
    text = read_table_dict(data_dir / "text") if (data_dir / "text").is_file() else {}
    u2s = read_table_dict(data_dir / "utt2spk") if (data_dir / "utt2spk").is_file() else {}
    feats: Dict[str, str] = {}
    frames: Dict[str, int] = {}
    dim = 0
    if feats_dir is not None:
        from asrlib.kaldi_io import read_scp

        feats = read_scp(Path(feats_dir) / "feats.scp")
        frames = {k: int(v) for k, v in read_table(Path(feats_dir) / "utt2num_frames")}
    has_audio = (data_dir / "wav.scp").is_file()
    if not has_audio and feats_dir is None:
        raise AsrError(f"{data_dir} has no wav.scp: cuts need its audio or a feature dir")
    segments = read_segments(data_dir) if has_audio else [Segment(u, "") for u in sorted(feats)]
    cache: Dict[str, tuple] = {}
    for seg in segments:
        rec = None
        sr, start, duration = 16000, seg.start, 0.01
        if has_audio:
            try:
                sr, n = _audio_info(seg.path, cache)
                rec = Recording(Path(seg.path).stem, [AudioSource("file", [0], seg.path)], sr, n, n / sr)
                duration = (seg.end if seg.end >= 0 else n / sr) - start
            except Exception as e:  # noqa: BLE001 - unreadable audio: the feature stage listed why; the cut says none
                if feats_dir is None or seg.utt in feats:
                    raise AsrError(
                        f"{seg.path}: cannot read the audio of utterance {seg.utt} ({data_dir / 'wav.scp'}): {e}"
                        + (
                            "; its features exist: to train from features alone (audio on another machine), "
                            f"leave wav.scp and segments out of {data_dir}"
                            if feats_dir is not None
                            else ""
                        )
                    ) from e
        features = None
        if feats_dir is not None and seg.utt in feats:
            ark, offset = feats[seg.utt].rsplit(":", 1)
            if not dim:
                import kaldi_native_io as knio

                dim = knio.FloatMatrix.read(feats[seg.utt]).numpy().shape[1]
            nf = frames[seg.utt]
            duration = nf / 100.0  # the features' span: 10 ms frames (what batches are measured in)
            features = Features(
                type="kaldi-fbank",
                num_frames=nf,
                num_features=dim,
                frame_shift=0.01,
                sampling_rate=sr,
                start=start,
                duration=duration,
                storage_type=KALDI_ARK,
                storage_path=ark,
                storage_key=offset,
                recording_id=rec.id if rec is not None else seg.utt,
                channels=0,
            )
        rec_id = rec.id if rec is not None else seg.utt
        sup = SupervisionSegment(
            seg.utt, rec_id, start, duration, channel=0, text=text.get(seg.utt), speaker=u2s.get(seg.utt)
        )
        yield MonoCut(seg.utt, start, duration, 0, supervisions=[sup], features=features, recording=rec)


def write_cuts(
    data_dir: Optional[PathLike], out_path: PathLike, feats_dir: Optional[PathLike] = None
) -> Dict[str, float]:
    """Write :func:`iter_cuts` to ``out_path`` (``.jsonl.gz``) atomically, streaming; returns ``{"cuts": n,
    "hours": h}``."""
    out_path = Path(out_path)
    tmp = out_path.with_name(f".tmp{os.getpid()}.{out_path.name}")
    n, seconds = 0, 0.0
    try:
        with CutSet.open_writer(tmp) as w:
            for cut in iter_cuts(data_dir, feats_dir):
                w.write(cut)
                n, seconds = n + 1, seconds + cut.duration
        os.replace(tmp, out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return {"cuts": n, "hours": round(seconds / 3600, 4)}


def ensure_cuts(feats_dir: PathLike, data_dir: Optional[PathLike] = None) -> Path:
    """``feats_dir/cuts.jsonl.gz``, (re)written when it is missing or older than the features or the transcripts
    (``data_dir``: the Kaldi data dir of the features; default: the one the feature stage recorded, if any; without
    one the cuts have the features alone, which is all that frame targets need)."""
    feats_dir = Path(feats_dir)
    path = feats_dir / CUTS_NAME
    if data_dir is None:
        marker = feats_dir / ".done"
        try:
            data_dir = json.loads(marker.read_text()).get("data_dir") if marker.is_file() else None
        except ValueError:
            data_dir = None
    if data_dir is None:  # features alone: kept apart from the manifest with transcripts
        path = feats_dir / f"features_only.{CUTS_NAME}"
    sources = [feats_dir / "feats.scp"] + ([Path(data_dir) / "text"] if data_dir is not None else [])
    newest = max((p.stat().st_mtime for p in sources if p.is_file()), default=0.0)
    if path.is_file() and path.stat().st_mtime >= newest:
        return path
    write_cuts(data_dir, path, feats_dir)
    return path
