"""Data handling: Kaldi data directories, audio sanity checks and data-directory cleaning."""
