# The recipe's stages as a DAG: every step of asrlib/pipeline.py (the one definition that recipes/<corpus>/run.sh
# runs too) becomes a rule, its inputs and outputs the step's files.
#   snakemake --cores all train        # data → features → lang → trained model
#   snakemake --cores all              # … → decode → score → RESULTS.md, mobile bundle
#   snakemake --cores all mobile       # … → compressed int8 ONNX + sherpa-onnx bundle (stage 7)
#   snakemake --cores all --config recipe=recipes/yesno exp=exp/lstm_ctc
#   snakemake --cores all --config recipe_config=/path/tiny.yaml workdir=/tmp/run   # another config / place
#   snakemake --profile profiles/slurm --cores all                                  # on a SLURM cluster
import os
import sys

ROOT = workflow.basedir
sys.path.insert(0, ROOT)
from asrlib.config import load_config  # noqa: E402
from asrlib.pipeline import Layout, plan  # noqa: E402

RECIPE = os.path.join(ROOT, config.get("recipe", "recipes/digits"))
CONFIG = os.path.abspath(config.get("recipe_config", os.path.join(RECIPE, "config.yaml")))
EXP = config.get("exp", "exp/lstm_ctc")
PY = config.get("python", sys.executable)
STEPS = plan(load_config(CONFIG), Layout(config=CONFIG, exp=EXP, nj=int(config.get("nj", 0)), slurm=True), PY)
OUT = {s.name: s.outputs for s in STEPS if s.module}

workdir: config.get("workdir", RECIPE)  # data/ and exp/ live here (default: the recipe dir)
# the checkout first, the caller's PYTHONPATH kept after it (braces doubled twice: this f-string, then snakemake's
# formatting of every shell command)
shell.prefix(f"export PYTHONPATH={ROOT}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; ")


rule all:
    input: OUT["results"], OUT.get("export_mobile", [])


rule train:
    input: OUT["train_model"]


rule mobile:
    input: OUT.get("export_mobile", [])


for _step in STEPS:
    if not _step.module:  # a stage with nothing to do for this config (e.g. no mobile export of a BLSTM)
        continue

    rule:
        name: _step.name
        input: _step.inputs
        output: _step.outputs
        threads: _step.threads or workflow.cores
        resources: **_step.resources
        params: cmd=_step.shell(PY)  # bound now: the shell directive is evaluated again when the job runs
        shell: "{params.cmd}"
