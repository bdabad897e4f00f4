"""A noise corpus as lhotse cuts, for mixing into training cuts (``train.noise_cuts``): MUSAN as ``lhotse prepare
musan`` writes it, any lhotse cut or recording manifest, or a folder of audio files. Nothing is copied or converted:
the cuts point at the audio where it lies, resampled lazily to the corpus rate."""

from __future__ import annotations

from pathlib import Path

from lhotse import CutSet, Recording, RecordingSet
from lhotse.serialization import load_manifest

from asrlib.errors import AsrError, PathLike

AUDIO_SUFFIXES = (".wav", ".flac", ".sph", ".ogg", ".opus", ".mp3")


def _recordings_of_dir(folder: Path) -> RecordingSet:
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file())
    recs = []
    for p in files:
        try:
            recs.append(Recording.from_file(p, recording_id=str(p.relative_to(folder).with_suffix(""))))
        except Exception as e:  # noqa: BLE001 - any unreadable file: name it
            raise AsrError(f"noise corpus: cannot read {p}: {' '.join(str(e).split())[:200]}") from None
    return RecordingSet.from_recordings(recs)


def open_noise_corpus(path: PathLike, sample_rate: int) -> CutSet:
    """Mono cuts of the noise in ``path`` (a folder of audio files, or a lhotse cut/recording manifest), held in
    memory (noise corpora are small: MUSAN is 2 k files), at ``sample_rate``, without stored features (the mix is
    made in the audio domain). A multi-channel recording gives its first channel. Errors name the file."""
    path = Path(path)
    if path.is_dir():
        manifest = _recordings_of_dir(path)
    elif path.is_file():
        try:
            manifest = load_manifest(path)
        except Exception as e:  # noqa: BLE001 - a damaged or foreign file: name it
            raise AsrError(f"noise corpus: {path} is not a lhotse manifest: {' '.join(str(e).split())[:200]}") from None
    else:
        raise AsrError(f"noise corpus {path} does not exist (train.noise_cuts)")
    if isinstance(manifest, RecordingSet):
        manifest = CutSet.from_manifests(recordings=manifest)
    if not isinstance(manifest, CutSet):
        raise AsrError(f"noise corpus: {path} holds a {type(manifest).__name__}, not cuts or recordings")
    cuts = []
    for cut in manifest:
        if cut.num_channels is not None and cut.num_channels > 1:
            cut = cut.to_mono(mono_downmix=False)[0]
        if not cut.has_recording:
            raise AsrError(f"noise corpus: cut {cut.id} in {path} has no audio")
        # mixed as audio (stored noise features may come from another extractor); its own labels do not count
        cut = cut.drop_features().drop_supervisions()
        cuts.append(cut if cut.sampling_rate == sample_rate else cut.resample(sample_rate))
    if not cuts:
        raise AsrError(f"noise corpus {path} holds no audio (looked for {', '.join(AUDIO_SUFFIXES)})")
    return CutSet.from_cuts(cuts)
