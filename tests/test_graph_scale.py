"""A big decoding graph (many more words, an entropy-pruned n-gram) decodes the words of a small one as the small
one does: the digits recipe's model on its test audio through a TLG whose lexicon adds thousands of synthetic words
(pronounced with the same phones) to the digits and whose G is a 3-gram of digit strings plus Zipf text of the
synthetic words, entropy-pruned, and through a small TLG: the digits lexicon and the same LM restricted to the
digits (every digit string scores the same in both). The words must be identical. The big (100 k words,
1 M n-grams) version is in the slow tier; it builds in minutes."""

import random
from pathlib import Path
from typing import Dict, List

import pytest
import soundfile as sf

from asrlib.decode.search import TlgDecoder
from asrlib.lang.graphs import build_tlg
from asrlib.lang.lexicon import read_lexicon, write_lang_files
from asrlib.lang.ngram import build_arpa
from asrlib.lang.synthetic import spell_vocabulary, write_zipf_text

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "recipes" / "digits"
EXP = DIGITS / "exp" / "lstm_ctc"
SMALL = DIGITS / "data" / "lang"
DIGIT_SENTENCES = 2000


def _segmentable(pron: List[str], prons: set, max_len: int) -> bool:
    """Whether ``pron`` is a concatenation of pronunciations of ``prons`` (then it would be a digit string)."""
    ok = [True] + [False] * len(pron)
    for i in range(1, len(pron) + 1):
        ok[i] = any(ok[j] and tuple(pron[j:i]) in prons for j in range(max(0, i - max_len), i))
    return ok[-1]


def digit_strings(path: Path, lex: Dict[str, List[List[str]]], n: int) -> Path:
    rng = random.Random(1)
    digits = sorted(lex)
    with open(path, "w") as f:
        for _ in range(n):
            f.write(" ".join(rng.choice(digits) for _ in range(rng.randint(1, 7))) + "\n")
    return path


def restrict_arpa(src: Path, dst: Path, vocab: set) -> Path:
    """``src``'s n-grams whose words are all in ``vocab`` (plus <s>, </s>), probabilities and back-off weights as
    they are: every digit string scores the same in both LMs, the other words are gone."""
    keep = vocab | {"<s>", "</s>"}
    sections: Dict[int, List[str]] = {}
    order = 0
    for line in src.read_text(encoding="utf-8").splitlines():
        if line.startswith("\\") and line.endswith("-grams:"):
            order = int(line[1:].split("-")[0])
            sections[order] = []
        elif order and line.strip() and not line.startswith("\\"):
            fields = line.split()
            if set(fields[1 : 1 + order]) <= keep:
                sections[order].append(line)
    out = ["\\data\\"] + [f"ngram {n}={len(v)}" for n, v in sections.items()]
    for n, v in sections.items():
        out += ["", f"\\{n}-grams:", *v]
    dst.write_text("\n".join(out + ["", "\\end\\", ""]), encoding="utf-8")
    return dst


def small_lang_of(d: Path, big: Path) -> Path:
    """The digits lexicon and the big lang's LM restricted to the digits: the same scores for every digit string
    as the big graph, none of its other words."""
    lex = read_lexicon(SMALL / "lexicon.txt")
    write_lang_files(d, lex)
    restrict_arpa(big / "lm.arpa", d / "lm.arpa", set(lex))
    build_tlg(d, grammar="arpa", arpa=d / "lm.arpa", ngram_order=3)
    return d


def big_lang(d: Path, num_words: int, ngrams: int) -> Path:
    """``d``: the digits lexicon plus ``num_words`` synthetic words with random pronunciations (4-8 phones of the
    digits' phone set, none a digit string), a 3-gram of the small lang's digit strings and Zipf text of the
    synthetic words entropy-pruned to ``ngrams`` n-grams, and its TLG."""
    lex = read_lexicon(SMALL / "lexicon.txt")
    phones = sorted({ph for prons in lex.values() for p in prons for ph in p})
    digit_prons = {tuple(p) for prons in lex.values() for p in prons}
    longest = max(map(len, digit_prons))
    rng = random.Random(0)
    big: Dict[str, List[List[str]]] = {w: [list(p) for p in prons] for w, prons in lex.items()}
    seen = set(digit_prons)
    for w in spell_vocabulary(num_words, seed=5):
        while True:
            pron = [rng.choice(phones) for _ in range(rng.randint(4, 8))]
            if tuple(pron) not in seen and not _segmentable(pron, digit_prons, longest):
                break
        seen.add(tuple(pron))
        big["X" + w] = [pron]  # X: never a digit word
    write_lang_files(d, big)
    assert (d / "tokens.txt").read_text() == (SMALL / "tokens.txt").read_text()  # the model's output units
    synth = d / "synth.txt"
    write_zipf_text(synth, ["X" + w for w in spell_vocabulary(num_words, seed=5)], max(3 * ngrams, 20000), seed=1)
    digits = digit_strings(d / "digits.txt", lex, DIGIT_SENTENCES)
    build_arpa([synth, digits], d / "lm.arpa", 3, words=d / "words.txt", prune_target=ngrams)
    build_tlg(d, grammar="arpa", arpa=d / "lm.arpa", ngram_order=3)
    return d


@pytest.fixture(scope="module")
def test_logprobs():
    if not (EXP / "final.pt").is_file() or not (SMALL / "TLG.fst").is_file():
        pytest.skip("needs the digits recipe's trained model (make run): recipes/digits/exp/lstm_ctc/final.pt")
    import torch

    from asrlib.app.recognizer import Recognizer

    torch.set_num_threads(1)  # as tests/test_recognizer.py: on a shared 2-core machine more threads only wait
    rec = Recognizer.from_dir(EXP)
    out = []
    for line in (DIGITS / "data" / "test" / "wav.scp").read_text().splitlines()[:20]:
        utt, path = line.split(maxsplit=1)
        x, sr = sf.read(path, dtype="float32")
        out.append((utt, rec.log_probs(x, sr)))
    return out


def _same_words(small: Path, big: Path, logprobs) -> None:
    small_dec, big_dec = TlgDecoder(small), TlgDecoder(big)
    refs = dict(line.split(maxsplit=1) for line in (DIGITS / "data" / "test" / "text").read_text().splitlines())
    small_hyps = {u: small_dec.decode(lp) for u, lp in logprobs}
    big_hyps = {u: big_dec.decode(lp) for u, lp in logprobs}
    assert sum(small_hyps[u] == refs[u].split() for u, _ in logprobs) >= len(logprobs) // 2  # a working model
    # every digit string scores the same in both graphs: the big one only adds competing words
    differ = [u for u, _ in logprobs if big_hyps[u] != small_hyps[u]]
    assert not differ, {u: (small_hyps[u], big_hyps[u]) for u in differ}
    assert all(not w.startswith("X") for h in big_hyps.values() for w in h)


def test_bigger_graph_same_digits(tmp_path, test_logprobs):
    big = big_lang(tmp_path / "big", 3000, 30_000)
    _same_words(small_lang_of(tmp_path / "small", big), big, test_logprobs)


@pytest.mark.slow
def test_100k_words_1m_ngrams_same_digits(tmp_path, test_logprobs):
    big = big_lang(tmp_path / "big", 100_000, 1_000_000)
    assert (big / "TLG.fst").stat().st_size > 100 * 2**20
    _same_words(small_lang_of(tmp_path / "small", big), big, test_logprobs)


def test_segmentable():
    prons = {("W", "AH", "N"), ("T", "UW")}
    assert _segmentable(["W", "AH", "N", "T", "UW"], prons, 3)
    assert not _segmentable(["W", "AH", "T", "UW"], prons, 3)
