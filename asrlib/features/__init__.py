"""Acoustic features: log-mel filterbank extraction into Kaldi archives (:mod:`asrlib.features.fbank`) and
global cepstral mean/variance normalisation statistics (:mod:`asrlib.features.cmvn`).

The submodules are imported on demand (``from asrlib.features.cmvn import load_cmvn``) so that users of CMVN
do not pay for importing torch and lhotse.
"""
