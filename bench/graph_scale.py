"""Cost of LM training, pruning, G compilation and the TLG build as vocabulary and LM grow, and decoding speed with
each graph.

    python bench/graph_scale.py [--quick] [--sizes 1000x10000,100000x1000000] [--order 3] [--lmplz PATH]
                                [--units char|bpe|g2p] [--work-dir DIR] [--out bench/results/graph_scale.json]
                                [--plot PNG]
    python bench/graph_scale.py --table bench/results/graph_scale.json     # the docs table of a results file
    python bench/graph_scale.py --replot bench/results/graph_scale.json docs/img/graph_scale.png

For each size ``VxN`` (V words, N n-grams): a Zipf vocabulary of V words spelled from letters
(asrlib/lang/synthetic.py) and a lexicon of it (``--units``, :func:`make_lexicon`: by default char, ``▁`` + letters,
28 CTC tokens; or 500 BPE pieces; or phones from CMUdict + the G2P trained on CMUdict), a
Markov-Zipf text large enough that its unpruned ``--order``-gram has more than N n-grams (doubled until it does),
our modified Kneser-Ney (asrlib/lang/ngram.py) entropy-pruned to N n-grams in all (asrlib/lang/prune.py), G by
kaldilm, TLG = min(det(T ∘ min(det(L ∘ G)))) with kaldifst (asrlib/lang/graphs.py), then 30 held-out sentences
decoded with TlgDecoder (beam 12, max-active 3000) from noisy CTC log-probabilities that spell them (a spike per
letter, Gaussian noise on the logits; RTF = search seconds / audio seconds at 30 ms a frame). A size needs N >= 2V
(the unigrams alone are V n-grams). Each step runs in its own process, so the peak RSS is that step's.

Figures per size: wall and CPU seconds and peak RSS of ``lm`` (count + estimate, then prune, then write ARPA), of
the graph steps (``G``, ``L``, ``LG``, ``TLG``), the TLG size (states, arcs, bytes on disk), and the decode's RTF and
word error rate. ``--lmplz`` (a KenLM ``lmplz`` binary) adds the perplexity of KenLM's unpruned model and ours on
held-out text (both scored by asrlib/lang/arpa.py). Timings are wall-clock on whatever else the machine runs: say so
when it is shared. Prints one JSON line; writes ``--out`` (by default a results file; with ``--quick`` only when given)
and a cost-curve plot (``--plot``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUICK_SIZES = [(1000, 10_000)]
FULL_SIZES = [(1000, 10_000), (1000, 100_000), (10_000, 100_000), (1000, 1_000_000), (10_000, 1_000_000)]
FULL_SIZES += [(100_000, 1_000_000)]
FRAME_SECONDS = 0.03


def make_lexicon(d: Path, vocab: List[str], units: str, text: Path) -> Dict[str, List[List[str]]]:
    """The lexicon of ``vocab`` in ``units``: char (letters after ``▁``), bpe (a 500-piece sentencepiece model trained
    on ``text``) or g2p (CMUdict, then the Phonetisaurus G2P trained on CMUdict for the rest; cached in
    ``d/../g2p``) - asrlib/lang/units.py and asrlib/lang/g2p.py."""
    from asrlib.lang import units as unit_lexicons

    if units == "char":
        return unit_lexicons.char_lexicon(vocab)
    if units == "bpe":
        with open(text) as f:
            model = unit_lexicons.train_sentencepiece(f, d / "bpe.model", vocab_size=500)
        return unit_lexicons.bpe_lexicon(model, vocab)
    from asrlib.lang.g2p import cmudict_g2p
    from asrlib.lang.lexicon import build_lexicon_from

    model = cmudict_g2p(d.parent / "g2p")

    def g2p(words: List[str]):
        r = model.predict(words)
        return r.prons, r.skipped

    lexicon, _ = build_lexicon_from(vocab, g2p=g2p)
    return lexicon


def _stage_lm(d: Path, vocab_size: int, target: int, order: int, units: str) -> Dict[str, object]:
    from asrlib.lang.graphs import timed
    from asrlib.lang.lexicon import write_lang_files
    from asrlib.lang.ngram import estimate_lm, read_vocabulary, write_arpa
    from asrlib.lang.prune import prune_entropy
    from asrlib.lang.synthetic import spell_vocabulary, write_zipf_text

    rec: Dict[str, Dict[str, float]] = {}
    vocab = spell_vocabulary(vocab_size, seed=0)
    tokens = max(target, 20 * vocab_size)
    write_zipf_text(d / "text", vocab, tokens, seed=1)
    with timed("lexicon", rec):
        write_lang_files(d, make_lexicon(d, vocab, units, d / "text"))
    while True:
        write_zipf_text(d / "text", vocab, tokens, seed=1)
        with timed("lm_train", rec):
            lm = estimate_lm([d / "text"], order, vocab=read_vocabulary(d / "words.txt"))
        if sum(lm.ngram_counts()) > target * 1.1 or tokens > 64 * target:
            break
        del lm
        tokens *= 2
    unpruned = lm.ngram_counts()
    with timed("lm_prune", rec):
        pruned = prune_entropy(lm, target)
    with timed("lm_write", rec):
        write_arpa(pruned, d / "lm.arpa")
    write_zipf_text(d / "heldout", vocab, 3000, seed=7)
    return {
        "stage": rec,
        "text_tokens": lm.stats.tokens,
        "ngrams_unpruned": unpruned,
        "ngrams": pruned.ngram_counts(),
        "arpa_bytes": (d / "lm.arpa").stat().st_size,
    }


def _stage_graph(d: Path, order: int) -> Dict[str, object]:
    from asrlib.lang.graphs import build_tlg

    rec: Dict[str, Dict[str, float]] = {}
    build_tlg(d, grammar="arpa", arpa=d / "lm.arpa", ngram_order=order, record=rec)
    return {"stage": rec}


def _stage_decode(d: Path, utts: int) -> Dict[str, object]:
    import numpy as np

    from asrlib.decode.search import TlgDecoder
    from asrlib.lang.lexicon import read_lexicon, read_tokens
    from asrlib.score import score

    tokens, lex = read_tokens(d / "tokens.txt"), read_lexicon(d / "lexicon.txt")
    rng = np.random.default_rng(3)
    t0 = time.perf_counter()
    dec = TlgDecoder(d, beam=12.0, max_active=3000)
    load_s = time.perf_counter() - t0
    refs, hyps, frames_total = {}, {}, 0
    for i, line in enumerate((d / "heldout").read_text().splitlines()[:utts]):
        words = line.split()
        frames = [0] * 3
        for w in words:
            for ph in lex[w][0]:
                frames += [tokens[ph]] * int(rng.integers(1, 3)) + [0] * int(rng.integers(0, 3))
        frames += [0] * 3
        logits = rng.normal(0.0, 1.5, (len(frames), len(tokens)))
        logits[np.arange(len(frames)), frames] += 7.0
        lp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        refs[f"u{i}"], hyps[f"u{i}"] = line, " ".join(dec.decode(lp.astype(np.float32)))
        frames_total += len(frames)
    wer = score(refs, hyps)
    return {
        "graph_load_s": round(load_s, 3),
        "frames": frames_total,
        "rtf": round(dec.search_seconds / (frames_total * FRAME_SECONDS), 6),
        "wer": round(wer.wer, 2),
    }


def _stage_lmplz(d: Path, lmplz: str, order: int) -> Dict[str, object]:
    from asrlib.lang.arpa import perplexity, read_arpa
    from asrlib.lang.ngram import estimate_lm, write_arpa

    out = d / "kenlm.arpa"
    with open(d / "text", "rb") as f, open(out, "wb") as o:
        subprocess.run(
            [lmplz, "-o", str(order), "-S", "20%", "--discount_fallback", "0.5", "0.5", "0.5"],
            stdin=f,
            stdout=o,
            stderr=subprocess.DEVNULL,
            check=True,
        )
    write_arpa(estimate_lm([d / "text"], order), d / "ours_unpruned.arpa")
    ours, ken = read_arpa(d / "ours_unpruned.arpa"), read_arpa(out)
    vocab = {g[0] for g in ours.probs[0]}
    sents = [ln.split() for ln in (d / "heldout").read_text().splitlines()]
    sents = [s for s in sents if all(w in vocab for w in s)]  # words the text has: KenLM adds <unk>, ours does not
    p_ours, p_ken = perplexity(ours, sents)["ppl"], perplexity(ken, sents)["ppl"]
    return {"ppl_ours": round(p_ours, 3), "ppl_kenlm": round(p_ken, 3), "rel_diff": (p_ours - p_ken) / p_ken}


def _child(stage: str, d: Path, v: int, n: int, order: int, lmplz: str, units: str) -> Dict[str, object]:
    if stage == "lm":
        return _stage_lm(d, v, n, order, units)
    if stage == "graph":
        return _stage_graph(d, order)
    if stage == "lmplz":
        return _stage_lmplz(d, lmplz, order)
    return _stage_decode(d, 30)


def run_size(work: Path, v: int, n: int, order: int, lmplz: str, units: str) -> Dict[str, object]:
    d = work / f"{units}_v{v}_n{n}"
    d.mkdir(parents=True, exist_ok=True)
    out: Dict[str, object] = {"vocab": v, "ngrams_target": n, "order": order, "units": units}
    for stage in ["lm", "graph", "decode"] + (["lmplz"] if lmplz else []):
        cmd = [sys.executable, __file__, "--child", stage, str(d), str(v), str(n), str(order), lmplz or "-", units]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if proc.returncode != 0:
            raise SystemExit(f"{stage} for {v}x{n} failed:\n{proc.stderr[-3000:]}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        res["process_wall_s"] = round(time.perf_counter() - t0, 3)
        out[stage] = res
        print(f"# {v}x{n} {stage}: {json.dumps(res)}", file=sys.stderr, flush=True)
    return out


def plot(results: List[Dict[str, object]], path: Path) -> None:
    """Cost curves against the pruned LM's n-gram count: CPU seconds of LM training + pruning and of the graph build
    (CPU, not wall: on a shared machine the wall time says more about the neighbours), the build's peak RSS."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def cpu(stages: Dict[str, Dict[str, float]]) -> float:
        return sum(v["cpu_s"] for k, v in stages.items() if k != "sizes")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for v in sorted({r["vocab"] for r in results}):
        rows = sorted((r for r in results if r["vocab"] == v), key=lambda r: r["ngrams_target"])
        n = [sum(r["lm"]["ngrams"]) for r in rows]
        axes[0].loglog(n, [cpu(r["lm"]["stage"]) for r in rows], "o--", label=f"LM train + prune, V={v:,}")
        axes[0].loglog(n, [cpu(r["graph"]["stage"]) for r in rows], "s-", label=f"G + LG + TLG, V={v:,}")
        rss = [max(x["peak_rss_mib"] for k, x in r["graph"]["stage"].items() if k != "sizes") for r in rows]
        axes[1].loglog(n, [x / 1024 for x in rss], "s-", label=f"TLG build peak RSS, V={v:,}")
    all_n = sorted({sum(r["lm"]["ngrams"]) for r in results})
    if len(all_n) > 1:
        top = max(cpu(r["graph"]["stage"]) for r in results if sum(r["lm"]["ngrams"]) == all_n[-1])
        xs = [all_n[0], all_n[-1]]
        axes[0].loglog(xs, [top * x * math.log(x) / (xs[1] * math.log(xs[1])) for x in xs], "k:", label="∝ n log n")
    axes[0].set_ylabel("CPU seconds")
    axes[1].set_ylabel("GiB")
    for ax in axes:
        ax.set_xlabel("n-grams in the pruned LM")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("bench/graph_scale.py: cost against LM size (trigrams, char lexicon)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def markdown_table(results: List[Dict[str, object]]) -> str:
    """The docs table (docs/language-models.md) of a results file's sizes: seconds as wall (CPU)."""

    def wc(st: Dict[str, float]) -> str:
        return (
            f"{st['wall_s']:.0f} ({st['cpu_s']:.0f})"
            if st["wall_s"] >= 10
            else f"{st['wall_s']:.1f} ({st['cpu_s']:.1f})"
        )

    def add(*stages: Dict[str, float]) -> Dict[str, float]:
        return {k: sum(st[k] for st in stages) for k in ("wall_s", "cpu_s")}

    rows = [
        "| units | words | n-grams (1/2/3) | text words | LM train s | prune s | G s | LG s | TLG s | peak RSS GiB "
        "(LM / graph) | TLG states / arcs | TLG MiB | RTF | WER % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lm, g, dec = r["lm"], r["graph"]["stage"], r["decode"]
        sizes = g["sizes"]
        lm_rss = max(v["peak_rss_mib"] for v in lm["stage"].values()) / 1024
        g_rss = max(v["peak_rss_mib"] for k, v in g.items() if k != "sizes") / 1024
        rows.append(
            f"| {r.get('units', 'char')} | {r['vocab']:,} | {'/'.join(f'{n:,}' for n in lm['ngrams'])} "
            f"| {lm['text_tokens']:,} | {wc(lm['stage']['lm_train'])} "
            f"| {wc(add(lm['stage']['lm_prune'], lm['stage']['lm_write']))} "
            f"| {wc(g['G'])} | {wc(g['LG'])} | {wc(add(g['TLG'], g['write']))} | {lm_rss:.2f} / {g_rss:.2f} "
            f"| {sizes['tlg_states']:,} / {sizes['tlg_arcs']:,} | {sizes['tlg_bytes'] / 2**20:.0f} "
            f"| {dec['rtf']:.4f} | {dec['wer']:.2f} |"
        )
    return "\n".join(rows)


def parse_sizes(text: str) -> List[Tuple[int, int]]:
    out = []
    for item in text.split(","):
        v, n = (int(x) for x in item.lower().split("x"))
        if n < 2 * v:
            raise SystemExit(f"size {item}: the n-gram count must be at least twice the vocabulary")
        out.append((v, n))
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--table":
        for path in argv[1:]:
            print(markdown_table(json.loads(Path(path).read_text())["sizes"]))
        return 0
    if argv and argv[0] == "--replot":  # --replot RESULTS.json PNG
        plot(json.loads(Path(argv[1]).read_text())["sizes"], Path(argv[2]))
        return 0
    if argv and argv[0] == "--child":
        stage, d, v, n, order, lmplz = argv[1:7]
        units = argv[7] if len(argv) > 7 else "char"
        print(json.dumps(_child(stage, Path(d), int(v), int(n), int(order), lmplz, units)))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"only {QUICK_SIZES} (under a minute)")
    p.add_argument("--sizes", help="comma-separated VxN (default: the full grid of the docstring)")
    p.add_argument("--order", type=int, default=3)
    p.add_argument("--units", choices=["char", "bpe", "g2p"], default="char", help="lexicon units (see make_lexicon)")
    p.add_argument("--lmplz", help="KenLM's lmplz binary: compare perplexities with it")
    p.add_argument("--work-dir", type=Path, help="keep the lang dirs here (default: a temporary directory)")
    p.add_argument("--out", type=Path, help="results JSON (default: under bench/results; none with --quick)")
    p.add_argument("--plot", type=Path, help="cost-curve PNG (default docs/img/graph_scale.png for the full grid)")
    a = p.parse_args(argv)
    sizes = parse_sizes(a.sizes) if a.sizes else (QUICK_SIZES if a.quick else FULL_SIZES)
    tmp = None if a.work_dir else tempfile.TemporaryDirectory(prefix="graph_scale_")
    work = a.work_dir or Path(tmp.name)
    results = [run_size(work, v, n, a.order, a.lmplz or "", a.units) for v, n in sizes]
    summary = {
        "bench": "graph_scale",
        "date": time.strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "note": "wall_s is wall-clock on whatever else the machine ran (see load_avg); cpu_s is the step's own CPU",
        "sizes": results,
    }
    default_name = "graph_scale" + ("" if a.units == "char" else f"_{a.units}")
    default_name += ("_sizes" if a.sizes else "") + ".json"
    out = a.out or (None if a.quick else ROOT / "bench" / "results" / default_name)  # --quick: a check, not a result
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(summary, indent=1) + "\n")
    png = a.plot or (None if a.quick or a.sizes or a.units != "char" else ROOT / "docs" / "img" / "graph_scale.png")
    if png:
        plot(results, png)
    if tmp:
        tmp.cleanup()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
