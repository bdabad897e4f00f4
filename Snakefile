# The recipe's stages as a DAG, calling the same `steps/` and `local/` commands as recipes/<corpus>/run.sh.
#   snakemake --cores all train        # data → features → lang → trained model
#   snakemake --cores all              # … → decode → score → RESULTS.md
#   snakemake --cores all --config recipe=recipes/digits exp=exp/lstm_ctc
#   snakemake --cores all --config recipe_config=/path/tiny.yaml workdir=/tmp/run   # another config / place
import os
import sys

import yaml

ROOT = workflow.basedir
RECIPE = os.path.join(ROOT, config.get("recipe", "recipes/digits"))
CONFIG = config.get("recipe_config", os.path.join(RECIPE, "config.yaml"))
EXP = config.get("exp", "exp/lstm_ctc")
PY = config.get("python", sys.executable)
NJ = int(config.get("nj", yaml.safe_load(open(CONFIG)).get("features", {}).get("nj", 2)))
SETS = ["train", "dev", "test"]
EVAL_SETS = ["dev", "test"]
METHODS = ["greedy", "tlg"]

workdir: config.get("workdir", RECIPE)  # data/ and exp/ live here (default: the recipe dir)
shell.prefix(f"export PYTHONPATH={ROOT}; ")


rule all:
    input: f"{EXP}/RESULTS.md"


rule train:
    input: f"{EXP}/.train.done"


rule prepare_data:  # stage 1
    output: expand("data/{s}/wav.scp", s=SETS)
    shell: "{PY} -m local.digits --config {CONFIG} --out-dir data --nj {NJ}"


rule validate_data:
    input: "data/{s}/wav.scp"
    output: "data/{s}/.validated"
    shell: "{PY} -m steps.validate_data_dir --data-dir data/{wildcards.s} --vocab cmudict"


rule fbank:  # stage 2
    input: "data/{s}/.validated"
    output: "data/fbank/{s}/.done"
    threads: NJ
    shell: "{PY} -m steps.compute_fbank --config {CONFIG} --data-dir data/{wildcards.s} --out-dir data/fbank/{wildcards.s} --nj {threads}"


rule cmvn:
    input: "data/fbank/train/.done"
    output: "data/fbank/train/cmvn.scp"
    shell: "{PY} -m steps.compute_cmvn --feats data/fbank/train/feats.scp --out-dir data/fbank/train"


rule lang:  # stage 3
    input: "data/train/.validated"
    output: "data/lang/.done"
    shell: "{PY} -m steps.prepare_lang --config {CONFIG} --text data/train/text --lang-dir data/lang"


rule train_model:  # stage 4
    input: "data/fbank/train/cmvn.scp", "data/fbank/dev/.done", "data/lang/.done"
    output: f"{EXP}/.train.done"
    threads: workflow.cores
    shell: "{PY} -m steps.train --config {CONFIG} --data-dir data --feats-dir data/fbank --lang-dir data/lang --exp-dir {EXP}"


rule logprobs:  # stage 5
    input: f"{EXP}/.train.done", "data/fbank/{s}/.done"
    output: f"{EXP}/logprobs_{{s}}/.done"
    shell: "{PY} -m steps.compute_logprobs --model {EXP}/final.pt --feats data/fbank/{wildcards.s}/feats.scp --out-dir {EXP}/logprobs_{wildcards.s}"


rule decode:
    input: f"{EXP}/logprobs_{{s}}/.done", "data/lang/.done"
    output: f"{EXP}/decode_{{s}}_{{m}}/.decode.done"
    shell: "{PY} -m steps.decode --config {CONFIG} --method {wildcards.m} --logprobs {EXP}/logprobs_{wildcards.s}/logprobs.scp --lang-dir data/lang --out-dir {EXP}/decode_{wildcards.s}_{wildcards.m}"


rule score:  # stage 6
    input: f"{EXP}/decode_{{s}}_{{m}}/.decode.done"
    output: f"{EXP}/decode_{{s}}_{{m}}/wer.json"
    shell: "{PY} -m steps.score --ref data/{wildcards.s}/text --hyp {EXP}/decode_{wildcards.s}_{wildcards.m}/hyp.txt --out-dir {EXP}/decode_{wildcards.s}_{wildcards.m}"


rule results:
    input: expand(f"{EXP}/decode_{{s}}_{{m}}/wer.json", s=EVAL_SETS, m=METHODS)
    output: f"{EXP}/RESULTS.md"
    shell: "{PY} -m steps.make_results --exp-dir {EXP}"
