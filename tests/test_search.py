"""Greedy CTC and TLG search on synthetic, peaky log-probabilities over the digits lang."""

from typing import List, Sequence

import numpy as np
import pytest

from asrlib.decode.search import GreedyWordDecoder, TlgDecoder, greedy_ctc
from asrlib.errors import AsrError
from asrlib.lang.graphs import build_tlg
from asrlib.lang.lexicon import build_lexicon, read_lexicon, read_tokens, write_lang_files

DIGITS = "ZERO ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE OH".split()
ON, OFF = -0.01, -8.0


@pytest.fixture(scope="module")
def lang(tmp_path_factory):
    d = tmp_path_factory.mktemp("lang")
    write_lang_files(d, build_lexicon(DIGITS))
    build_tlg(d)
    return d


def peaky(frames: Sequence[int], num_tokens: int) -> np.ndarray:
    lp = np.full((len(frames), num_tokens), OFF, dtype=np.float32)
    lp[np.arange(len(frames)), frames] = ON
    return lp


def word_frames(lang, words: List[str], repeat: int = 2, blanks: int = 1) -> List[int]:
    """Frame labels for ``words``: each phone held ``repeat`` frames, ``blanks`` blank frames around each."""
    tokens, lex = read_tokens(lang / "tokens.txt"), read_lexicon(lang / "lexicon.txt")
    frames = [0] * blanks
    for w in words:
        for ph in lex[w][-1]:
            frames += [tokens[ph]] * repeat + [0] * blanks
    return frames


def test_greedy_ctc_collapses_and_drops_blank():
    lp = peaky([0, 3, 3, 0, 3, 5, 5, 0, 0], 6)
    assert greedy_ctc(lp) == [3, 3, 5]
    assert greedy_ctc(np.zeros((0, 6), np.float32)) == []


@pytest.mark.parametrize(
    "words",
    [
        ["ONE", "TWO", "OH"],
        ["TWO", "TWO"],
        ["OH", "OH"],
        ["EIGHT", "TWO"],
        ["ZERO", "SEVEN", "NINE", "THREE", "FOUR", "FIVE", "SIX"],
    ],
)
def test_tlg_and_greedy_decode_peaky_input(lang, words):
    lp = peaky(word_frames(lang, words), len(read_tokens(lang / "tokens.txt")))
    assert TlgDecoder(lang).decode(lp) == words
    assert GreedyWordDecoder(lang).decode(lp) == words


def test_identical_phones_need_a_blank(lang):
    n = len(read_tokens(lang / "tokens.txt"))
    # OW OW without a blank between is one OW: one OH, as CTC defines it.
    assert TlgDecoder(lang).decode(peaky(word_frames(lang, ["OH", "OH"], blanks=0), n)) == ["OH"]


def test_all_blank_and_empty_give_nothing(lang):
    n = len(read_tokens(lang / "tokens.txt"))
    dec, greedy = TlgDecoder(lang), GreedyWordDecoder(lang)
    assert dec.decode(peaky([0] * 30, n)) == [] and greedy.decode(peaky([0] * 30, n)) == []
    assert dec.decode(np.zeros((0, n), np.float32)) == []


def test_wrong_dimension_is_a_clear_error(lang):
    with pytest.raises(AsrError, match="tokens"):
        TlgDecoder(lang).decode(np.zeros((5, 7), np.float32))


def test_greedy_maps_misrecognised_phones_to_nearest_words(lang):
    tokens = read_tokens(lang / "tokens.txt")
    g = GreedyWordDecoder(lang)
    # W AO N T UW: AO is not in ONE (W AH N); one substitution away from ONE TWO.
    assert g.phones_to_words([tokens[p] for p in "W AO N T UW".split()]) == ["ONE", "TWO"]


def test_noise_does_not_change_the_tlg_result(lang):
    rng = np.random.default_rng(0)
    words = ["NINE", "OH", "FIVE", "ONE"]
    lp = peaky(word_frames(lang, words, repeat=3, blanks=2), len(read_tokens(lang / "tokens.txt")))
    lp = lp + rng.normal(0, 1.0, lp.shape).astype(np.float32)
    assert TlgDecoder(lang, beam=8.0).decode(lp) == words


def _ambiguous_eight_or_two(lang) -> np.ndarray:
    """ONE then two frames that say EY|T and T|UW with equal scores: EIGHT (EY T) or TWO (T UW)."""
    tokens = read_tokens(lang / "tokens.txt")
    frames = word_frames(lang, ["ONE"])
    lp = peaky(frames + [0, 0, 0], len(tokens))
    amb = np.full((2, len(tokens)), OFF, np.float32)
    amb[0, [tokens["EY"], tokens["T"]]] = np.log(0.5)
    amb[1, [tokens["T"], tokens["UW"]]] = np.log(0.5)
    return np.concatenate([lp[: len(frames)], amb, lp[len(frames) :]])


@pytest.mark.parametrize("favoured", ["TWO", "EIGHT"])
def test_arpa_bigram_resolves_acoustic_ties(tmp_path, favoured):
    other = "EIGHT" if favoured == "TWO" else "TWO"
    write_lang_files(tmp_path, build_lexicon(DIGITS))
    arpa = tmp_path / "lm.arpa"
    unigrams = "".join(f"-1.5 {w} -0.3\n" for w in DIGITS)
    arpa.write_text(
        f"\\data\\\nngram 1={len(DIGITS) + 2}\nngram 2=4\n\n\\1-grams:\n-1.0 </s>\n-99 <s> -0.3\n"
        f"{unigrams}\n\\2-grams:\n-0.1 <s> ONE\n-0.05 ONE {favoured}\n-0.1 {favoured} </s>\n"
        f"-0.1 {other} </s>\n\n\\end\\\n"
    )
    build_tlg(tmp_path, grammar="arpa", arpa=arpa, ngram_order=2)
    assert TlgDecoder(tmp_path).decode(_ambiguous_eight_or_two(tmp_path)) == ["ONE", favoured]
    lp = peaky(word_frames(tmp_path, ["ONE", "TWO", "OH"]), len(read_tokens(tmp_path / "tokens.txt")))
    assert TlgDecoder(tmp_path).decode(lp) == ["ONE", "TWO", "OH"]  # unseen bigrams still reachable via back-off


def test_acoustic_scale_and_counters(lang):
    lp = peaky(word_frames(lang, ["SIX"]), len(read_tokens(lang / "tokens.txt")))
    dec = TlgDecoder(lang, acoustic_scale=0.5)
    before = lp.copy()
    assert dec.decode_batch([lp, lp]) == [["SIX"], ["SIX"]]
    assert np.array_equal(lp, before)  # the caller's array is untouched
    assert dec.frames_searched == 2 * len(lp) and dec.search_seconds > 0


def test_one_word_grammar_gives_exactly_one_word(tmp_path, lang):
    """lang.grammar one_word (isolated words): a clear word is found, two spoken words still give one, and an
    all-blank input gives the best single word rather than nothing (no deletions, no insertions)."""
    write_lang_files(tmp_path, build_lexicon(DIGITS))
    build_tlg(tmp_path, grammar="one_word")
    n = len(read_tokens(tmp_path / "tokens.txt"))
    dec = TlgDecoder(tmp_path)
    assert dec.decode(peaky(word_frames(tmp_path, ["SEVEN"]), n)) == ["SEVEN"]
    assert len(dec.decode(peaky(word_frames(tmp_path, ["FOUR", "NINE"]), n))) == 1
    blank = peaky([0] * 12, n)
    blank[:, 1:] = -3.0  # the words are possible, only less likely
    assert len(dec.decode(blank)) == 1
    assert TlgDecoder(lang).decode(peaky(word_frames(lang, ["FOUR", "NINE"]), n)) == ["FOUR", "NINE"]  # the loop
    assert TlgDecoder(lang).decode(blank) == []


def test_known_length_grammar_gives_exactly_n_words(tmp_path, lang):
    """lang.grammar words_N (known length): three clear words give those three; two spoken words still give
    three (the extra one where it costs least), four give three; the word loop gives what was spoken."""
    write_lang_files(tmp_path, build_lexicon(DIGITS))
    build_tlg(tmp_path, grammar="words_3")
    n = len(read_tokens(tmp_path / "tokens.txt"))
    dec = TlgDecoder(tmp_path)
    assert dec.decode(peaky(word_frames(tmp_path, ["SEVEN", "OH", "TWO"]), n)) == ["SEVEN", "OH", "TWO"]
    two = peaky(word_frames(tmp_path, ["FOUR", "NINE"]), n)
    assert len(dec.decode(two)) == 3 and TlgDecoder(lang).decode(two) == ["FOUR", "NINE"]
    assert len(dec.decode(peaky(word_frames(tmp_path, ["ONE", "SIX", "TWO", "EIGHT"]), n))) == 3
    assert dec.reached_final and dec.retries == 0
    with pytest.raises(AsrError, match="words_N"):
        build_tlg(tmp_path, grammar="words_0")


TEN = ["ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE"]  # DIGITS less OH


@pytest.mark.parametrize("grammar", ["one_word", "digit_loop"])
def test_grammar_words_keep_g_inside_a_closed_vocabulary(tmp_path, lang, grammar):
    """lang.grammar_words (decode.set_words): G emits only those words while L keeps the whole lexicon: a clear OH
    comes out as one of the ten digits (one_word) or as none or some of them (the loop); the ten are recognised as
    before; a word the lexicon lacks is named."""
    write_lang_files(tmp_path, build_lexicon(DIGITS))
    build_tlg(tmp_path, grammar=grammar, grammar_words=TEN)
    n = len(read_tokens(tmp_path / "tokens.txt"))
    dec = TlgDecoder(tmp_path)
    oh = dec.decode(peaky(word_frames(tmp_path, ["OH"]), n))
    assert set(oh) <= set(TEN) and (grammar != "one_word" or len(oh) == 1)  # the loop may emit none
    assert TlgDecoder(lang).decode(peaky(word_frames(lang, ["OH"]), n)) == ["OH"]
    for w in TEN:
        assert dec.decode(peaky(word_frames(tmp_path, [w]), n)) == [w]
    with pytest.raises(AsrError, match=r"ELEVEN not in .*words\.txt"):
        build_tlg(tmp_path, grammar=grammar, grammar_words=TEN + ["ELEVEN"])
    with pytest.raises(AsrError, match="not an n-gram"):
        build_tlg(tmp_path, grammar="arpa", arpa=tmp_path / "x.arpa", grammar_words=TEN)


def test_retry_beam_reaches_the_final_state_a_narrow_beam_misses(tmp_path):
    """Two clear words under words_4: within beam 12 every path with four words is pruned, so the search ends in
    a non-final state (the partial path, flagged); the retry beam finds four words; a path beyond even the retry
    beam stays partial and flagged."""
    write_lang_files(tmp_path, build_lexicon(DIGITS))
    build_tlg(tmp_path, grammar="words_4")
    n = len(read_tokens(tmp_path / "tokens.txt"))
    two = peaky(word_frames(tmp_path, ["FOUR", "NINE"], blanks=2), n)
    narrow = TlgDecoder(tmp_path)
    assert narrow.decode(two) == ["FOUR", "NINE"] and not narrow.reached_final and narrow.retries == 0
    retry = TlgDecoder(tmp_path, retry_beam=40.0)
    words = retry.decode(two)
    assert len(words) == 4 and retry.reached_final and retry.retries == 1
    assert retry.decode(peaky(word_frames(tmp_path, ["FOUR", "NINE", "OH", "TWO"]), n)) == ["FOUR", "NINE", "OH", "TWO"]
    assert retry.retries == 1  # a search that reaches a final state is not retried
    build_tlg(tmp_path, grammar="words_5")
    far = two.copy()
    far[far == OFF] = -15.0
    assert TlgDecoder(tmp_path, retry_beam=40.0).decode(far) == ["FOUR", "NINE"]
