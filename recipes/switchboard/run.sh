#!/usr/bin/env bash
# Switchboard (local/switchboard.py: lhotse prepare_switchboard + eval2000, sides as speakers;
# --corpus-dir DIR holding LDC97S62/ ...). Several learners: --num-learners N, or Snakemake with profiles/slurm.
# Stages (asrlib/pipeline.py): 1 data, 2 features, 3 lang, 4 training, 5 decoding, 6 scoring, 7 mobile export.
#   ./run.sh [--stage N] [--stop-stage M] [--config FILE] [--nj N] ...   (all options: ./run.sh --help)
exec "$(dirname "$0")/../../utils/run_recipe.sh" "$(dirname "$0")" "$@"
