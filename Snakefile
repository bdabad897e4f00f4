# The recipe's stages as a DAG, calling the same `steps/` and `local/` commands as recipes/<corpus>/run.sh.
#   snakemake --cores all train        # data → features → lang → trained model
#   snakemake --cores all              # … → decode → score → RESULTS.md, mobile bundle
#   snakemake --cores all mobile       # … → compressed int8 ONNX + sherpa-onnx bundle (stage 7)
#   snakemake --cores all --config recipe=recipes/digits exp=exp/lstm_ctc
#   snakemake --cores all --config recipe_config=/path/tiny.yaml workdir=/tmp/run   # another config / place
import os
import sys

ROOT = workflow.basedir
sys.path.insert(0, ROOT)
from asrlib.config import lm_texts, load_config, set_decode_methods, set_lang_dir  # noqa: E402

RECIPE = os.path.join(ROOT, config.get("recipe", "recipes/digits"))
CONFIG = os.path.abspath(config.get("recipe_config", os.path.join(RECIPE, "config.yaml")))
RCFG = load_config(CONFIG)
EXP = config.get("exp", "exp/lstm_ctc")
PY = config.get("python", sys.executable)
NJ = int(config.get("nj", RCFG.features.nj))
PREPARE = f"local.{RCFG.data.corpus}"  # stage 1 of every recipe: python -m local.<data.corpus> (see asrlib/data/corpus.py)
EVAL_SETS = list(RCFG.data.eval_sets)
SETS = list(dict.fromkeys(["train", "dev"] + EVAL_SETS))  # dev: the training step logs its loss
CTC_METHODS = ["greedy", "tlg", "isolated"]   # rule decode; isolated: the sets with a one-word grammar
INIT = RCFG.train.init  # random | ce: with ce the GMM, alignment and cross-entropy rules run before CTC training
# each eval set's searches (mono: the GMM-HMM, rule decode_gmm, with train.init: ce)
DECODES = [f"{EXP}/decode_{s}_{m}/wer.json" for s in EVAL_SETS for m in set_decode_methods(RCFG, s)]
MONO = config.get("mono", os.path.join(os.path.dirname(EXP) or ".", "mono"))  # GMM-HMM system (shared)
ALI = MONO + "_ali"
CE = config.get("ce", EXP + "_ce")  # cross-entropy model that initialises this experiment
SPK_CMN = RCFG.features.cmvn == "speaker"  # per-speaker CMN: stats of every set (rule spk_cmvn; train: rule cmvn)


def feats(s):  # what a consumer of data/fbank/<s>/feats.scp needs
    return [f"data/fbank/{s}/.done"] + ([f"data/fbank/{s}/cmvn_spk.scp"] if SPK_CMN else [])


LM_TEXT = [str(p) for p in lm_texts(RCFG.lang, "data")]  # lang.lm_text: G's n-gram is estimated from these
LM_TEXT_OF_DATA = [p for p in LM_TEXT if not os.path.isabs(p)]  # relative ones: files of the data dir (stage 1)
CL = RCFG.cluster  # training layout + resources (profiles/slurm turns them into sbatch options)
if CL.nodes > 1:   # one torchrun per node (srun), c10d rendezvous on the job's first node
    TRAIN_LAUNCH = (f"srun --nodes=$SLURM_NNODES --ntasks-per-node=1 --kill-on-bad-exit=1 {PY} -m steps.train_dist "
                    f"--nnodes $SLURM_NNODES --num-learners {CL.learners_per_node} --rdzv-id $SLURM_JOB_ID "
                    f"--max-restarts {CL.max_restarts} "
                    "--rdzv-endpoint $(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1):29400 --")
elif CL.learners_per_node > 1 or CL.max_restarts > 0:
    TRAIN_LAUNCH = f"{PY} -m steps.train_dist --num-learners {CL.learners_per_node} --max-restarts {CL.max_restarts} --"
else:
    TRAIN_LAUNCH = f"{PY} -m steps.train"
TRAIN_RES = {"nodes": CL.nodes, "tasks": CL.nodes, "cpus_per_task": CL.cpus_per_learner * CL.learners_per_node,
             "mem_mb": CL.train_mem_mb, "runtime": CL.train_runtime_min}
TRAIN_RES.update({"slurm_partition": CL.partition} if CL.partition else {})
TRAIN_RES.update({"slurm_extra": f"'--gres=gpu:{CL.gpus_per_node}'"} if CL.gpus_per_node else {})

workdir: config.get("workdir", RECIPE)  # data/ and exp/ live here (default: the recipe dir)
shell.prefix(f"export PYTHONPATH={ROOT}; ")


rule all:
    input: f"{EXP}/RESULTS.md", f"{EXP}/mobile/.export.done"


rule train:
    input: f"{EXP}/.train.done"


rule prepare_data:  # stage 1
    output: expand("data/{s}/wav.scp", s=SETS), LM_TEXT_OF_DATA
    shell: "{PY} -m {PREPARE} --config {CONFIG} --out-dir data --nj {NJ}"


rule validate_data:
    input: "data/{s}/wav.scp"
    output: "data/{s}/.validated"
    params: sr=RCFG.data.sample_rate, mind=RCFG.data.min_duration, maxd=RCFG.data.max_duration
    shell: "{PY} -m steps.validate_data_dir --data-dir data/{wildcards.s} --vocab cmudict --sample-rate {params.sr} --min-duration {params.mind} --max-duration {params.maxd}"


rule fbank:  # stage 2
    input: "data/{s}/.validated"
    output: "data/fbank/{s}/.done"
    threads: NJ
    shell: "{PY} -m steps.compute_fbank --config {CONFIG} --data-dir data/{wildcards.s} --out-dir data/fbank/{wildcards.s} --nj {threads}"


rule cmvn:  # global (features.cmvn: speaker — per-speaker stats, then global over the speaker-normalised features;
            # utterance — global over the utterance-normalised features)
    input: "data/fbank/train/.done"
    output: "data/fbank/train/cmvn.scp", *(["data/fbank/train/cmvn_spk.scp"] if SPK_CMN else [])
    params: spk="--utt2spk data/train/utt2spk" if SPK_CMN else "--cmn utterance" if RCFG.features.cmvn == "utterance" else ""
    shell: "{PY} -m steps.compute_cmvn --feats data/fbank/train/feats.scp --out-dir data/fbank/train {params.spk}"


rule spk_cmvn:  # features.cmvn: speaker — per-speaker stats of a set other than train
    input: "data/fbank/{s}/.done"
    output: "data/fbank/{s}/cmvn_spk.scp"
    wildcard_constraints: s="(?!train$)[^/]+"
    shell: "{PY} -m steps.compute_cmvn --feats data/fbank/{wildcards.s}/feats.scp --utt2spk data/{wildcards.s}/utt2spk --out-dir data/fbank/{wildcards.s} --speaker-only"


rule lang:  # stage 3
    input: "data/train/.validated", LM_TEXT
    output: "data/lang/.done"
    shell: "{PY} -m steps.prepare_lang --config {CONFIG} --text data/train/text --lang-dir data/lang"


# stage 3, decode.set_grammars / decode.set_words: the lang dir of an eval set with its own grammar or vocabulary
SET_LANGS = {}  # its suffix (lang_<suffix>) -> one eval set it searches (sets sharing a dir share its settings)
for _s in sorted(set(RCFG.decode.set_grammars) | set(RCFG.decode.set_words)):
    SET_LANGS.setdefault(set_lang_dir("data/lang", RCFG.decode, _s).name[len("lang_"):], _s)


rule lang_set:
    input: "data/train/.validated"
    output: "data/lang_{x}/.done"
    wildcard_constraints: x="|".join(sorted(SET_LANGS)) or "(?!)"
    params: eval_set=lambda w: SET_LANGS[w.x]
    shell: "{PY} -m steps.prepare_lang --config {CONFIG} --eval-set {params.eval_set} --text data/train/text --lang-dir data/lang_{wildcards.x}"


rule train_mono:  # stage 4, train.init: ce — monophone GMM-HMM (kaldi-hmm-gmm)
    input: "data/fbank/train/cmvn.scp", "data/lang/.done"
    output: f"{MONO}/.done"
    shell: "{PY} -m steps.train_mono --config {CONFIG} --data-dir data --feats-dir data/fbank --lang-dir data/lang --exp-dir {MONO}"


rule align:  # frame alignments of train and dev (ali/pdf archives, CTMs)
    input: f"{MONO}/.done", feats("dev")
    output: f"{ALI}/train/.done", f"{ALI}/dev/.done"
    shell: "{PY} -m steps.align --config {CONFIG} --model {MONO}/final.mdl --data-dir data --feats-dir data/fbank --lang-dir data/lang --out-dir {ALI} --sets train dev"


rule train_ce:  # the LSTM with frame cross-entropy on the alignments
    input: f"{ALI}/train/.done", f"{ALI}/dev/.done"
    output: f"{CE}/.train.done"
    threads: workflow.cores
    shell: "{PY} -m steps.train_ce --config {CONFIG} --feats-dir data/fbank --ali-dir {ALI} --exp-dir {CE}"


rule train_model:  # stage 4
    input: "data/fbank/train/cmvn.scp", feats("dev"), "data/lang/.done", *([f"{CE}/.train.done"] if INIT == "ce" else [])
    output: f"{EXP}/.train.done"
    params: init=f"--init-model {CE}/final.pt" if INIT == "ce" else ""
    threads: workflow.cores
    resources: **TRAIN_RES
    shell: "{TRAIN_LAUNCH} --config {CONFIG} --data-dir data --feats-dir data/fbank --lang-dir data/lang --exp-dir {EXP} {params.init}"


rule logprobs:  # stage 5
    input: f"{EXP}/.train.done", lambda w: feats(w.s)
    output: f"{EXP}/logprobs_{{s}}/.done"
    shell: "{PY} -m steps.compute_logprobs --model {EXP}/final.pt --feats data/fbank/{wildcards.s}/feats.scp --out-dir {EXP}/logprobs_{wildcards.s}"


def decode_lang(w):  # the lang dir that searches eval set w.s (decode.set_grammars / set_words, else data/lang)
    return str(set_lang_dir("data/lang", RCFG.decode, w.s))


rule decode:
    input: f"{EXP}/logprobs_{{s}}/.done", lambda w: f"{decode_lang(w)}/.done"
    output: f"{EXP}/decode_{{s}}_{{m}}/.decode.done"
    wildcard_constraints: m="|".join(CTC_METHODS)
    params: lang=decode_lang
    shell: "{PY} -m steps.decode --config {CONFIG} --method {wildcards.m} --logprobs {EXP}/logprobs_{wildcards.s}/logprobs.scp --lang-dir {params.lang} --out-dir {EXP}/decode_{wildcards.s}_{wildcards.m}"


rule decode_gmm:  # train.init: ce — the monophone GMM-HMM through its HCLG (Kaldi's mkgraph.sh + decode.sh)
    input: f"{MONO}/.done", lambda w: feats(w.s), lambda w: f"{decode_lang(w)}/.done"
    output: f"{EXP}/decode_{{s}}_mono/.decode.done"
    params: lang=decode_lang, graph=lambda w: f"{MONO}/graph" + decode_lang(w)[len("data/lang"):]
    shell: "{PY} -m steps.decode_gmm --config {CONFIG} --model {MONO}/final.mdl --lang-dir {params.lang} --feats data/fbank/{wildcards.s}/feats.scp --graph-dir {params.graph} --out-dir {EXP}/decode_{wildcards.s}_mono"


rule score:  # stage 6
    input: f"{EXP}/decode_{{s}}_{{m}}/.decode.done"
    output: f"{EXP}/decode_{{s}}_{{m}}/wer.json"
    shell: "{PY} -m steps.score --ref data/{wildcards.s}/text --hyp {EXP}/decode_{wildcards.s}_{wildcards.m}/hyp.txt --out-dir {EXP}/decode_{wildcards.s}_{wildcards.m}"


rule results:
    input: DECODES
    output: f"{EXP}/RESULTS.md"
    shell: "{PY} -m steps.make_results --exp-dir {EXP}"


rule export_mobile:  # stage 7: low-rank + pruning with fine-tuning, ONNX fp32/int8, sherpa-onnx bundle
    input: f"{EXP}/.train.done", "data/fbank/dev/.done", "data/lang/.done"
    output: f"{EXP}/mobile/.export.done"
    threads: workflow.cores
    shell: "{PY} -m steps.export_mobile --config {CONFIG} --model {EXP}/final.pt --data-dir data --feats-dir data/fbank --lang-dir data/lang --out-dir {EXP}/mobile"


rule mobile:
    input: f"{EXP}/mobile/.export.done"
