"""Corpus-specific data preparation (run as ``python -m local.NAME``)."""
