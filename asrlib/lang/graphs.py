"""Decoding graphs for CTC: T (CTC topology), L (lexicon), G (grammar) and TLG = T ∘ min(det(L ∘ G)).

Label conventions (the kaldi-decoder / sherpa-onnx / icefall convention):

- ``tokens.txt`` ids: ``<blk>`` = 0, phones 1..P. ``N = P + 1`` tokens = the acoustic model's output dimension.
- L's input side uses the phone ids of ``tokens.txt``; its disambiguation symbols ``#k`` (k = 0..K) get ids
  ``N + k`` (listed in ``disambig.txt``). ``#0`` passes G's back-off symbol through L; ``#1..#K`` end
  pronunciations that are homophones or prefixes of other pronunciations (Kaldi's ``add_lex_disambig.pl`` rule).
- T's input labels are token id + 1 (so 0 stays epsilon and blank is 1: ``DecodableCtc`` scores input label ``i``
  with column ``i - 1``); its disambiguation self-loops have input ``N + k + 1`` and output ``N + k``.
- Output labels of L, G and TLG are the word ids of ``words.txt``.

After T ∘ LG is determinized and minimized the disambiguation input labels are mapped to epsilon, so TLG's input
labels are 0 (epsilon) or 1..N (tokens).
"""

from __future__ import annotations

import logging
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from asrlib.config import GRAMMARS, is_grammar, known_length
from asrlib.errors import AsrError, PathLike
from asrlib.io.atomic import atomic_open, atomic_path
from asrlib.kaldi_imports import kaldifst  # kaldi_hmm_gmm first (import order)
from asrlib.lang.lexicon import SPECIAL_WORDS, read_lexicon, read_tokens, read_words
from asrlib.lang.ngram import build_arpa

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- helpers
@contextmanager
def timed(what: str, record: Optional[Dict[str, Dict[str, float]]] = None) -> Iterator[None]:
    """Log (and add to ``record[what]``) the wall and CPU seconds of the block and the process's peak RSS after it:
    the graph build's cost per step (read, L, G, LG = min(det(L ∘ G)), TLG = min(det(T ∘ LG)) without #k, write)."""
    w0, c0 = time.perf_counter(), time.process_time()
    yield
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    log.info("%s done: %.1f s (CPU %.1f s), peak RSS %.0f MiB", what, wall, cpu, peak)
    if record is not None:
        record[what] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_mib": round(peak, 1)}


def write_fst(fst: kaldifst.StdVectorFst, path: PathLike) -> None:
    """Write ``fst`` in OpenFst binary format, atomically."""
    with atomic_path(path) as tmp:
        if not fst.write(str(tmp)):
            raise AsrError(f"could not write FST to {path}")


def read_fst(path: PathLike) -> kaldifst.StdVectorFst:
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"{path} does not exist; run steps.prepare_lang first")
    return kaldifst.StdVectorFst.read(str(path))


def compose_det_min(
    a: kaldifst.StdVectorFst, b: kaldifst.StdVectorFst, what: str, empty_hint: str = ""
) -> kaldifst.StdVectorFst:
    """``a ∘ b`` (``a`` olabel-sorted, ``b`` ilabel-sorted), determinized (star) and minimized (encoded); an
    AsrError naming ``what`` when the composition is empty or determinization stops early."""
    c = kaldifst.compose(a, b)
    if c.num_states == 0:
        raise AsrError(f"{what} is empty" + (f": {empty_hint}" if empty_hint else ""))
    if kaldifst.determinize_star(c):
        raise AsrError(f"determinizing {what} stopped early (state limit)")
    kaldifst.minimize_encoded(c)
    return c


def relabel_input(
    fst: kaldifst.StdVectorFst, mapping: Dict[int, int], max_label: Optional[int] = None
) -> kaldifst.StdVectorFst:
    """Copy of ``fst`` with input labels replaced through ``mapping`` (labels not in it are kept).

    With ``max_label`` (every input label of ``fst`` is at most this) and a mapping to epsilon only (the
    disambiguation symbols of a TLG/HCLG), the copy is made in C++ by composing with a one-state mapper
    (``l:l`` for kept labels, ``0:d`` for mapped ones): 0.36 s of CPU for 1.2 M arcs where the loop below took 3.0 s."""
    if max_label is not None and mapping and not any(mapping.values()):
        mapper = kaldifst.StdVectorFst()
        mapper.add_state()
        mapper.start = 0
        mapper.set_final(0, 0.0)
        for lab in range(1, max_label + 1):
            mapper.add_arc(0, kaldifst.StdArc(0 if lab in mapping else lab, lab, 0.0, 0))
        kaldifst.arcsort(fst, sort_type="ilabel")
        return kaldifst.compose(mapper, fst)
    out = kaldifst.StdVectorFst()
    n = fst.num_states
    for _ in range(n):
        out.add_state()
    if n == 0:
        return out
    out.start = fst.start
    for s in kaldifst.StateIterator(fst):
        out.set_final(s, fst.final(s))
        for arc in kaldifst.ArcIterator(fst, s):
            out.add_arc(s, kaldifst.StdArc(mapping.get(arc.ilabel, arc.ilabel), arc.olabel, arc.weight, arc.nextstate))
    return out


# ---------------------------------------------------------------- lexicon disambiguation
def add_disambig(lexicon: Dict[str, List[List[str]]]) -> Tuple[List[Tuple[str, List[str], int]], int]:
    """Kaldi's ``add_lex_disambig.pl`` rule: a pronunciation that is a homophone of another, or a proper prefix
    of another, ends with its own ``#k`` (k >= 1, counted per phone sequence).

    Returns ``([(word, pron, k or 0), ...], max_k)``; ``#0`` is always reserved for the grammar's back-off.
    """
    entries = [(w, p) for w in sorted(lexicon) for p in lexicon[w]]
    count: Dict[Tuple[str, ...], int] = {}
    prefixes = set()
    for _, p in entries:
        count[tuple(p)] = count.get(tuple(p), 0) + 1
        for i in range(1, len(p)):
            prefixes.add(tuple(p[:i]))
    last: Dict[Tuple[str, ...], int] = {}
    out, max_k = [], 0
    for w, p in entries:
        key = tuple(p)
        k = 0
        if key in prefixes or count[key] > 1:
            k = last.get(key, 0) + 1
            last[key] = k
            max_k = max(max_k, k)
        out.append((w, p, k))
    return out, max_k


# ---------------------------------------------------------------- T, L, G
def make_ctc_topo(
    num_tokens: int, disambig_in: Sequence[int] = (), disambig_out: Sequence[int] = ()
) -> kaldifst.StdVectorFst:
    """The standard (fully connected) CTC topology, icefall's "H".

    State ``t`` means "the last frame was token ``t``" (state 0 = blank, the start). Every state is final. An arc
    to state ``t`` reads input ``t + 1``; it outputs token ``t`` unless ``t`` is blank or the arc is the
    self-loop (a repeated frame). Each state also gets self-loops ``disambig_in[i] : disambig_out[i]``.
    """
    fst = kaldifst.StdVectorFst()
    for _ in range(num_tokens):
        fst.add_state()
    fst.start = 0
    for s in range(num_tokens):
        fst.set_final(s, 0.0)
        for t in range(num_tokens):
            olabel = 0 if (t == 0 or t == s) else t
            fst.add_arc(s, kaldifst.StdArc(t + 1, olabel, 0.0, t))
        for i, o in zip(disambig_in, disambig_out):
            fst.add_arc(s, kaldifst.StdArc(i, o, 0.0, s))
    return fst


def make_lexicon_fst(
    entries: Sequence[Tuple[str, List[str], int]],
    tokens: Dict[str, int],
    words: Dict[str, int],
    disambig0: Optional[int],
) -> kaldifst.StdVectorFst:
    """L: phones (+ ``#k``) -> words, a loop through state 0 (start and final), no silence (CTC blank covers it).

    ``entries`` come from :func:`add_disambig`; the phone-level ``#k`` has id ``disambig0 + k``. When
    ``disambig0`` is None the ``#k`` are left out (a lexicon for matching phone strings, not for composing with
    G) and so is the ``#0`` self-loop.
    """
    fst = kaldifst.StdVectorFst()
    fst.add_state()
    fst.start = 0
    fst.set_final(0, 0.0)
    for word, pron, k in entries:
        labels = [tokens[ph] for ph in pron]
        if disambig0 is not None and k > 0:
            labels.append(disambig0 + k)
        src = 0
        for i, lab in enumerate(labels):
            dst = 0 if i == len(labels) - 1 else fst.add_state()
            fst.add_arc(src, kaldifst.StdArc(lab, words[word] if i == 0 else 0, 0.0, dst))
            src = dst
    if disambig0 is not None:
        fst.add_arc(0, kaldifst.StdArc(disambig0, words["#0"], 0.0, 0))
    return fst


def _word_grammar(words: Dict[str, int], count: Optional[int]) -> kaldifst.StdVectorFst:
    """An arc per real word, each with the uniform cost ``log(number of words)``. ``count`` None: one state, start
    and final, looping (any number of words); else a chain of ``count`` + 1 states, the last one final (exactly
    ``count`` words)."""
    import math

    real = sorted(i for w, i in words.items() if w not in SPECIAL_WORDS)
    cost = math.log(len(real))
    fst = kaldifst.StdVectorFst()
    fst.add_state()
    fst.start = 0
    state = 0
    for _ in range(count or 1):
        nxt = state if count is None else fst.add_state()
        for i in real:
            fst.add_arc(state, kaldifst.StdArc(i, i, cost, nxt))
        state = nxt
    fst.set_final(state, 0.0)
    return fst


def make_word_loop(words: Dict[str, int]) -> kaldifst.StdVectorFst:
    """G for ``grammar: digit_loop``: one state, start and final, a loop over every real word."""
    return _word_grammar(words, None)


def make_known_length(words: Dict[str, int], count: int) -> kaldifst.StdVectorFst:
    """G for ``grammar: words_N`` (TIDIGITS' known-length condition: every utterance has N words, e.g. yesno's 8)
    and ``one_word`` (= ``words_1``, isolated-word recognition such as FSDD's single digits): exactly ``count``
    words of the vocabulary."""
    return _word_grammar(words, count)


KALDILM_TIMEOUT_S = 120.0
ARPA_FULL_CHECK_MAX_BYTES = 200 * 2**20  # about 7 M n-grams, 3.5 GiB of Python tables
KALDILM_SCRIPT = """import sys
from kaldilm.arpa2fst import arpa2fst
arpa2fst(input_arpa=sys.argv[1], output_fst=sys.argv[2], read_symbol_table=sys.argv[3], disambig_symbol="#0",
         max_order=int(sys.argv[4]), max_arpa_warnings=-1)
"""


def make_arpa_fst(arpa: PathLike, words_txt: PathLike, ngram_order: int, check: bool = True) -> kaldifst.StdVectorFst:
    """G from an ARPA n-gram through kaldilm (Kaldi's arpa2fst), run in a child process (kaldilm must not share a
    process with kaldi_hmm_gmm) that writes G in OpenFst's binary form; back-off arcs read ``#0``.

    With ``check`` the ARPA file is first read by :func:`asrlib.lang.arpa.read_arpa` (a file above
    ``ARPA_FULL_CHECK_MAX_BYTES`` for its structure only), so that a truncated or inconsistent file is an error naming
    its line."""
    arpa = Path(arpa)
    if not arpa.is_file():
        raise AsrError(f"ARPA language model {arpa} does not exist (lang.arpa)")
    if check:
        from asrlib.lang.arpa import read_arpa

        # the full check holds the model in memory (about 0.5 KiB an n-gram): above the limit, the structure only
        read_arpa(arpa, max_order=ngram_order, structure_only=arpa.stat().st_size > ARPA_FULL_CHECK_MAX_BYTES)
    limit = KALDILM_TIMEOUT_S + arpa.stat().st_size / 1e5  # about 10 s more per MB of ARPA
    with tempfile.TemporaryDirectory(dir=arpa.parent, prefix=".g_") as tmp:
        out = Path(tmp) / "G.fst"
        cmd = [sys.executable, "-c", KALDILM_SCRIPT, str(arpa), str(out), str(words_txt), str(ngram_order)]
        try:
            proc = subprocess.run(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace", timeout=limit
            )
        except subprocess.TimeoutExpired:
            raise AsrError(f"kaldilm did not finish converting {arpa} within {limit:.0f} s") from None
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
            raise AsrError(
                f"kaldilm could not convert {arpa} (exit {proc.returncode}); are all its words in "
                f"{words_txt}? kaldilm said:\n{tail}"
            )
        skipped = [ln for ln in proc.stderr.splitlines() if "not in symbol table" in ln]
        if skipped:
            oov = sorted({ln.split("word '", 1)[1].split("'", 1)[0] for ln in skipped if "word '" in ln})
            log.warning(
                "%s: %d n-gram line(s) skipped because their words are not in %s (words: %s)",
                arpa,
                len(skipped),
                words_txt,
                " ".join(oov[:20]) + (" ..." if len(oov) > 20 else ""),
            )
        try:
            G = kaldifst.StdVectorFst.read(str(out))
        except Exception as e:  # noqa: BLE001 - kaldifst's read errors (RuntimeError, ...)
            raise AsrError(f"the grammar kaldilm made from {arpa} cannot be read ({' '.join(str(e).split())[:200]})")
    if G.num_states == 0:
        raise AsrError(f"kaldilm produced an empty grammar from {arpa}")
    return G


# ---------------------------------------------------------------- the whole graph
def check_grammar(grammar: str, arpa: Optional[PathLike], lm_text: Sequence[PathLike] = ()) -> None:
    """AsrError unless ``grammar`` is known and, for ``arpa``, the ARPA file exists or, without one, the texts
    ``lm_text`` to estimate it from do."""
    if not is_grammar(grammar):
        raise AsrError(f"lang.grammar must be one of {', '.join(GRAMMARS)} (N = 1..999), got '{grammar}'")
    if grammar == "arpa":
        if not arpa and not lm_text:
            raise AsrError(
                "lang.grammar is 'arpa' but neither lang.arpa (path of an ARPA file) nor lang.lm_text "
                "(text to estimate the n-gram from) is set"
            )
        if arpa:
            if not Path(arpa).is_file():
                raise AsrError(f"ARPA language model {arpa} does not exist (lang.arpa)")
            return
        for t in lm_text:
            if not Path(t).is_file():
                raise AsrError(f"LM text {t} does not exist (lang.lm_text)")


def grammar_vocabulary(
    words: Dict[str, int], grammar_words: Optional[Sequence[str]], where: PathLike
) -> Dict[str, int]:
    """The part of ``words`` (words.txt: word -> id) that G may emit: ``grammar_words`` (``lang.grammar_words``,
    ``decode.set_words``) plus the special symbols, or all of ``words`` when None; a word missing from words.txt is
    an AsrError naming it (``where``: that file)."""
    if grammar_words is None:
        return words
    missing = sorted({w for w in grammar_words if w not in words or w in SPECIAL_WORDS})
    if missing:
        raise AsrError(
            f"lang.grammar_words / decode.set_words: {' '.join(missing)} not in {where} (the vocabulary "
            f"of the training transcripts); G can only emit words the lexicon has"
        )
    keep = set(grammar_words) | set(SPECIAL_WORDS)
    return {w: i for w, i in words.items() if w in keep}


def build_tlg(
    lang_dir: PathLike,
    grammar: str = "digit_loop",
    arpa: Optional[PathLike] = None,
    ngram_order: int = 3,
    lm_text: Sequence[PathLike] = (),
    lm_text_has_utt_ids: bool = False,
    grammar_words: Optional[Sequence[str]] = None,
    record: Optional[Dict[str, Dict[str, float]]] = None,
    lm_prune_target: int = 0,
    lm_count_cutoffs: Sequence[int] = (),
    lm_toolkit: str = "ours",
) -> Path:
    """Build ``T.fst``, ``L.fst``, ``G.fst`` and ``TLG.fst`` (plus ``disambig.txt``) in ``lang_dir``.

    ``lang_dir`` must hold ``lexicon.txt``, ``tokens.txt`` and ``words.txt`` (see
    :func:`asrlib.lang.lexicon.write_lang_files`). ``grammar`` is ``digit_loop`` (uniform word loop), ``one_word``
    (exactly one word: isolated-word tasks), ``words_N`` (exactly N words: a known-length task) or ``arpa``
    (``arpa`` = path of an ARPA file, pruned to ``ngram_order``). With ``arpa`` unset, the ``ngram_order``-gram is
    first estimated from the texts ``lm_text`` into ``lang_dir/lm_<order>gram.arpa``
    (:func:`asrlib.lang.ngram.build_arpa`; words upper-cased like the lexicon's, words outside ``words.txt`` become
    ``<unk>``, whose n-grams G then leaves out). ``grammar_words``: the words G may emit (not for ``arpa``); L keeps
    the whole lexicon. ``lm_prune_target``, ``lm_count_cutoffs``, ``lm_toolkit``: how that n-gram is pruned and
    estimated (``lang.lm_*``, :func:`asrlib.lang.ngram.build_arpa`). ``record``: a dict that gets each step's
    wall/CPU seconds and peak RSS (:func:`timed`), and the sizes of the graphs. Returns the path of ``TLG.fst``.
    """
    lang_dir = Path(lang_dir)
    if grammar_words is not None and grammar == "arpa":
        raise AsrError("lang.grammar_words restricts a word loop or a known-length grammar, not an n-gram")
    check_grammar(grammar, arpa, lm_text)
    with timed("read", record):
        tokens = read_tokens(lang_dir / "tokens.txt")
        words = {w: i for i, w in read_words(lang_dir / "words.txt").items()}
        for sym in SPECIAL_WORDS:
            if sym not in words:
                raise AsrError(f"{lang_dir / 'words.txt'} lacks '{sym}'; rebuild it with steps.prepare_lang")
        lexicon = read_lexicon(lang_dir / "lexicon.txt")
        for w, prons in lexicon.items():
            if w not in words:
                raise AsrError(f"{lang_dir / 'lexicon.txt'}: word '{w}' is not in words.txt")
            for ph in (ph for p in prons for ph in p):
                if ph not in tokens:
                    raise AsrError(f"{lang_dir / 'lexicon.txt'}: phone '{ph}' of '{w}' is not in tokens.txt")

    num_tokens = len(tokens)
    with timed("L", record):
        entries, max_k = add_disambig(lexicon)
        disambig0 = num_tokens  # phone-level id of #0
        disambig_ids = [disambig0 + k for k in range(max_k + 1)]
        with atomic_open(lang_dir / "disambig.txt") as f:
            for k, i in enumerate(disambig_ids):
                f.write(f"#{k} {i}\n")
        L = make_lexicon_fst(entries, tokens, words, disambig0)
        write_fst(L, lang_dir / "L.fst")
    with timed("G", record):
        g_words = grammar_vocabulary(words, grammar_words, lang_dir / "words.txt")
        if grammar == "digit_loop":
            G = make_word_loop(g_words)
        elif count := known_length(grammar):
            G = make_known_length(g_words, count)
        else:
            if not arpa:
                arpa = lang_dir / f"lm_{ngram_order}gram.arpa"
                build_arpa(
                    lm_text,
                    arpa,
                    ngram_order,
                    words=lang_dir / "words.txt",
                    has_utt_ids=lm_text_has_utt_ids,
                    uppercase=True,
                    prune_target=lm_prune_target,
                    cutoffs=lm_count_cutoffs,
                    toolkit=lm_toolkit,
                )
            G = make_arpa_fst(arpa, lang_dir / "words.txt", ngram_order)
        write_fst(G, lang_dir / "G.fst")
    T = make_ctc_topo(num_tokens, [i + 1 for i in disambig_ids], disambig_ids)
    write_fst(T, lang_dir / "T.fst")

    with timed("LG", record):
        kaldifst.arcsort(L, sort_type="olabel")
        kaldifst.arcsort(G, sort_type="ilabel")
        LG = compose_det_min(L, G, "L ∘ G", "the grammar accepts no word sequence of the lexicon")
        del L, G
        kaldifst.arcsort(LG, sort_type="ilabel")
    with timed("TLG", record):
        kaldifst.arcsort(T, sort_type="olabel")
        lg_states = LG.num_states
        TLG = compose_det_min(T, LG, "T ∘ LG")
        del LG
        TLG = relabel_input(TLG, {i + 1: 0 for i in disambig_ids}, max_label=disambig_ids[-1] + 1)
        kaldifst.connect(TLG)
        kaldifst.arcsort(TLG, sort_type="ilabel")
    out = lang_dir / "TLG.fst"
    with timed("write", record):
        write_fst(TLG, out)
    arcs = sum(TLG.num_arcs(s) for s in range(TLG.num_states))
    if record is not None:
        record["sizes"] = {
            "lg_states": lg_states,
            "tlg_states": TLG.num_states,
            "tlg_arcs": arcs,
            "tlg_bytes": out.stat().st_size,
        }
    log.info(
        "TLG: %d states, %d arcs, %.1f MiB (L∘G %d states; grammar %s over %s words)",
        TLG.num_states,
        arcs,
        out.stat().st_size / 2**20,
        lg_states,
        grammar,
        "all" if grammar_words is None else len(set(grammar_words)),
    )
    return out
