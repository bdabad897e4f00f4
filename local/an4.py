"""CMU AN4 (Census) read speech, close-talking microphone: spoken letters, digits, names, dates and commands, 16 kHz
FLAC. 948 training utterances of 74 speakers, 130 test utterances of 10 other speakers.

    python -m local.an4 --config recipes/an4/config.yaml --out-dir data [--corpus-dir DIR/an4]

The corpus folder holds ``etc/an4_{train,test}.transcription`` (``WORDS (utt-id)``; training lines carry the markers
``<s> ... </s>``, which are dropped: only the corpus's words are kept), ``etc/an4.dic`` (the corpus's pronunciation
dictionary, Sphinx phones = CMUdict's without stress; variants ``WORD(2)``) and the audio
``wav/an4_clstk/<speaker>/<utt-id>.flac`` and ``wav/an4test_clstk/<speaker>/<utt-id>.flac``. The FLAC files are read
where they lie (lhotse ``Recording``, ``wav.scp`` paths); no converted copy is written.

Sets: ``dev`` = the training utterances of a few held-out training speakers (``data.dev_speakers``, default 5 spread
over the sorted speaker list: tuning on speakers the model never heard, as the test set is), ``train`` = the other
speakers' (with ``data.speed_perturb`` the perturbed set, audio in ``wav_sp/``; ``train_nosp`` the original),
``test`` = AN4's test set. ``data.max_speakers`` > 0 keeps only that many speakers of each set (tiny test runs).
Utterance ids are ``<speaker>-<utt-id>`` (Kaldi's rule: they start with the speaker).

Output in ``out_dir``: ``manifests/an4_{recordings,supervisions}_{train,dev,test}.jsonl.gz``; Kaldi data dirs
``train``, ``dev``, ``test`` (+ ``train_nosp``); ``local/dict/lexicon.txt`` (the corpus dictionary as a Kaldi
lexicon, ``lang.lexicon: local/dict/lexicon.txt``); ``local/lm/train_text.txt`` (the training transcripts once
each, without utterance ids and without the speed-perturbed copies: the n-gram's text); ``excluded.txt``
(transcript lines without audio, audio without transcript, unreadable or malformed entries, each with its reason);
``.an4.done`` (written last; a finished folder is skipped).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from asrlib.config import DataConfig
from asrlib.data.corpus import (
    check_speed_factors,
    corpus_main,
    hold_out_speakers,
    load_set_manifests,
    whole_file_manifests,
    write_excluded,
    write_sets,
)
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_open
from asrlib.io.stage import is_done, mark_done

log = logging.getLogger("local.an4")

PARTS = {"train": ("an4_train.transcription", "an4_clstk"), "test": ("an4_test.transcription", "an4test_clstk")}
MARKERS = {"<s>", "</s>", "<sil>"}
LINE = re.compile(r"^(?P<text>.*?)\s*\((?P<utt>[^()\s]+)\)\s*$")
VARIANT = re.compile(r"^(?P<word>.+?)\(\d+\)$")
NUM_DEV_SPEAKERS = 5


def is_an4_dir(d: Path) -> bool:
    """True for a folder laid out like AN4 (``etc/an4_train.transcription`` and ``wav/``)."""
    return (d / "etc" / "an4_train.transcription").is_file() and (d / "wav").is_dir()


def read_transcription(path: Path) -> Tuple[Dict[str, str], List[Tuple[str, str]]]:
    """``{utt-id: WORDS}`` of an AN4 transcription file (markers dropped, words upper-cased) and the lines that are
    not ``WORDS (utt-id)`` as ``(file:line, reason)``."""
    out: Dict[str, str] = {}
    bad: List[Tuple[str, str]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        m = LINE.match(line)
        words = [w.upper() for w in m.group("text").split() if w.lower() not in MARKERS] if m else []
        if m is None:
            bad.append((f"{path.name}:{n}", "malformed-line: expected 'WORDS (utt-id)'"))
        elif not words:
            bad.append((m.group("utt"), f"empty-transcript: {path.name}:{n} has no words"))
        elif m.group("utt") in out:
            bad.append((m.group("utt"), f"duplicate: {path.name}:{n} repeats an utterance id"))
        else:
            out[m.group("utt")] = " ".join(words)
    return out, bad


def read_dictionary(path: Path) -> Dict[str, List[List[str]]]:
    """The corpus dictionary ``etc/an4.dic`` as ``{WORD: [pron, ...]}`` (``WORD(2)`` lines are variants of WORD)."""
    lex: Dict[str, List[List[str]]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 2:
            raise AsrError(f"{path}:{n}: expected 'WORD PHONE ...', got {line.strip()!r}")
        m = VARIANT.match(parts[0])
        word = (m.group("word") if m else parts[0]).upper()
        if parts[1:] not in lex.setdefault(word, []):
            lex[word].append(parts[1:])
    if not lex:
        raise AsrError(f"{path} holds no pronunciations")
    return lex


def default_dev_speakers(speakers: Sequence[str], n: int = NUM_DEV_SPEAKERS) -> List[str]:
    """``n`` speakers spread evenly over the sorted list (AN4's ids start with f/m, so both sexes are drawn)."""
    spk = sorted(speakers)
    if len(spk) <= n:
        raise AsrError(f"{len(spk)} training speakers: too few to hold {n} out as dev")
    return [spk[int((i + 0.5) * len(spk) / n)] for i in range(n)]


def _gender(spk: str) -> Optional[str]:
    return spk[0].upper() if spk[0] in "fm" else None


def scan_part(corpus_dir: Path, part: str) -> Tuple[Dict[str, Tuple[str, str, Path]], List[Tuple[str, str]]]:
    """``{utt-id: (speaker, words, flac)}`` of one AN4 part and the excluded items with their reasons."""
    trans_name, wav_name = PARTS[part]
    trans_path = corpus_dir / "etc" / trans_name
    if not trans_path.is_file():
        raise AsrError(f"{trans_path} does not exist: {corpus_dir} is not a complete AN4 folder")
    texts, bad = read_transcription(trans_path)
    flacs = {p.stem: p for p in sorted((corpus_dir / "wav" / wav_name).glob("*/*.flac"))}
    utts: Dict[str, Tuple[str, str, Path]] = {}
    for utt, words in texts.items():
        if utt not in flacs:
            bad.append((utt, f"missing-audio: no wav/{wav_name}/*/{utt}.flac for {trans_name}'s line"))
            continue
        utts[utt] = (flacs[utt].parent.name, words, flacs[utt].resolve())
    bad += [
        (f"{p.parent.name}/{p.name}", f"no-transcript: not in {trans_name}") for u, p in flacs.items() if u not in texts
    ]
    return utts, bad


def prepare_an4(
    corpus_dir: Path,
    out_dir: Path,
    speed_perturb: Sequence[float] = (),
    nj: int = 1,
    sample_rate: int = 16000,
    dev_speakers: Sequence[str] = (),
    max_speakers: int = 0,
) -> Dict[str, Dict[str, object]]:
    """Manifests and Kaldi data dirs of AN4 (see the module docstring); returns lhotse's
    ``{"train"|"dev"|"test": {"recordings": RecordingSet, "supervisions": SupervisionSet}}``."""
    corpus_dir, out_dir = Path(corpus_dir).resolve(), Path(out_dir)
    factors = check_speed_factors(speed_perturb)
    perturb = bool(factors) and factors != [1.0]
    mdir = out_dir / "manifests"
    fp = {
        "corpus_dir": str(corpus_dir),
        "speed_perturb": factors,
        "sample_rate": sample_rate,
        "dev_speakers": sorted(dev_speakers),
        "max_speakers": max_speakers,
    }
    marker = out_dir / ".an4.done"
    sets = ("train", "dev", "test")
    if is_done(marker, fingerprint=fp):
        log.info("AN4 data in %s is complete; skipping (delete %s to redo)", out_dir, marker)
        return load_set_manifests(mdir, "an4", sets)
    bad: List[Tuple[str, str]] = []
    parts: Dict[str, Dict[str, Tuple[str, str, Path]]] = {}
    for part in PARTS:
        parts[part], b = scan_part(corpus_dir, part)
        bad += b
    train_spk = sorted({s for s, _, _ in parts["train"].values()})
    dev_spk = list(dev_speakers) or default_dev_speakers(train_spk)
    unknown = sorted(set(dev_spk) - set(train_spk))
    if unknown:
        raise AsrError(f"data.dev_speakers {unknown} are not AN4 training speakers ({' '.join(train_spk)})")
    split = hold_out_speakers(parts["train"], parts["test"], dev_spk, max_speakers, lambda v: v[0])
    manifests: Dict[str, Dict[str, object]] = {}
    for s in sets:
        entries = [
            (f"{spk}-{utt}", flac, {"text": words, "speaker": spk, "language": "English", "gender": _gender(spk)})
            for utt, (spk, words, flac) in sorted(split[s].items())
        ]
        m = whole_file_manifests(entries, sample_rate, bad)
        if m is None:
            raise AsrError(f"AN4 {s} set is empty (excluded items in {out_dir / 'excluded.txt'})")
        manifests[s] = m
    out_dir.mkdir(parents=True, exist_ok=True)
    write_sets(out_dir, "an4", manifests, perturb)
    if perturb:
        from asrlib.data.speed_perturb import speed_perturb_data_dir

        speed_perturb_data_dir(out_dir / "train_nosp", out_dir / "train", factors, out_dir / "wav_sp", nj)
    lexicon = read_dictionary(corpus_dir / "etc" / "an4.dic")
    with atomic_open(out_dir / "local" / "dict" / "lexicon.txt") as f:
        for w in sorted(lexicon):
            for p in lexicon[w]:
                f.write(f"{w} {' '.join(p)}\n")
    with atomic_open(out_dir / "local" / "lm" / "train_text.txt") as f:  # the LM's text: unperturbed, no ids
        f.writelines(s.text + "\n" for s in manifests["train"]["supervisions"])
    write_excluded(out_dir, bad)
    counts = {s: len(m["supervisions"]) for s, m in manifests.items()}
    speakers = {s: sorted({v[0] for v in split[s].values()}) for s in sets}
    mark_done(
        marker,
        {"utterances": counts, "speakers": speakers, "excluded": len(bad), "lexicon_words": len(lexicon)},
        fingerprint=fp,
    )
    log.info(
        "AN4: %s utterances (dev speakers %s); %d item(s) excluded (%s)",
        counts,
        " ".join(speakers["dev"]),
        len(bad),
        out_dir / "excluded.txt",
    )
    return manifests


# ------------------------------------------------------------------------------------------------ report
DIGITS = {"ZERO", "OH", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE"}


def word_class(word: str) -> str:
    """AN4's word classes for error analysis: ``letter`` (A..Z), ``digit`` (ZERO..NINE, OH), ``word`` (the rest:
    numbers such as TWENTY, months, names, commands)."""
    return "letter" if len(word) == 1 and word.isalpha() else "digit" if word in DIGITS else "word"


def chars(text: str) -> str:
    """A transcript as characters for CER, the blank between words as its own token (ESPnet's ``<space>``)."""
    return " ".join("<space>" if c == " " else c for c in " ".join(text.split()))


def score_set(ref_text: Path, hyp_text: Path) -> Dict[str, object]:
    """WER, CER and per-class word errors of one decoding (``hyp.txt``) against a set's ``text``."""
    from asrlib.io.tables import read_table_dict
    from asrlib.score import EPS, score

    ref, hyp = read_table_dict(ref_text), read_table_dict(hyp_text)
    w = score(ref, hyp)
    c = score({u: chars(t) for u, t in ref.items()}, {u: chars(t) for u, t in hyp.items()})
    classes: Dict[str, List[int]] = {k: [0, 0] for k in ("letter", "digit", "word")}  # [words, sub + del]
    for a in w.per_utt:
        for r, h in a.pairs:
            if r != EPS:
                classes[word_class(r)][0] += 1
                classes[word_class(r)][1] += int(h != r)
    return {"wer": w.wer, "cer": c.wer, "ins": w.ins, "words": w.num_words, "classes": classes}


def training_seconds(exp: Path) -> Optional[float]:
    """Wall time of the training step: first to last line of ``log/train.log`` (same day)."""
    log_file = exp / "log" / "train.log"
    if not log_file.is_file():
        return None
    stamps = [ln[:8] for ln in log_file.read_text(errors="replace").splitlines() if re.match(r"\d\d:\d\d:\d\d ", ln)]
    if len(stamps) < 2:
        return None
    sec = [int(t[:2]) * 3600 + int(t[3:5]) * 60 + int(t[6:8]) for t in (stamps[0], stamps[-1])]
    return float((sec[1] - sec[0]) % 86400)


def _mean_spread(xs: Sequence[float]) -> str:
    if not xs:
        return "-"
    m = sum(xs) / len(xs)
    return f"{m:.2f}" if len(xs) == 1 else f"{m:.2f} ± {(max(xs) - min(xs)) / 2:.2f}"


def report(data: Path, exps: Sequence[Path], methods: Sequence[str] = ("tlg", "greedy")) -> Tuple[str, Dict]:
    """A markdown table (and the numbers) of the seeds ``exps`` of one configuration: per seed and as mean ±
    half-range, dev WER, test WER and CER per search, training minutes; then test word errors by word class."""
    rows, numbers = [], {}
    lines = [
        "| run | search | dev %WER | test %WER | test %CER | test ins | training min |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    per_method: Dict[str, Dict[str, List[float]]] = {}
    classes_all: Dict[str, List[int]] = {k: [0, 0] for k in ("letter", "digit", "word")}
    for exp in exps:
        t = training_seconds(exp)
        for m in methods:
            hyp = {s: exp / f"decode_{s}_{m}" / "hyp.txt" for s in ("dev", "test")}
            if not all(h.is_file() for h in hyp.values()):
                continue
            d, te = score_set(data / "dev" / "text", hyp["dev"]), score_set(data / "test" / "text", hyp["test"])
            acc = per_method.setdefault(m, {"dev": [], "test": [], "cer": [], "min": []})
            acc["dev"].append(d["wer"])
            acc["test"].append(te["wer"])
            acc["cer"].append(te["cer"])
            if t is not None:
                acc["min"].append(t / 60)
            if m == methods[0]:
                for k, (n, e) in te["classes"].items():
                    classes_all[k][0] += n
                    classes_all[k][1] += e
            tm = f"{t / 60:.1f}" if t is not None else "-"
            rows.append(
                f"| {exp.name} | {m} | {d['wer']:.2f} | {te['wer']:.2f} | {te['cer']:.2f} | {te['ins']} | {tm} |"
            )
    lines += rows
    for m, acc in per_method.items():
        lines.append(
            f"| **mean ± half-range ({len(acc['test'])})** | {m} | {_mean_spread(acc['dev'])} | "
            f"**{_mean_spread(acc['test'])}** | {_mean_spread(acc['cer'])} | | {_mean_spread(acc['min'])} |"
        )
        numbers[m] = acc
    cls = ", ".join(f"{k} {100 * e / n:.1f} % of {n}" for k, (n, e) in classes_all.items() if n)
    lines += ["", f"Test words substituted or deleted, by class ({methods[0]}, all runs pooled): {cls}."]
    numbers["classes"] = classes_all
    return "\n".join(lines) + "\n", numbers


def report_main(argv: List[str]) -> int:
    import argparse

    from asrlib.cli import run_main

    p = argparse.ArgumentParser(
        prog="python -m local.an4 report",
        description="WER/CER table of one configuration's runs (seeds): per run, mean ± half-range, word classes",
    )
    p.add_argument("--data", type=Path, required=True, help="the data dir the runs were decoded with")
    p.add_argument("--exp", type=Path, nargs="+", required=True, help="the experiment dirs (one per seed)")
    p.add_argument("--methods", nargs="+", default=["tlg", "greedy"])

    def main(args_in):
        a = p.parse_args(args_in)
        text, _ = report(a.data, a.exp, a.methods)
        print(text)
        return 0

    run_main(main, argv)
    return 0


def _prepare(corpus_dir: Path, out_dir: Path, data: DataConfig, nj: int) -> None:
    prepare_an4(corpus_dir, out_dir, data.speed_perturb, nj, data.sample_rate, data.dev_speakers, data.max_speakers)


def main(argv: Optional[List[str]] = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        report_main(argv[1:])
        return
    corpus_main(_prepare, __doc__, is_an4_dir, "AN4 corpus (folder with etc/ and wav/)", argv)


if __name__ == "__main__":
    main()
