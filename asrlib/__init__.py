"""asrlib: a Kaldi-style speech-recognition training library (data, features, lang, models, training, decoding)."""

import os as _os

__version__ = "0.1.0"

# oneDNN, under torch's CPU LSTM, keeps a compiled primitive for every input shape it meets, up to 1024 by default:
# a recogniser that runs each segment of a long recording (a new length every time) grew by about 0.6 MiB a shape,
# AN4's 1 h recording to 1.20x the memory of its 60 s ones. 64 hold the shapes in use (the fixed-size chunks); a
# value set by the user wins. docs/long-recordings.md has the measurement.
_os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")
