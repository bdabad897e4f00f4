"""Lexicons of other units (sentencepiece pieces, letters), the G2P for words without a pronunciation, and
steps.prepare_lang with lang.units / lang.lexicon / lang.g2p."""

import json
import random

import pytest

from asrlib.errors import AsrError
from asrlib.lang.g2p import G2PModel, cmudict_lexicon, load_g2p, train_g2p
from asrlib.lang.units import WORD_START, bpe_lexicon, char_lexicon, load_sentencepiece, train_sentencepiece

TEXT = ["RUBOUT G M E F THREE NINE", "ERASE C Q Q F SEVEN", "GO", "ENTER SIX TWO FOUR", "YES", "NO", "STOP"] * 20


def test_sentencepiece_lexicon_spells_every_word(tmp_path):
    model = train_sentencepiece(TEXT, tmp_path / "bpe.model", vocab_size=30)
    assert model.is_file() and (tmp_path / "bpe.vocab").is_file()
    sp = load_sentencepiece(model)
    words = sorted({w for t in TEXT for w in t.split()})
    lex = bpe_lexicon(model, [w.lower() for w in words])
    assert sorted(lex) == words
    for w, [pieces] in lex.items():
        assert pieces[0].startswith(WORD_START)  # every word starts with the word-start mark
        assert "".join(pieces).lstrip(WORD_START) == w  # and the pieces spell it
        assert all(sp.piece_to_id(p) != sp.unk_id() for p in pieces)
    with pytest.raises(AsrError, match="letters the sentencepiece model has no piece for: JAZZ"):
        bpe_lexicon(sp, ["GO", "JAZZ"])  # J and Z are not in TEXT
    with pytest.raises(AsrError, match="too small"):
        train_sentencepiece(TEXT, tmp_path / "small.model", vocab_size=5)


def test_char_lexicon_keeps_letter_sequences_apart_from_words():
    lex = char_lexicon(["go", "G", "O"])
    assert lex == {"GO": [[WORD_START, "G", "O"]], "G": [[WORD_START, "G"]], "O": [[WORD_START, "O"]]}
    # "G O" (two words) and "GO" spell different unit strings
    assert lex["G"][0] + lex["O"][0] != lex["GO"][0]
    assert char_lexicon(["GO"], word_start=None) == {"GO": [["G", "O"]]}


@pytest.fixture(scope="module")
def small_g2p(tmp_path_factory):
    """A G2P trained on 3000 random CMUdict words (a few seconds); 300 other words held out."""
    lex = cmudict_lexicon()
    words = sorted(w for w in lex if w.isalpha())
    random.Random(0).shuffle(words)
    train = {w: lex[w] for w in words[:3000]}
    held = {w: lex[w] for w in words[3000:3300]}
    return train_g2p(train, tmp_path_factory.mktemp("g2p") / "model", order=6), held


def test_g2p_predicts_held_out_words(small_g2p):
    import kaldialign

    model, held = small_g2p
    res = model.predict(held, nbest=1)
    assert set(res.prons) | set(res.skipped) == set(held)
    assert len(res.prons) >= 0.95 * len(held)
    errs = total = 0
    for w, [hyp] in ((w, p[:1]) for w, p in res.prons.items()):
        ref = min(held[w], key=lambda r: kaldialign.edit_distance(r, hyp)["total"])
        errs += kaldialign.edit_distance(ref, hyp)["total"]
        total += len(ref)
    # a 3000-word model is far weaker than the CMUdict one (5.9 % phone errors), but it must have learnt spelling
    assert errs / total < 0.35, errs / total


def test_g2p_nbest_and_words_it_cannot_take(small_g2p):
    model, _ = small_g2p
    long_word = "A" * (model.max_len + 1)
    res = model.predict(["cat", "CAT", "X-RAY", long_word, " "], nbest=3)
    assert list(res.prons) == ["CAT"] and 1 <= len(res.prons["CAT"]) <= 3
    assert len({tuple(p) for p in res.prons["CAT"]}) == len(res.prons["CAT"])  # distinct variants
    assert "letters not in the training lexicon: -" in res.skipped["X-RAY"]
    assert "longer than" in res.skipped[long_word]
    assert len(res.skipped) == 3


def test_g2p_model_folder_round_trip_and_tampering(small_g2p, tmp_path):
    model, held = small_g2p
    again = load_g2p(model.model_dir)
    assert isinstance(again, G2PModel) and again.phones == model.phones and again.letters == model.letters
    words = sorted(held)[:20]
    assert again.predict(words).prons == model.predict(words).prons
    meta = json.loads((model.model_dir / "g2p.json").read_text())
    assert meta["tool"] == "phonetisaurus" and "fst_sha256" in meta  # JSON + an OpenFst file: no pickle
    # a copy whose FST was replaced is refused
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(model.model_dir, copy)
    (copy / "g2p.fst").write_bytes(b"not an fst")
    with pytest.raises(AsrError, match="does not match the checksum"):
        load_g2p(copy)
    with pytest.raises(AsrError, match="missing"):
        load_g2p(tmp_path / "nothing")


def test_g2p_training_lexicon_is_checked(tmp_path):
    with pytest.raises(AsrError, match="empty or malformed"):
        train_g2p({"CAT": [[]]}, tmp_path / "m")
    with pytest.raises(AsrError, match="white space"):
        train_g2p({"TWO WORDS": [["T"]]}, tmp_path / "m")


def _prepare_lang(tmp_path, name, *sets, extra=""):
    from pathlib import Path

    from steps.prepare_lang import main as prepare_lang_main

    root = Path(__file__).resolve().parents[1]
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True, exist_ok=True)
    text = data / "train" / "text"
    text.write_text("".join(f"u{i} {t}\n" for i, t in enumerate(TEXT)) + extra)
    args = ["--text", str(text), "--lang-dir", str(data / name), "--config", str(root / "recipes/digits/config.yaml")]
    for s in sets:
        args += ["--set", s]
    assert prepare_lang_main(args) == 0
    return data / name


def test_prepare_lang_bpe_and_char_units(tmp_path):
    from asrlib.lang.lexicon import read_lexicon, read_tokens

    for units in ("bpe", "char"):
        lang = _prepare_lang(tmp_path, f"lang_{units}", f"lang.units={units}", "lang.bpe_vocab_size=28")
        lex, tokens = read_lexicon(lang / "lexicon.txt"), read_tokens(lang / "tokens.txt")
        assert (lang / "TLG.fst").is_file() and "RUBOUT" in lex
        assert set(tokens) == {"<blk>"} | {u for ps in lex.values() for p in ps for u in p}
        assert "".join(lex["RUBOUT"][0]).lstrip(WORD_START) == "RUBOUT"
        assert (lang / "bpe.model").is_file() == (units == "bpe")
        assert json.loads((lang / ".done").read_text())["units"] == units


def test_prepare_lang_lexicon_then_cmudict_then_g2p(tmp_path, small_g2p):
    model, _ = small_g2p
    data = tmp_path / "data"
    (data / "local").mkdir(parents=True)
    # the given lexicon wins over CMUdict (GO), adds a word the text lacks (ZORBLAX); BLIMFOG is in neither source
    (data / "local" / "lex.txt").write_text("GO G OW1\nGO(2) G AH\nZORBLAX Z AO R B L AE K S\n")
    lang = _prepare_lang(tmp_path, "lang", "lang.lexicon=local/lex.txt", f"lang.g2p={model.model_dir}")
    lex = (lang / "lexicon.txt").read_text().splitlines()
    assert "GO G OW1" in lex and "GO G AH" in lex and "ZORBLAX Z AO R B L AE K S" in lex
    assert "YES Y EH S" in lex  # from CMUdict
    text_words = {w for t in TEXT for w in t.split()}
    assert json.loads((lang / ".done").read_text())["sources"] == {"cmudict": len(text_words - {"GO"}), "lexicon": 2}
    assert not (lang / "g2p_words.txt").exists()  # every word had a pronunciation: the G2P was not asked
    # a word no source has: the G2P pronounces it, and says so
    extra = "u99 BLIMFOG GO\n"
    lang = _prepare_lang(tmp_path, "lang2", "lang.lexicon=local/lex.txt", f"lang.g2p={model.model_dir}", extra=extra)
    g2p_words = (lang / "g2p_words.txt").read_text().split()
    assert g2p_words[0] == "BLIMFOG" and len(g2p_words) > 3 and set(g2p_words[1:]) <= set(model.phones)
    # without a G2P the same text is an error naming the word
    with pytest.raises(AsrError, match="no pronunciation: BLIMFOG"):
        _prepare_lang(tmp_path, "lang3", "lang.lexicon=local/lex.txt", extra=extra)
