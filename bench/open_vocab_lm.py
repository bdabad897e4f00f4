"""The open vocabulary's language models on text alone: OOV rates and perplexities for vocabulary sizes and
interpolation weights (asrlib/lang/open_vocab.py), no acoustic model.

    python bench/open_vocab_lm.py --data DATA [--sizes 5000 20000 60000] [--weights 0 0.05 0.1 0.2 0.3]
        [--name speechocean762] [--out bench/results/open_vocab_lm_speechocean762.json] [--quick]

``DATA`` is a recipe's data dir (``local/lm/train_text.txt``: the training transcripts; ``dev/text``, ``test/text``).
For the training transcripts' words alone (``closed``) and for each size N (those words plus wordfreq's N most
frequent words that CMUdict pronounces): the OOV rate of dev and test (running words outside the vocabulary), and
for each weight λ the dev perplexity of the transcripts' 3-gram interpolated with the words' unigram (weight 0:
the 3-gram alone, over the widened vocabulary). Perplexity counts ``</s>`` and skips OOV words (SRILM's
convention), so it compares weights at one size; across sizes the OOV rate is the other half of the picture and
dev WER decides (RESULTS.md). ``--quick``: the speechocean762 excerpt, sizes 2000 and 5000. The last line printed
is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from asrlib.io.atomic import write_json  # noqa: E402
from asrlib.lang.arpa import perplexity  # noqa: E402
from asrlib.lang.ngram import estimate_lm  # noqa: E402
from asrlib.lang.open_vocab import interpolate, unigram_lm, wordfreq_words  # noqa: E402

MINI = ROOT.parent / "shared" / "data" / "speechocean762_mini"


def sentences(path: Path, has_ids: bool) -> List[List[str]]:
    rows = [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
    return [r[1:] if has_ids else r for r in rows]


def oov(sents: List[List[str]], vocab: set) -> float:
    toks = [w for s in sents for w in s]
    return round(100.0 * sum(w not in vocab for w in toks) / max(1, len(toks)), 2)


def measure(lm_text: Path, dev: List[List[str]], test: List[List[str]], sizes, weights, order: int = 3) -> Dict:
    train_words = {w for s in sentences(lm_text, False) for w in s}
    out: Dict[str, object] = {
        "closed": {
            "words": len(train_words),
            "oov_dev": oov(dev, train_words),
            "oov_test": oov(test, train_words),
            "ppl_dev": round(perplexity(estimate_lm([lm_text], order), dev)["ppl"], 1),
        }
    }
    biggest = wordfreq_words(max(sizes))
    for n in sizes:
        bg = dict(list(biggest.items())[:n])
        total = sum(bg.values())
        bg = {w: p / total for w, p in bg.items()}
        vocab = train_words | set(bg)
        text_lm = estimate_lm([lm_text], order, vocab=vocab)
        eos = text_lm.stats.sentences / (text_lm.stats.tokens + text_lm.stats.sentences)
        ppl = {}
        for w in weights:
            lm = interpolate(text_lm, unigram_lm(bg, eos), w) if w else text_lm
            ppl[str(w)] = round(perplexity(lm, dev)["ppl"], 1)
        out[str(n)] = {"words": len(vocab), "oov_dev": oov(dev, vocab), "oov_test": oov(test, vocab), "ppl_dev": ppl}
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, help="the recipe's data dir")
    p.add_argument("--sizes", type=int, nargs="+", default=[5000, 20000, 60000])
    p.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2, 0.3])
    p.add_argument("--name", default="speechocean762", help="the corpus's name, for the JSON line")
    p.add_argument("--out", type=Path, help="also write the JSON line here")
    p.add_argument("--quick", action="store_true", help="the speechocean762 excerpt, sizes 2000 and 5000")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    if a.data is not None:
        lm_text, dev, test = a.data / "local/lm/train_text.txt", a.data / "dev/text", a.data / "test/text"
        dev_s, test_s = sentences(dev, True), sentences(test, True)
    elif a.quick:  # the excerpt's training speakers' text as the LM text; its test speakers as dev and test
        import tempfile

        tmp = Path(tempfile.mkdtemp())
        lm_text = tmp / "train_text.txt"
        lm_text.write_text("\n".join(" ".join(s) for s in sentences(MINI / "train" / "text", True)) + "\n")
        dev_s = test_s = sentences(MINI / "test" / "text", True)
    else:
        p.error("--data is needed (or --quick)")
    sizes = [2000, 5000] if a.quick else a.sizes
    res = {
        "bench": "open_vocab_lm",
        "corpus": "speechocean762_mini" if a.data is None else a.name,
        "order": 3,
        **measure(lm_text, dev_s, test_s, sizes, a.weights),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if a.out is not None:
        write_json(a.out, res)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
