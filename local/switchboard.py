"""Switchboard (conversational telephone speech, 2-channel 8 kHz SPHERE) with the Hub5'00 (eval2000) test set.

    python -m local.switchboard --config recipes/switchboard/config.yaml --out-dir data [--corpus-dir DIR]

``corpus_dir`` holds the LDC packages side by side (the names lhotse's recipes use):

* ``LDC97S62/``: Switchboard-1 Release 2 audio (``*.sph`` anywhere below) and ``swb_ms98_transcriptions/`` (the
  Mississippi State word transcripts ``.../sw2001A-ms98-a-trans.text``) -> lhotse ``prepare_switchboard``;
* ``LDC2002S09/hub5e_00/english/*.sph`` + ``LDC2002T43/reference/english/*.txt`` -> lhotse ``prepare_eval2000``;
* for SWB-2000, Fisher English (``LDC2004S13`` ...) -> lhotse ``prepare_fisher_english`` (wired, not tested here).

``data.subsets`` picks them: ``[swb1, eval2000]`` (SWB-300) or ``[swb1, fisher, eval2000]`` (SWB-2000).

Each conversation side becomes one mono WAV (``wav/<set>/<conv>-<A|B>.wav``; a side is a speaker, as in Kaldi's
recipe) and the transcript segments a ``segments`` file with Kaldi-style ids ``sw02001-A_000098-001156``.
Transcripts are normalised for the CMUdict lexicon: upper case, noise/laughter/silence markers dropped,
``[laughter-yes]`` -> ``YES``, partial words (``th[e]-``) dropped; segments left without words are listed in
``excluded.txt``, as are conversations without both transcript sides. Sets: ``train``, ``dev`` (every 20th
conversation of Switchboard, at least one), ``test`` (eval2000), ``test_swb`` and ``test_ch`` (its Switchboard and
CallHome halves). SPHERE files are read with ``sph2pipe`` when it is installed (LDC's shorten-compressed
originals need it), otherwise with libsndfile (uncompressed or u-law SPHERE only).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from multiprocessing import Pool
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from tqdm import tqdm

from asrlib.config import DataConfig
from asrlib.data.corpus import (
    check_speed_factors,
    corpus_main,
    save_manifest,
    subset_data_dir,
    write_excluded,
    write_tables,
)
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_path
from asrlib.io.stage import is_done, mark_done

log = logging.getLogger("local.switchboard")

SUBSETS = ("swb1", "fisher", "eval2000")
SIDES = "AB"
DEV_EVERY = 20
_DROP = re.compile(r"^\[(noise|laughter|vocalized-noise|silence)\]$|^<.*>$|^\(\(|\)\)$|^%")


def normalize_text(text: str) -> str:
    """Switchboard/eval2000 transcript -> upper-case words for the CMUdict lexicon (see the module docstring)."""
    words = []
    for tok in text.replace("((", " ").replace("))", " ").split():
        tok = tok.lower()
        m = re.match(r"^\[laughter-(.+)\]$", tok)
        if m:
            tok = m.group(1)
        if _DROP.match(tok) or "[" in tok or tok.startswith("-") or tok.endswith("-"):
            continue
        tok = tok.strip("{}").replace("_1", "")
        tok = re.sub(r"[^a-z'\-]", "", tok)
        if tok:
            words.append(tok.upper())
    return " ".join(words)


def is_switchboard_dir(d: Path) -> bool:
    return d.is_dir() and ((d / "LDC97S62").is_dir() or (d / "LDC2002S09").is_dir())


def use_available_sphere_reader() -> str:
    """lhotse reads .sph with sph2pipe; without it, switch lhotse to libsndfile (uncompressed/u-law SPHERE)."""
    if shutil.which("sph2pipe"):
        return "sph2pipe"
    from lhotse.audio.backend import LibsndfileBackend, set_current_audio_backend

    set_current_audio_backend(LibsndfileBackend())
    return "libsndfile"


def _side_job(job: Tuple[str, int, str, str]) -> str:
    """Write one channel of a recording as a mono 16-bit WAV (reused when present)."""
    import soundfile as sf
    from lhotse import Recording

    rec_json, channel, dst, reader = job
    if Path(dst).is_file():
        return dst
    if reader == "libsndfile":
        use_available_sphere_reader()
    rec = Recording.from_dict(__import__("json").loads(rec_json))
    try:
        x = rec.load_audio(channels=channel)[0]
    except Exception as e:  # noqa: BLE001 - named in the error
        raise AsrError(
            f"cannot read channel {channel} of {rec.sources[0].source}: {str(e).splitlines()[-1][:200]} "
            "(LDC's shorten-compressed SPHERE files need sph2pipe on PATH)"
        ) from None
    with atomic_path(dst) as tmp:
        sf.write(
            str(tmp),
            np.clip(np.round(x * 32768), -32768, 32767).astype(np.int16),
            rec.sampling_rate,
            subtype="PCM_16",
            format="WAV",
        )
    return dst


def _split_sides(recordings, wav_dir: Path, nj: int, reader: str) -> Dict[Tuple[str, int], str]:
    import json

    wav_dir.mkdir(parents=True, exist_ok=True)
    jobs = [
        (json.dumps(r.to_dict()), c, str((wav_dir / f"{r.id}-{SIDES[c]}.wav").resolve()), reader)
        for r in recordings
        for c in range(min(2, r.num_channels))
    ]
    bar = dict(total=len(jobs), desc=f"conversation sides -> {wav_dir}", unit="side", mininterval=1.0)
    if nj > 1 and len(jobs) > 8:
        with Pool(nj) as pool:
            list(tqdm(pool.imap(_side_job, jobs, chunksize=4), **bar))
    else:
        list(tqdm(map(_side_job, jobs), **bar))
    return {(json.loads(j[0])["id"], j[1]): j[2] for j in jobs}


def _kaldi_tables(
    recordings, supervisions, wav_dir: Path, nj: int, reader: str
) -> Tuple[Dict, Dict, Dict, Dict, List[Tuple[str, str]]]:
    """wav, text, utt2spk, segments (+ exclusions) with one recording per conversation side."""
    paths = _split_sides(recordings, wav_dir, nj, reader)
    wav, text, utt2spk, segs = {}, {}, {}, {}
    excluded: List[Tuple[str, str]] = []
    for sup in supervisions:
        side = f"{sup.recording_id}-{SIDES[sup.channel if isinstance(sup.channel, int) else sup.channel[0]]}"
        utt = f"{side}_{int(round(sup.start * 100)):06d}-{int(round(sup.end * 100)):06d}"
        words = normalize_text(sup.text or "")
        if not words:
            excluded.append((utt, f"no-words: transcript '{(sup.text or '')[:60]}' has only noise/partial words"))
            continue
        if utt in text:
            excluded.append((utt, f"duplicate-segment: {sup.id} has the same side and times as another segment"))
            continue
        wav[side] = paths[(sup.recording_id, SIDES.index(side[-1]))]
        text[utt], utt2spk[utt], segs[utt] = words, side, (side, sup.start, sup.end)
    return wav, text, utt2spk, segs, excluded


def _swb1(corpus_dir: Path, tmp: Path) -> Tuple[object, object, List[Tuple[str, str]]]:
    """lhotse prepare_switchboard on the conversations that have both transcript sides (others listed)."""
    from lhotse.recipes import prepare_switchboard as lhotse_prepare

    audio_dir, trans_dir = corpus_dir / "LDC97S62", corpus_dir / "LDC97S62" / "swb_ms98_transcriptions"
    if not trans_dir.is_dir():
        trans_dir = corpus_dir / "swb_ms98_transcriptions"
    if not trans_dir.is_dir():
        raise AsrError(
            f"no swb_ms98_transcriptions/ in {corpus_dir / 'LDC97S62'} or {corpus_dir}; download the "
            "Mississippi State transcripts (switchboard_word_alignments.tar.gz) and unpack them there"
        )
    texts = {p.name.split("-")[0] for p in trans_dir.rglob("*trans.text")}
    links = tmp / "swb_audio"
    links.mkdir()
    bad = []
    for sph in sorted(audio_dir.rglob("*.sph")):
        name = sph.stem.replace("sw0", "sw")
        missing = [s for s in SIDES if f"{name}{s}" not in texts]
        if missing:
            bad.append(
                (sph.stem, f"missing-transcript: no {'/'.join(name + s for s in missing)} transcript in {trans_dir}")
            )
        else:
            os.symlink(sph.resolve(), links / sph.name)
    if not any(links.iterdir()):
        raise AsrError(f"no Switchboard conversation in {audio_dir} has both transcript sides ({len(bad)} listed)")
    m = lhotse_prepare(links, trans_dir, absolute_paths=True, omit_silence=True)
    from lhotse import RecordingSet

    recs = RecordingSet.from_recordings(_resolve(r) for r in m["recordings"])
    return recs, m["supervisions"], bad


def _resolve(rec):
    """``rec`` with its (symlinked) source path replaced by the real file."""
    from lhotse.audio import AudioSource

    s = rec.sources[0]
    return rec.__class__(
        id=rec.id,
        sources=[AudioSource(type=s.type, channels=s.channels, source=str(Path(s.source).resolve()))],
        sampling_rate=rec.sampling_rate,
        num_samples=rec.num_samples,
        duration=rec.duration,
    )


def prepare_switchboard(
    corpus_dir: Path,
    out_dir: Path,
    subsets: Sequence[str] = ("swb1", "eval2000"),
    nj: int = 1,
    speed_perturb: Sequence[float] = (),
) -> Dict[str, int]:
    """Manifests + Kaldi dirs (see the module docstring); returns ``{set: number of utterances}``. With
    ``speed_perturb`` factors ``train`` is the perturbed set and ``train_nosp`` the original."""
    from lhotse.recipes import prepare_eval2000, prepare_fisher_english

    corpus_dir, out_dir = Path(corpus_dir).resolve(), Path(out_dir)
    unknown = [s for s in subsets if s not in SUBSETS]
    if unknown or "swb1" not in subsets:
        raise AsrError(f"data.subsets must contain swb1 and may add fisher, eval2000; got {list(subsets)}")
    factors = check_speed_factors(speed_perturb)
    perturb = bool(factors) and factors != [1.0]
    fp = {"corpus_dir": str(corpus_dir), "subsets": list(subsets), "speed_perturb": factors}
    marker = out_dir / ".switchboard.done"
    if is_done(marker, fingerprint=fp):
        log.info("Switchboard data in %s is complete; skipping", out_dir)
        return {}
    reader = use_available_sphere_reader()
    log.info("reading SPHERE audio with %s", reader)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: Dict[str, int] = {}
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".swb_tmp.") as tmp_name:
        tmp = Path(tmp_name)
        recs, sups, bad = _swb1(corpus_dir, tmp)
        save_manifest(recs, out_dir / "manifests" / "swbd_recordings_all.jsonl.gz")
        save_manifest(sups, out_dir / "manifests" / "swbd_supervisions_all.jsonl.gz")
        wav, text, utt2spk, segs, excl = _kaldi_tables(recs, sups, out_dir / "wav" / "swb", nj, reader)
        if "fisher" in subsets:
            fm = prepare_fisher_english(corpus_dir, tmp / "fisher", absolute_paths=True, num_jobs=nj)
            save_manifest(fm["recordings"], out_dir / "manifests" / "fisher_recordings_all.jsonl.gz")
            save_manifest(fm["supervisions"], out_dir / "manifests" / "fisher_supervisions_all.jsonl.gz")
            fw, ft, fu, fs, fe = _kaldi_tables(
                fm["recordings"], fm["supervisions"], out_dir / "wav" / "fisher", nj, reader
            )
            for table, new in ((wav, fw), (text, ft), (utt2spk, fu), (segs, fs)):
                table.update(new)
            excl += fe
        write_tables(out_dir / "swb_all", wav, text, utt2spk, segs)
        convs = sorted({s.split("-")[0] for s in set(utt2spk.values()) if s.startswith("sw")})
        dev_convs = set(convs[::DEV_EVERY]) if len(convs) > 1 else set()
        if not dev_convs:
            raise AsrError("Switchboard needs at least 2 conversations (one goes to dev)")
        train = out_dir / ("train_nosp" if perturb else "train")
        counts["train"] = subset_data_dir(out_dir / "swb_all", train, lambda u, s: s.split("-")[0] not in dev_convs)
        if perturb:
            from asrlib.data.speed_perturb import speed_perturb_data_dir

            counts["train"] = speed_perturb_data_dir(train, out_dir / "train", factors, out_dir / "wav_sp", nj)
        counts["dev"] = subset_data_dir(out_dir / "swb_all", out_dir / "dev", lambda u, s: s.split("-")[0] in dev_convs)
        write_excluded(out_dir / "train", bad + [e for e in excl if e[0].split("-")[0] not in dev_convs])
        write_excluded(out_dir / "dev", [e for e in excl if e[0].split("-")[0] in dev_convs])
        if "eval2000" in subsets:
            em = prepare_eval2000(corpus_dir, tmp / "eval2000", absolute_paths=True)
            save_manifest(em["recordings"], out_dir / "manifests" / "eval2000_recordings_all.jsonl.gz")
            save_manifest(em["supervisions"], out_dir / "manifests" / "eval2000_supervisions_unnorm.jsonl.gz")
            ew, et, eu, es, ee = _kaldi_tables(
                em["recordings"], em["supervisions"], out_dir / "wav" / "eval2000", nj, reader
            )
            write_tables(out_dir / "test", ew, et, eu, es)
            write_excluded(out_dir / "test", ee)
            counts["test"] = len(et)
            for name, prefix in (("test_swb", "sw"), ("test_ch", "en")):
                if any(u.startswith(prefix) for u in et):
                    counts[name] = subset_data_dir(out_dir / "test", out_dir / name, lambda u, s: u.startswith(prefix))
    mark_done(marker, {"utterances": counts, "sphere_reader": reader}, fingerprint=fp)
    log.info("Switchboard: %s utterances in %s", counts, out_dir)
    return counts


def _prepare(corpus_dir: Path, out_dir: Path, data: DataConfig, nj: int) -> None:
    prepare_switchboard(corpus_dir, out_dir, data.subsets or ["swb1", "eval2000"], nj, data.speed_perturb)


def main(argv: Optional[List[str]] = None) -> None:
    corpus_main(_prepare, __doc__, is_switchboard_dir, "folder holding LDC97S62/ (and LDC2002S09/, LDC2002T43/)", argv)


if __name__ == "__main__":
    main()
