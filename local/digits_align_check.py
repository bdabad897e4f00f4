"""How right are the GMM alignments of the digits corpus? Compare them with espeak-ng's own phoneme timing.

    python -m local.digits_align_check --data-dir data --ali-dir exp/mono_ali --sets dev

The synthetic corpus is reproducible: for every espeak-ng utterance the generator's plan (voice, rate, pitch, word
gap, leading silence) is rebuilt with local.digits from the corpus parameters, and the same text is spoken again
through libespeak-ng with phoneme events, which give the start time of every phoneme and word in the synthesised
audio. Shifted by the leading silence the generator added, these are reference boundaries. An utterance is used
only if the rebuilt plan has the same id and the rebuilt audio the same length as the corpus wav (so the reference
is exact, not a guess); flite utterances have no timing and are skipped.

Compared: word starts and ends (words.ctm of steps.align) for every word, and phone starts inside words whose
espeak phoneme count equals the lexicon pronunciation's length (e.g. "seven" s E v @ n = S EH V AH N). Writes
``<ali-dir>/<set>/reference_check.json`` and prints a summary (fraction within 20/50 ms, mean absolute error).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import soundfile as sf
from tqdm import tqdm

from asrlib.cli import run_main, setup_logging
from asrlib.errors import AsrError
from asrlib.io.atomic import write_json
from asrlib.io.tables import read_table

log = logging.getLogger("digits_align_check")

_EVENT_WORD, _EVENT_PHONEME, _AUDIO_SYNCHRONOUS, _PHONEME_EVENTS = 1, 7, 2, 1
_RATE, _PITCH, _WORDGAP, _POS_CHARACTER, _ENDPAUSE = 1, 3, 7, 1, 0x1000


class _Event(ctypes.Structure):
    class _Id(ctypes.Union):
        _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _Id),
    ]


class EspeakTimer:
    """libespeak-ng with phoneme events: text -> (number of samples, [(word index, phoneme, start sample)])."""

    _CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libespeak-ng.so.1")
        except OSError:
            raise AsrError("libespeak-ng.so.1 is not installed (Debian: apt-get install libespeak-ng1)") from None
        self.sample_rate = self.lib.espeak_Initialize(_AUDIO_SYNCHRONOUS, 0, None, _PHONEME_EVENTS)
        if self.sample_rate <= 0:
            raise AsrError("libespeak-ng failed to initialise")
        self._n = 0
        self._events: List[Tuple[int, str, int]] = []
        self._word = -1
        self._cb = self._CB(self._callback)  # keep a reference: the library calls it
        self.lib.espeak_SetSynthCallback(self._cb)

    def _callback(self, wav, n, events) -> int:
        if wav and n > 0:
            self._n += n
        i = 0
        while events[i].type != 0:
            e = events[i]
            if e.type == _EVENT_WORD:
                self._word += 1
            elif e.type == _EVENT_PHONEME:
                self._events.append((self._word, bytes(e.id.string).split(b"\0")[0].decode(), e.sample))
            i += 1
        return 0

    @staticmethod
    def _voice_names() -> Dict[str, str]:
        """Language code (what the espeak-ng command line accepts with -v) -> voice name (what the library does)."""
        import subprocess

        out = subprocess.run(["espeak-ng", "--voices"], capture_output=True, text=True).stdout.splitlines()[1:]
        names: Dict[str, str] = {}
        for line in out:
            f = line.split()
            if len(f) >= 5 and not f[4].startswith("mb/"):
                names.setdefault(f[1], f[3].replace("_", " "))
        return names

    def synth(self, text: str, voice: str, rate: int, pitch: int, gap: int) -> Tuple[int, List[Tuple[int, str, int]]]:
        """Speak ``text`` with ``voice`` (``accent+variant`` as given to ``espeak-ng -v``)."""
        self._n, self._events, self._word = 0, [], -1
        if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
            accent, _, variant = voice.partition("+")
            if not hasattr(self, "_names"):
                self._names = self._voice_names()
            alt = self._names.get(accent, accent) + (f"+{variant}" if variant else "")
            if self.lib.espeak_SetVoiceByName(alt.encode()) != 0:
                raise AsrError(f"espeak-ng voice {voice} is not available")
        for param, value in ((_RATE, rate), (_PITCH, pitch), (_WORDGAP, gap)):
            self.lib.espeak_SetParameter(param, value, 0)
        data = text.encode()
        self.lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, _ENDPAUSE, None, None)
        self.lib.espeak_Synchronize()
        return self._n, list(self._events)


def _synth_fresh(args: Tuple[str, str, int, int, int]) -> Tuple[int, List[Tuple[int, str, int]]]:
    """One utterance in a fresh process: libespeak-ng keeps state between utterances (its audio then differs by a
    few ms from the command line's), a first utterance after initialisation matches the command line exactly."""
    return EspeakTimer().synth(*args)


def synth_each_fresh(jobs: List[Tuple[str, str, int, int, int]]) -> List[Tuple[int, List[Tuple[int, str, int]]]]:
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
        return list(tqdm(pool.imap(_synth_fresh, jobs), total=len(jobs), desc="espeak-ng timing", unit="utt"))


def reference_segments(
    events: List[Tuple[int, str, int]], num_words: int, total: int, sr: int
) -> Optional[List[List[Tuple[str, float, float]]]]:
    """Per word: [(phoneme, start s, end s)] without pauses; None if the events do not cover every word."""
    words: List[List[Tuple[str, float, float]]] = [[] for _ in range(num_words)]
    for k, (w, ph, start) in enumerate(events):
        end = events[k + 1][2] if k + 1 < len(events) else total
        if 0 <= w < num_words and not ph.startswith("_"):
            words[w].append((ph, start / sr, end / sr))
    return words if all(words) else None


def _ctm(path: Path) -> Dict[str, List[Tuple[str, float, float]]]:
    out: Dict[str, List[Tuple[str, float, float]]] = {}
    for line in path.read_text().splitlines():
        utt, _, start, dur, label = line.split()
        out.setdefault(utt, []).append((label, float(start), float(start) + float(dur)))
    return out


def check_set(data_dir: Path, ali_dir: Path, split: str, max_utts: int) -> dict:
    from local import digits

    params = json.loads((data_dir / ".digits.params.json").read_text())
    speakers = digits.split_speakers()[split]
    plans = digits.plan_split(
        split,
        params["counts"][split],
        speakers,
        params["seed"],
        params["noise_fraction"],
        data_dir / "wav" / split,
        params["sample_rate"],
    )
    texts = dict(read_table(data_dir / split / "text"))
    words_ctm, phones_ctm = _ctm(ali_dir / split / "words.ctm"), _ctm(ali_dir / split / "phones.ctm")
    word_err, end_err, phone_err = [], [], []
    skipped = {"flite": 0, "plan differs": 0, "length differs": 0, "not aligned": 0, "no events": 0}
    todo = []
    for p in [p for p in plans if p.utt in texts][: max_utts or None]:
        if p.speaker.engine != "espeak":
            skipped["flite"] += 1
        elif texts[p.utt].split() != list(p.words):
            skipped["plan differs"] += 1
        elif p.utt not in words_ctm:
            skipped["not aligned"] += 1
        else:
            todo.append(p)
    synth = synth_each_fresh(
        [
            (
                " ".join(w.lower() for w in p.words),
                f"{p.speaker.voice}+{p.speaker.variant}",
                int(p.rate),
                int(p.pitch),
                p.gap,
            )
            for p in todo
        ]
    )
    espeak_sr = EspeakTimer().sample_rate
    used = 0
    for p, (n22, events) in zip(todo, synth):
        rng = np.random.default_rng(p.seed)  # the generator's _postprocess draws: level, lead, trail
        rng.uniform(-12.0, -2.0)
        lo, hi = (0.1, 0.8) if p.noise else (0.05, 0.2)
        sr = p.sample_rate
        lead, trail = (int(rng.uniform(lo, hi) * sr) for _ in range(2))
        wav_len = sf.info(p.path).frames
        if abs(wav_len - lead - trail - n22 * sr / espeak_sr) > 0.002 * sr:
            skipped["length differs"] += 1
            continue
        ref = reference_segments(events, len(p.words), n22, espeak_sr)
        hyp = words_ctm[p.utt]
        if ref is None or len(hyp) != len(p.words):
            skipped["no events"] += 1
            continue
        used += 1
        offset = lead / sr
        for w, (word, hb, he) in enumerate(hyp):
            word_err.append(hb - (ref[w][0][1] + offset))
            end_err.append(he - (ref[w][-1][2] + offset))
            inside = [s for s in phones_ctm[p.utt] if s[0] != "SIL" and hb - 1e-6 <= s[1] < he - 1e-6]
            if len(inside) == len(ref[w]):
                phone_err += [h[1] - (r[1] + offset) for h, r in zip(inside, ref[w])]
    if not used:
        raise AsrError(
            f"no {split} utterance could be checked (skipped: {skipped}); was the corpus made by this "
            f"version of local.digits?"
        )

    def stats(e: List[float]) -> dict:
        a = np.abs(np.asarray(e))
        return {
            "n": int(a.size),
            "within_20ms": float(np.mean(a <= 0.02 + 1e-9)),
            "within_50ms": float(np.mean(a <= 0.05 + 1e-9)),
            "mean_abs_ms": float(a.mean() * 1000),
            "median_abs_ms": float(np.median(a) * 1000),
            "mean_signed_ms": float(np.mean(e) * 1000),
        }

    return {
        "set": split,
        "utterances": used,
        "skipped": skipped,
        "word_start": stats(word_err),
        "word_end": stats(end_err),
        "phone_start": stats(phone_err),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, required=True, help="the digits corpus (local.digits --out-dir)")
    p.add_argument("--ali-dir", type=Path, required=True, help="steps.align --out-dir")
    p.add_argument("--sets", nargs="+", default=["dev"])
    p.add_argument("--max-utts", type=int, default=0, help="check at most this many utterances per set (0 = all)")
    a = p.parse_args(argv)
    setup_logging()
    for split in a.sets:
        res = check_set(a.data_dir, a.ali_dir, split, a.max_utts)
        write_json(a.ali_dir / split / "reference_check.json", res)
        for kind in ("word_start", "word_end", "phone_start"):
            s = res[kind]
            print(
                f"{split} {kind:11s}: {s['n']:5d} boundaries, {100 * s['within_20ms']:.1f}% within 20 ms, "
                f"{100 * s['within_50ms']:.1f}% within 50 ms, mean |err| {s['mean_abs_ms']:.1f} ms, "
                f"median {s['median_abs_ms']:.1f} ms, mean signed {s['mean_signed_ms']:+.1f} ms"
            )
        print(f"{split}: {res['utterances']} utterances checked; skipped {res['skipped']}")
    return 0


if __name__ == "__main__":
    run_main(main)
