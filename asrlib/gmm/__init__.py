"""GMM-HMM systems with kaldi-hmm-gmm (Kaldi's train_mono / align_si, in Python), used for frame-level targets.

- :mod:`asrlib.gmm.lang`: the GMM phone set (the lang dir's phones + a silence phone), HMM topology, and the
  lexicon FST with optional silence between words;
- :mod:`asrlib.gmm.feats`: GMM features (MFCC computed from the fbank archive, plus deltas);
- :mod:`asrlib.gmm.model`: the model (topology, tree, transition model, GMMs) and its files;
- :mod:`asrlib.gmm.align`: training graphs, equal and Viterbi alignment, alignment conversions;
- :mod:`asrlib.gmm.train`: statistics, EM update, mix-up, and the monophone training schedule.

The Kaldi extension modules are imported through :mod:`asrlib.kaldi_imports` (import order).
"""
