"""asrlib: a Kaldi-style speech-recognition training library (data, features, lang, models, training, decoding)."""

__version__ = "0.1.0"
