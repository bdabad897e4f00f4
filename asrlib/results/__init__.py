"""Results as records: what made a run, beside its metrics (:mod:`asrlib.results.records`), and the recipes'
RESULTS.md tables built from them (:mod:`asrlib.results.table`; the command is ``python -m steps.results``)."""
