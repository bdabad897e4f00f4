"""asrlib: a Kaldi-style speech-recognition training library (data, features, lang, models, training, decoding)."""

import os as _os

__version__ = "0.1.0"

# oneDNN, under torch's CPU LSTM, keeps a compiled primitive for every input shape it meets, up to 1024 by default,
# so a recogniser that runs each segment of a long recording (new lengths all the time) grew with the recording: AN4's
# 1 h one took 1.20x the memory of its 60 s ones (a 2 x 160 BLSTM over 600 lengths of 100-700 frames: +356 MB).
# 64 hold the shapes in use (the fixed-size chunks); a value set by the user wins. docs/long-recordings.md.
_os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")
