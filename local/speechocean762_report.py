"""speechocean762's tables: WER and CER overall and by speaker group (children aged 12 or under / adults, from the
data dir's ``spk2age``), the errors' breakdown (insertions, deletions, substitutions; the most frequent
confusions), the OOV rate of each set against the vocabulary of a lang dir, and training minutes.

    python -m local.speechocean762 report --data DATA --exp EXP [EXP ...] [--methods tlg greedy] [--lang-dir L]
        [--decode-name decode_{set}_{method}] [--sets dev test]

``--exp`` are the runs of one configuration (seeds): each gets a row, then their mean ± half-range. A run's decoding
of set S with search M is ``EXP/decode_S_M/hyp.txt`` (``--decode-name`` for another layout, e.g. a decoding with
another lang dir). The OOV rate is the share of a set's running words that are not in ``--lang-dir``'s
``words.txt`` (default ``DATA/lang``). ``--sets``: the dev and test sets' names (a pooled recipe's
``dev_speechocean762 test_speechocean762``); a set without ``spk2age`` is reported without groups.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from asrlib.io.tables import read_table_dict
from asrlib.score import EPS, score
from local.an4 import _mean_spread, chars, training_seconds
from local.speechocean762 import is_child

GROUPS = ("children", "adults")


def speaker_groups(data_set: Path) -> Dict[str, str]:
    """``{utt: children|adults}`` of a data dir, from its ``utt2spk`` and ``spk2age`` ({} without one)."""
    if not (data_set / "spk2age").is_file():
        return {}
    ages = {s: int(a) for s, a in read_table_dict(data_set / "spk2age").items()}
    return {u: GROUPS[0] if is_child(ages[s]) else GROUPS[1] for u, s in read_table_dict(data_set / "utt2spk").items()}


def oov_rate(text: Path, words_txt: Path) -> Tuple[float, int, int]:
    """Percent of the running words of a Kaldi ``text`` outside ``words.txt``, their count and the word count."""
    vocab = set(read_table_dict(words_txt))
    toks = [w for t in read_table_dict(text).values() for w in t.split()]
    oov = sum(w not in vocab for w in toks)
    return 100.0 * oov / max(1, len(toks)), oov, len(toks)


def score_groups(data_set: Path, hyp_txt: Path) -> Dict[str, object]:
    """WER, CER, ins/del/sub of a decoding, overall and per group, and its aligned word pairs."""
    ref, hyp = read_table_dict(data_set / "text"), read_table_dict(hyp_txt)
    group = speaker_groups(data_set)
    out: Dict[str, object] = {}
    pairs: List[Tuple[str, str]] = []
    for name, keep in (("all", None), *((g, g) for g in GROUPS)):
        r = {u: t for u, t in ref.items() if keep is None or group.get(u) == keep}
        if not r:
            continue
        h = {u: t for u, t in hyp.items() if u in r}
        w = score(r, h)
        c = score({u: chars(t) for u, t in r.items()}, {u: chars(t) for u, t in h.items()})
        out[name] = {"wer": w.wer, "cer": c.wer, "ins": w.ins, "del": w.dels, "sub": w.subs, "words": w.num_words}
        if keep is None:
            pairs = [p for a in w.per_utt for p in a.pairs]
    out["pairs"] = pairs
    return out


def confusions(pairs: Sequence[Tuple[str, str]], top: int = 10) -> Dict[str, List[Tuple[str, int]]]:
    """The most frequent substitutions (``REF→HYP``), deleted and inserted words."""
    sub = Counter(f"{r}→{h}" for r, h in pairs if r != h and EPS not in (r, h))
    dele = Counter(r for r, h in pairs if h == EPS)
    ins = Counter(h for r, h in pairs if r == EPS)
    return {
        "substitutions": sub.most_common(top),
        "deletions": dele.most_common(top),
        "insertions": ins.most_common(top),
    }


def report(
    data: Path,
    exps: Sequence[Path],
    methods: Sequence[str] = ("tlg", "greedy"),
    lang_dir: Optional[Path] = None,
    decode_name: str = "decode_{set}_{method}",
    sets: Tuple[str, str] = ("dev", "test"),
) -> Tuple[str, Dict[str, object]]:
    """A markdown report (and its numbers) of the runs ``exps`` of one configuration (see the module docstring)."""
    lang_dir = lang_dir or data / "lang"
    lines = []
    if (lang_dir / "words.txt").is_file():
        rates = {s: oov_rate(data / s / "text", lang_dir / "words.txt") for s in sets}
        lines.append(
            f"Vocabulary {lang_dir.name}/words.txt: OOV rate "
            + ", ".join(f"{s} {r:.2f} % ({n} of {t} words)" for s, (r, n, t) in rates.items())
            + "."
        )
        lines.append("")
    lines += [
        "| run | search | dev %WER | test %WER | test %CER | children %WER | adults %WER | ins / del / sub | "
        "training min |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    acc: Dict[str, Dict[str, List[float]]] = {}
    pairs: List[Tuple[str, str]] = []
    for exp in exps:
        t = training_seconds(exp)
        for m in methods:
            hyp = [exp / decode_name.format(set=s, method=m) / "hyp.txt" for s in sets]
            if not all(h.is_file() for h in hyp):
                continue
            d, te = score_groups(data / sets[0], hyp[0]), score_groups(data / sets[1], hyp[1])
            a = acc.setdefault(m, {k: [] for k in ("dev", "test", "cer", *GROUPS, "min")})
            a["dev"].append(d["all"]["wer"])
            a["test"].append(te["all"]["wer"])
            a["cer"].append(te["all"]["cer"])
            for g in GROUPS:
                if g in te:
                    a[g].append(te[g]["wer"])
            if t is not None:
                a["min"].append(t / 60)
            if m == methods[0]:
                pairs += te["pairs"]
            tot = te["all"]
            grp = [f"{te[g]['wer']:.2f}" if g in te else "-" for g in GROUPS]
            lines.append(
                f"| {exp.name} | {m} | {d['all']['wer']:.2f} | {tot['wer']:.2f} | {tot['cer']:.2f} | {grp[0]} | "
                f"{grp[1]} | {tot['ins']} / {tot['del']} / {tot['sub']} | "
                + (f"{t / 60:.1f}" if t is not None else "-")
                + " |"
            )
    for m, a in acc.items():
        lines.append(
            f"| **mean ± half-range ({len(a['test'])})** | {m} | {_mean_spread(a['dev'])} | "
            f"**{_mean_spread(a['test'])}** | {_mean_spread(a['cer'])} | {_mean_spread(a['children'])} | "
            f"{_mean_spread(a['adults'])} | | {_mean_spread(a['min'])} |"
        )
    conf = confusions(pairs)
    if pairs:
        lines += ["", f"Test errors, {methods[0]}, all runs pooled (count):", ""]
        for k, v in conf.items():
            lines.append(f"- {k}: " + (", ".join(f"{x} {n}" for x, n in v) or "none"))
    return "\n".join(lines) + "\n", {"methods": acc, "confusions": conf}


def report_main(argv: List[str]) -> int:
    from asrlib.cli import run_main

    p = argparse.ArgumentParser(prog="python -m local.speechocean762 report", description=__doc__)
    p.add_argument("--data", type=Path, required=True, help="the data dir the runs were decoded with")
    p.add_argument("--exp", type=Path, nargs="+", required=True, help="the experiment dirs (one per seed)")
    p.add_argument("--methods", nargs="+", default=["tlg", "greedy"])
    p.add_argument("--lang-dir", type=Path, help="the vocabulary's lang dir (default DATA/lang)")
    p.add_argument("--decode-name", default="decode_{set}_{method}", help="a decoding's folder in an exp dir")
    p.add_argument("--sets", nargs=2, default=["dev", "test"], help="the dev and test sets' data dirs in --data")

    def main(args_in):
        a = p.parse_args(args_in)
        text, _ = report(a.data, a.exp, a.methods, a.lang_dir, a.decode_name, tuple(a.sets))
        print(text)
        return 0

    run_main(main, argv)
    return 0
