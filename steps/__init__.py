"""Generic recipe stages, one thin CLI per stage (run as ``python -m steps.NAME``)."""
