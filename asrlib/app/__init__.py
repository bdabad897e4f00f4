"""The application layer: what a user runs on a trained model, above the library.

``model_dir`` (model directories: packaged, experiment dir, mobile bundle; their backends), ``recognizer`` (audio in,
words with times out; segmentation of long recordings), ``subtitles`` (SRT / WebVTT) and ``cli_asr`` (the ``asr``
command). Nothing in the library (``asrlib.*`` outside ``app``) or in ``steps/`` imports from here.
"""
