"""Decoding with the GMM-HMM (Kaldi's utils/mkgraph.sh + gmm-decode-faster), for monophone systems.

HCLG is built the way ``mkgraph.sh`` builds it, with kaldifst and kaldi-hmm-gmm:

1. ``LG = min(det(L ∘ G))`` with L the lexicon with optional silence and disambiguation symbols
   (:func:`asrlib.gmm.lang.make_lexicon_fst_with_silence`; with a ``#0:#0`` loop when G's back-off arcs read
   ``#0``), G the recipe's grammar (``data/lang/G.fst``: the word loop or the n-gram).
2. C: the systems here are monophones (context width 1, ``model.tree``), so ``C ∘ LG`` is ``LG`` with its input
   labels read through ``ilabel_info`` = [phone] for a phone, [-k] for the disambiguation symbol k, [] for epsilon
   (what ``fstcomposecontext --context-size=1 --central-position=0`` writes).
3. ``H`` from ``get_h_transducer`` (transition ids → ilabel_info entries, transition probabilities at scale 1.0),
   ``HCLGa = det(H ∘ CLG)``, its disambiguation transition ids replaced by epsilon, epsilons removed, minimized.
4. ``HCLG = add_self_loops(HCLGa, self_loop_scale = 0.1)``.

The search is kaldi-hmm-gmm's ``FasterDecoder`` over ``DecodableAmDiagGmmScaled`` with Kaldi's acoustic scale
1/12 (``decode.sh --acwt 0.083333``). A context-dependent tree (triphones) would need a real C and is refused.
"""

from __future__ import annotations

import logging
from typing import List, Optional

import numpy as np

from asrlib.errors import AsrError
from asrlib.kaldi_imports import kaldifst, khg
from asrlib.gmm.lang import GmmLang, make_lexicon_fst_with_silence
from asrlib.gmm.model import GmmModel
from asrlib.lang.graphs import compose_det_min, relabel_input

log = logging.getLogger(__name__)

ACOUSTIC_SCALE = 1.0 / 12  # Kaldi's decode.sh default (--acwt 0.083333)
TRANSITION_SCALE = 1.0  # mkgraph.sh --transition-scale
SELF_LOOP_SCALE = 0.1  # mkgraph.sh --self-loop-scale


def make_hclg(
    model: GmmModel, lang: GmmLang, G: "kaldifst.StdVectorFst", sil_prob: float = 0.5
) -> "kaldifst.StdVectorFst":
    """HCLG for a monophone ``model`` with the grammar ``G`` (words of ``lang.words``); see the module docstring."""
    if model.tree.context_width != 1:
        raise AsrError(f"GMM decoding supports monophone systems only (context width {model.tree.context_width})")
    word_disambig = lang.words.get("#0")
    uses_disambig = word_disambig is not None and any(
        arc.ilabel == word_disambig for st in range(G.num_states) for arc in kaldifst.ArcIterator(G, st)
    )
    L = make_lexicon_fst_with_silence(lang, sil_prob, word_disambig if uses_disambig else None)
    G = G.copy()
    kaldifst.arcsort(G, sort_type="ilabel")
    LG = compose_det_min(L, G, "L ∘ G", "the grammar accepts no word sequence of the lexicon")
    kaldifst.arcsort(LG, sort_type="ilabel")

    top = max(max(lang.phones.values()), max(lang.disambig, default=0))
    disambig = set(lang.disambig)
    ilabel_info: List[List[int]] = [[]] + [[-i] if i in disambig else [i] for i in range(1, top + 1)]
    H, disambig_tids = khg.get_h_transducer(
        ilabel_info=ilabel_info,
        ctx_dep=model.tree,
        trans_model=model.tm,
        config=khg.HTransducerConfig(transition_scale=TRANSITION_SCALE),
    )
    kaldifst.arcsort(H, sort_type="olabel")
    HCLG = compose_det_min(H, LG, "H ∘ CLG", "phones of the lexicon without HMMs?")
    HCLG = relabel_input(HCLG, {int(t): 0 for t in disambig_tids})
    kaldifst.rmepsilon(HCLG)
    kaldifst.minimize_encoded(HCLG)
    HCLG = khg.add_self_loops(
        self_loop_scale=SELF_LOOP_SCALE, disambig_syms=[], reorder=True, trans_model=model.tm, ifst=HCLG
    )
    kaldifst.arcsort(HCLG, sort_type="ilabel")
    log.info(
        "HCLG: %d states, %d arcs (L∘G %d states)",
        HCLG.num_states,
        sum(HCLG.num_arcs(s) for s in range(HCLG.num_states)),
        LG.num_states,
    )
    return HCLG


class GmmDecoder:
    """Best word sequence of an utterance's fbank with a monophone GMM-HMM and its HCLG (gmm-decode-faster)."""

    def __init__(
        self,
        model: GmmModel,
        hclg: "kaldifst.StdVectorFst",
        beam: float = 13.0,
        max_active: int = 7000,
        acoustic_scale: float = ACOUSTIC_SCALE,
    ):
        self.model, self.hclg, self.acoustic_scale = model, hclg, acoustic_scale
        self.opts = khg.FasterDecoderOptions(beam=beam, max_active=max_active)

    def decode(self, fbank: np.ndarray) -> Optional[List[int]]:
        """Word ids of the best path, or None when no final state was reached (nothing sensible to output)."""
        feats = self.model.features(fbank)
        decodable = khg.DecodableAmDiagGmmScaled(
            am=self.model.am, tm=self.model.tm, feats=np.ascontiguousarray(feats), scale=self.acoustic_scale
        )
        decoder = khg.FasterDecoder(self.hclg, self.opts)
        decoder.decode(decodable)
        if not decoder.reached_final():
            return None
        ok, best = decoder.get_best_path()
        if not ok:
            return None
        ok, _, words, _ = kaldifst.get_linear_symbol_sequence(best)
        return [int(w) for w in words] if ok else None
