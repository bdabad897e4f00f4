"""The recipe pipeline, declared once: every stage's steps, their commands, inputs and outputs.

Both ways of running a recipe read this module: ``recipes/<corpus>/run.sh --stage N --stop-stage M`` runs the steps
of stages N..M in order (``python -m steps.plan --run``), and the ``Snakefile`` turns every step into a rule whose
inputs and outputs make the DAG (``snakemake --cores all train``). :func:`plan` runs the stage builders of
:data:`BUILDERS` in order (one small function per stage or group of steps); a new stage or step is added there, and
nowhere else.

=====  ==============================================================================================================
stage  steps (``python -m ...``; every step skips work it finds finished)
=====  ==============================================================================================================
1      ``local.<data.corpus>`` (corpus-specific data preparation), ``steps.validate_data_dir`` per set
2      ``steps.compute_fbank`` per set, ``steps.compute_cmvn`` (global; per speaker with ``features.cmvn: speaker``)
3      ``steps.prepare_lang`` (``data/lang``, and the lang dir of each eval set with its own grammar or words; with
       BPE or char units and a GMM system, ``data/lang_phone`` for the GMM)
4      with ``train.init: ce``: ``steps.train_mono``, ``steps.align``, ``steps.train_ce``; then ``steps.train``
       (``steps.train_dist`` under torchrun for several learners)
5      ``steps.compute_logprobs`` per eval set, ``steps.decode`` per search (``steps.decode_gmm`` for ``mono``)
6      ``steps.score`` per search, ``steps.make_results``
7      ``steps.export_mobile`` (unidirectional and latency-controlled models; not a whole-utterance BLSTM)
=====  ==============================================================================================================

Paths are those of a recipe run: ``data`` (Kaldi data dirs, ``fbank/``, ``lang/``), ``exp`` (the experiment); the
GMM system, when there is one, beside it (``<dirname exp>/mono``, ``mono_ali``) and the cross-entropy model in
``<exp>_ce``. This module only builds commands; it runs nothing.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from asrlib.config import RecipeConfig, lm_texts, set_decode_methods, set_lang_dir
from asrlib.errors import AsrError

STAGES = range(1, 8)
# a config value that names a file, a rule or a SLURM partition (a set, a corpus): no shell syntax, no path separator
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


class Shell(str):
    """A word the pipeline itself writes for the shell to expand (the job's ``$SLURM_JOB_ID``, ``$(hostname)``):
    the only words :meth:`Step.shell` leaves unquoted. Never made from a config value or an option."""


@dataclass
class Step:
    """One command of a stage (a Snakemake rule)."""

    name: str  # unique; the Snakemake rule name
    stage: int
    module: str  # python -m MODULE; "" for a stage that only says why it does nothing (``message``)
    args: List[str] = field(default_factory=list)
    inputs: List[str] = field(default_factory=list)  # files that must exist first
    outputs: List[str] = field(default_factory=list)  # files the step writes (its completion markers)
    threads: Optional[int] = 1  # None: all the cores Snakemake has
    launch: List[str] = field(default_factory=list)  # in place of `python -m MODULE` (training under torchrun)
    training: bool = False  # run.sh's --train-cmd applies (else --cmd)
    resources: Dict[str, object] = field(default_factory=dict)
    message: str = ""

    def argv(self, python: str) -> List[str]:
        return [*self.launch, *self.args] if self.launch else [python, "-m", self.module, *self.args]

    def display(self) -> str:
        """The command as run.sh logs it: ``MODULE ARGS`` (the launcher's words in place of the module)."""
        launch = self.launch[2:] if self.launch[1:2] == ["-m"] else self.launch
        words = [*launch, *self.args] if self.launch else [self.module, *self.args]
        return " ".join(shlex.quote(w) for w in words)

    def shell(self, python: str, prefix: str = "") -> str:
        """The command as one shell line (``prefix``: a launcher such as ``srun --ntasks=1``)."""
        words = [w if isinstance(w, Shell) else shlex.quote(w) for w in self.argv(python)]
        return (prefix + " " if prefix else "") + " ".join(words)


@dataclass
class Layout:
    """Where a run reads and writes, and how it launches training."""

    config: str
    data: str = "data"
    exp: str = "exp/lstm_ctc"
    nj: int = 0  # 0: features.nj of the config
    corpus_dir: str = ""  # stage 1: --corpus-dir for local.<corpus> ("" = the config's data.corpus_dir)
    overrides: Sequence[str] = ()  # --set SECTION.KEY=VALUE given to every step that reads the config
    prepare: bool = True  # stage 1 runs local.<corpus> (False: the data dirs exist, e.g. a fold of FSDD)
    # training launch: run.sh's options (several learners: steps.train_dist, i.e. torchrun standalone or c10d)
    num_learners: int = 1
    nnodes: int = 1
    threads_per_learner: int = 1
    rdzv_endpoint: str = ""
    max_restarts: int = 0
    slurm: bool = False  # the Snakefile: features as nj steps, training as the config's cluster section says


def mono_dir(exp: str) -> str:
    return os.path.join(os.path.dirname(exp) or ".", "mono")


def train_launch(cfg: RecipeConfig, lay: Layout, python: str) -> List[str]:
    """How stage 4 starts ``steps.train``: plainly, or under torchrun through ``steps.train_dist`` (with the
    learners of ``lay``, or with ``cfg.cluster``'s layout when ``lay.slurm``).

    Several SLURM nodes: the job's batch script (on its first node) runs ``srun``, one task per node, each a torchrun
    of ``learners_per_node`` learners; the c10d rendezvous is hosted on the batch script's node (``$(hostname)``,
    expanded there, before srun) under the job's id. Snakemake's SLURM job step strips the other ``SLURM_*``
    variables (SLURM_NNODES, SLURM_JOB_NODELIST) before it runs a rule, so the node count is the config's."""
    dist = [python, "-m", "steps.train_dist"]
    if lay.slurm:
        cl = cfg.cluster
        restarts = ["--max-restarts", str(cl.max_restarts)]
        if cl.nodes > 1:
            srun = ["srun", f"--nodes={cl.nodes}", "--ntasks-per-node=1"]
            srun += [f"--cpus-per-task={cl.cpus_per_learner * cl.learners_per_node}", "--kill-on-bad-exit=1"]
            nodes = ["--nnodes", str(cl.nodes), "--num-learners", str(cl.learners_per_node)]
            rdzv = ["--rdzv-id", Shell("$SLURM_JOB_ID"), *restarts, "--rdzv-endpoint", Shell("$(hostname):29400")]
            return [*srun, *dist, *nodes, *rdzv, "--"]
        if cl.learners_per_node > 1 or cl.max_restarts > 0:
            return [*dist, "--num-learners", str(cl.learners_per_node), *restarts, "--"]
        return []
    if lay.num_learners > 1 or lay.nnodes > 1 or lay.max_restarts > 0:
        learners = ["--num-learners", str(lay.num_learners), "--nnodes", str(lay.nnodes)]
        learners += ["--threads-per-learner", str(lay.threads_per_learner)]
        rdzv = ["--rdzv-endpoint", lay.rdzv_endpoint] if lay.rdzv_endpoint else []
        return [*dist, *learners, *rdzv, "--max-restarts", str(lay.max_restarts), "--"]
    return []


def validation_vocab(cfg: RecipeConfig, data_set: str) -> str:
    """What stage 1's validation holds a set's words to: ``cmudict`` for the training set when CMUdict alone
    pronounces the words (phone units, no ``lang.lexicon``, no ``lang.g2p``: an utterance with another word could
    not be trained on), else ``none``. An eval set is scored whole: a word outside the vocabulary is an error of the
    recognizer, not a reason to drop the utterance."""
    cmudict_only = cfg.lang.units == "phone" and not cfg.lang.lexicon and not cfg.lang.g2p
    return "cmudict" if data_set == "train" and cmudict_only else "none"


def check_names(cfg: RecipeConfig, where: str) -> None:
    """The config values that become file names, rule names or sbatch options are plain names (:data:`NAME`); one
    holding shell syntax (``$``, backticks, ``;``, spaces) or a ``/`` is refused here, before any command is built."""
    names = [("data.corpus", cfg.data.corpus)] + [("data.eval_sets", s) for s in cfg.data.eval_sets]
    names += [(f"decode.{k}", s) for k in ("set_grammars", "set_words") for s in getattr(cfg.decode, k)]
    names += [("cluster.partition", cfg.cluster.partition)] if cfg.cluster.partition else []
    for key, value in names:
        if not NAME.fullmatch(str(value)):
            raise AsrError(
                f"{where}: {key}: {value!r} is not a plain name (letters, digits, '_', '.', '+', '-'; it names files, "
                "Snakemake rules and SLURM options)"
            )


@dataclass
class Ctx:
    """What every stage builder reads: the config, the layout and the paths both give."""

    cfg: RecipeConfig
    lay: Layout
    python: str

    def __post_init__(self) -> None:
        cfg, lay = self.cfg, self.lay
        check_names(cfg, lay.config)
        self.d, self.e, self.c = lay.data, lay.exp, lay.config
        self.conf = ["--config", lay.config, *[w for o in lay.overrides for w in ("--set", o)]]
        self.nj = str(lay.nj or cfg.features.nj)
        self.eval_sets = list(cfg.data.eval_sets)
        self.sets = list(dict.fromkeys(["train", "dev", *self.eval_sets]))  # dev: the training step logs its loss
        self.mono = mono_dir(self.e)
        self.ali, self.ce = self.mono + "_ali", self.e + "_ce"
        self.spk_cmn = cfg.features.cmvn == "speaker"
        self.lm_text = [str(p) for p in lm_texts(cfg.lang, self.d)]
        self.lang = f"{self.d}/lang"
        # the GMM-HMM models phones whatever units the network outputs: with BPE or char units it has a lang of its own
        self.gmm_lang = self.lang if cfg.lang.units == "phone" else f"{self.d}/lang_phone"
        self.feats_args, self.gmm_args = self.dir_args(self.lang), self.dir_args(self.gmm_lang)

    def dir_args(self, lang: str) -> List[str]:
        """The data, feature and lang dir arguments of a step that reads the training data through ``lang``."""
        return ["--data-dir", self.d, "--feats-dir", f"{self.d}/fbank", "--lang-dir", lang]

    def feats(self, s: str) -> List[str]:
        """What a reader of ``<data>/fbank/<s>/feats.scp`` needs."""
        spk = [f"{self.d}/fbank/{s}/cmvn_spk.scp"] if self.spk_cmn and s != "train" else []
        return [f"{self.d}/fbank/{s}/.done", *spk]

    def methods(self, s: str) -> List[str]:
        return set_decode_methods(self.cfg, s)

    def searches(self) -> List[Tuple[str, str, str]]:
        """(eval set, search method, decode dir) of every decoding, in run order."""
        return [(s, m, f"{self.e}/decode_{s}_{m}") for s in self.eval_sets for m in self.methods(s)]


# --- stage 1: data


def prepare_data(x: Ctx) -> List[Step]:
    if not x.lay.prepare:
        return []
    corpus_dir = ["--corpus-dir", x.lay.corpus_dir] if x.lay.corpus_dir else []
    outputs = [f"{x.d}/{s}/wav.scp" for s in x.sets] + [
        p for p in x.lm_text if not os.path.isabs(p) or p.startswith(x.d)
    ]
    args = [*x.conf, "--out-dir", x.d, "--nj", x.nj, *corpus_dir]  # --set data.* reaches the corpus too
    return [Step("prepare_data", 1, f"local.{x.cfg.data.corpus}", args, outputs=outputs)]


def validate_data(x: Ctx) -> List[Step]:
    data = x.cfg.data
    limits = ["--sample-rate", str(data.sample_rate), "--min-duration", str(data.min_duration)]
    limits += ["--max-duration", str(data.max_duration)]
    return [
        Step(
            f"validate_{s}",
            1,
            "steps.validate_data_dir",
            ["--data-dir", f"{x.d}/{s}", "--vocab", validation_vocab(x.cfg, s), *limits],
            [f"{x.d}/{s}/wav.scp"],
            [f"{x.d}/{s}/.validated"],
        )
        for s in x.sets
    ]


# --- stage 2: features


def fbank(x: Ctx) -> List[Step]:
    """Filterbanks of every set, and the per-speaker CMVN stats of every set but train (whose come with the global).
    In the Snakefile (``lay.slurm``) each set's ``nj`` jobs are steps of their own (Kaldi's ``JOB=1:nj``, one SLURM
    job each), and ``fbank_<set>`` merges them; run.sh runs the ``nj`` jobs as processes of one step."""
    steps = []
    for s in x.sets:
        fb, validated = f"{x.d}/fbank/{s}", [f"{x.d}/{s}/.validated"]
        args = [*x.conf, "--data-dir", f"{x.d}/{s}", "--out-dir", fb, "--nj", x.nj]
        if x.lay.slurm:
            jobs = [
                Step(f"fbank_{s}_job{j}", 2, "steps.compute_fbank", [*args, "--job", str(j)], validated, [marker])
                for j, marker in ((j, f"{fb}/.job.{j}.json") for j in range(1, int(x.nj) + 1))
            ]
            steps += jobs
            inputs = validated + [job.outputs[0] for job in jobs]
            steps.append(Step(f"fbank_{s}", 2, "steps.compute_fbank", args, inputs, [f"{fb}/.done"]))
        else:
            steps.append(Step(f"fbank_{s}", 2, "steps.compute_fbank", args, validated, [f"{fb}/.done"], int(x.nj)))
        if x.spk_cmn and s != "train":
            args = ["--feats", f"{fb}/feats.scp", "--utt2spk", f"{x.d}/{s}/utt2spk", "--out-dir", fb, "--speaker-only"]
            steps.append(Step(f"spk_cmvn_{s}", 2, "steps.compute_cmvn", args, [f"{fb}/.done"], [f"{fb}/cmvn_spk.scp"]))
    return steps


def global_cmvn(x: Ctx) -> List[Step]:
    fb = f"{x.d}/fbank/train"
    mode = {"speaker": ["--utt2spk", f"{x.d}/train/utt2spk"], "utterance": ["--cmn", "utterance"]}
    args = ["--feats", f"{fb}/feats.scp", "--out-dir", fb, *mode.get(x.cfg.features.cmvn, [])]
    outputs = [f"{fb}/cmvn.scp"] + ([f"{fb}/cmvn_spk.scp"] if x.spk_cmn else [])
    return [Step("cmvn", 2, "steps.compute_cmvn", args, [f"{fb}/.done"], outputs)]


# --- stage 3: lang dirs (data/lang; data/lang_<grammar> or data/lang_<set> for eval sets with their own G)


def lang_dirs(x: Ctx) -> List[Step]:
    text = ["--text", f"{x.d}/train/text"]
    steps = [
        Step(
            "lang",
            3,
            "steps.prepare_lang",
            [*x.conf, *text, "--lang-dir", x.lang],
            [f"{x.d}/train/.validated", *x.lm_text],
            [f"{x.lang}/.done"],
        )
    ]
    if x.gmm_lang != x.lang and x.cfg.train.init == "ce":
        phone = [*x.conf, "--set", "lang.units=phone", *text, "--lang-dir", x.gmm_lang]
        steps.append(
            Step("lang_phone", 3, "steps.prepare_lang", phone, [f"{x.d}/train/.validated"], [f"{x.gmm_lang}/.done"])
        )
    set_langs: Dict[str, str] = {}
    for s in sorted(set(x.cfg.decode.set_grammars) | set(x.cfg.decode.set_words)):
        set_langs.setdefault(str(set_lang_dir(x.lang, x.cfg.decode, s)), s)
    for dir_, s in set_langs.items():
        if dir_ != x.lang:
            steps.append(
                Step(
                    f"lang_{os.path.basename(dir_)[len('lang_') :]}",
                    3,
                    "steps.prepare_lang",
                    [*x.conf, "--eval-set", s, *text, "--lang-dir", dir_],
                    [f"{x.d}/train/.validated"],
                    [f"{dir_}/.done"],
                )
            )
    return steps


# --- stage 4: training


def ce_init(x: Ctx) -> List[Step]:
    """``train.init: ce``: a GMM-HMM, its alignments and a cross-entropy model, which the CTC training starts from."""
    if x.cfg.train.init != "ce":
        return []
    sets = ["--train-set", "train"]
    ali_done = [f"{x.ali}/train/.done", f"{x.ali}/dev/.done"]
    return [
        Step(
            "train_mono",
            4,
            "steps.train_mono",
            [*x.conf, *x.gmm_args, "--exp-dir", x.mono, *sets],
            [f"{x.d}/fbank/train/cmvn.scp", f"{x.gmm_lang}/.done"],
            [f"{x.mono}/.done"],
        ),
        Step(
            "align",
            4,
            "steps.align",
            [*x.conf, "--model", f"{x.mono}/final.mdl", *x.gmm_args, "--out-dir", x.ali, "--sets", "train", "dev"],
            [f"{x.mono}/.done", *x.feats("dev")],
            ali_done,
        ),
        Step(
            "train_ce",
            4,
            "steps.train_ce",
            [*x.conf, "--feats-dir", f"{x.d}/fbank", "--ali-dir", x.ali, "--exp-dir", x.ce, *sets, "--dev-set", "dev"],
            ali_done,
            [f"{x.ce}/.train.done"],
            threads=None,
            training=True,
        ),
    ]


def train_resources(cfg: RecipeConfig) -> Dict[str, object]:
    """The training rule's Snakemake resources, from the config's ``cluster`` section."""
    cl = cfg.cluster
    return {
        "nodes": cl.nodes,
        "tasks": cl.nodes,
        "cpus_per_task": cl.cpus_per_learner * cl.learners_per_node,
        "mem_mb": cl.train_mem_mb,
        "runtime": cl.train_runtime_min,
        **({"slurm_partition": cl.partition} if cl.partition else {}),
        **({"slurm_extra": f"'--gres=gpu:{cl.gpus_per_node}'"} if cl.gpus_per_node else {}),
        # several nodes: Snakemake's SLURM job step runs the rule in the batch script itself (as for an MPI program),
        # not in a one-task step whose nested srun would wait for CPUs the step holds
        **({"mpi": "srun"} if cl.nodes > 1 else {}),
    }


def train_model(x: Ctx) -> List[Step]:
    ce = x.cfg.train.init == "ce"
    init = ["--init-model", f"{x.ce}/final.pt"] if ce else []
    return [
        Step(
            "train_model",
            4,
            "steps.train",
            [*x.conf, *x.feats_args, "--exp-dir", x.e, "--train-set", "train", "--dev-set", "dev", *init],
            [
                f"{x.d}/fbank/train/cmvn.scp",
                *x.feats("dev"),
                f"{x.lang}/.done",
                *([f"{x.ce}/.train.done"] if ce else []),
            ],
            [f"{x.e}/.train.done"],
            threads=None,
            launch=train_launch(x.cfg, x.lay, x.python),
            training=True,
            resources=train_resources(x.cfg),
        )
    ]


# --- stages 5-6: decoding and scoring of every eval set, each through its lang dir


def logprobs(x: Ctx, s: str) -> Step:
    """The network's log-probabilities of eval set ``s`` (what every search but ``mono`` reads)."""
    lp = f"{x.e}/logprobs_{s}"
    args = ["--model", f"{x.e}/final.pt", "--feats", f"{x.d}/fbank/{s}/feats.scp", "--out-dir", lp]
    args += ["--num-threads", str(x.cfg.decode.num_threads), "--device", x.cfg.train.device]
    return Step(
        f"logprobs_{s}", 5, "steps.compute_logprobs", args, [f"{x.e}/.train.done", *x.feats(s)], [f"{lp}/.done"]
    )


def search(x: Ctx, s: str, m: str) -> Step:
    """One search ``m`` over eval set ``s``, through the set's lang dir."""
    out, set_lang = f"{x.e}/decode_{s}_{m}", str(set_lang_dir(x.lang, x.cfg.decode, s))
    done = [f"{out}/.decode.done"]
    if m == "mono":  # the GMM-HMM through its HCLG (Kaldi's mkgraph.sh + decode.sh)
        graph = f"{x.mono}/graph{set_lang[len(x.lang) :]}"
        if set_lang != x.lang and x.gmm_lang != x.lang:
            raise AsrError(
                f"{x.c}: the GMM search of set {s} needs a phone lang dir with its own grammar, which lang.units "
                f"{x.cfg.lang.units} does not build; set decode.mono: false"
            )
        set_lang = x.gmm_lang if set_lang == x.lang else set_lang
        args = [*x.conf, "--model", f"{x.mono}/final.mdl", "--lang-dir", set_lang]
        args += ["--feats", f"{x.d}/fbank/{s}/feats.scp", "--graph-dir", graph, "--out-dir", out]
        return Step(
            f"decode_{s}_{m}", 5, "steps.decode_gmm", args, [f"{x.mono}/.done", *x.feats(s), f"{set_lang}/.done"], done
        )
    lp = f"{x.e}/logprobs_{s}"
    args = [*x.conf, "--method", m, "--logprobs", f"{lp}/logprobs.scp", "--lang-dir", set_lang, "--out-dir", out]
    return Step(f"decode_{s}_{m}", 5, "steps.decode", args, [f"{lp}/.done", f"{set_lang}/.done"], done)


def decode(x: Ctx) -> List[Step]:
    return [step for s in x.eval_sets for step in (logprobs(x, s), *[search(x, s, m) for m in x.methods(s)])]


def score(x: Ctx) -> List[Step]:
    return [
        Step(
            f"score_{s}_{m}",
            6,
            "steps.score",
            ["--ref", f"{x.d}/{s}/text", "--hyp", f"{out}/hyp.txt", "--out-dir", out],
            [f"{out}/.decode.done"],
            [f"{out}/wer.json"],
        )
        for s, m, out in x.searches()
    ]


def results(x: Ctx) -> List[Step]:
    scores = [f"{out}/wer.json" for _, _, out in x.searches()]
    return [Step("results", 6, "steps.make_results", ["--exp-dir", x.e], scores, [f"{x.e}/RESULTS.md"])]


# --- stage 7: mobile export


def export_mobile(x: Ctx) -> List[Step]:
    if x.cfg.model.bidirectional and x.cfg.model.chunk_frames <= 0:  # a BLSTM needs the whole utterance (an
        # LC-BLSTM streams, as a unidirectional one with a look-ahead: asrlib.export.lc_onnx)
        why = (
            f"stage 7 (mobile export) skipped: {x.c} has a bidirectional model, which cannot stream on a device "
            "(set model.bidirectional: false to get a mobile bundle)"
        )
        return [Step("export_mobile", 7, "", message=why)]
    args = [*x.conf, "--model", f"{x.e}/final.pt", *x.feats_args, "--out-dir", f"{x.e}/mobile"]
    args += ["--train-set", "train", "--dev-set", "dev"]
    inputs = [f"{x.e}/.train.done", f"{x.d}/fbank/dev/.done", f"{x.lang}/.done"]
    return [Step("export_mobile", 7, "steps.export_mobile", args, inputs, [f"{x.e}/mobile/.export.done"], threads=None)]


# Every stage's builders in run order; a new step goes into one of them (or a new builder here), nowhere else.
BUILDERS: List[Callable[[Ctx], List[Step]]] = [
    prepare_data,
    validate_data,
    fbank,
    global_cmvn,
    lang_dirs,
    ce_init,
    train_model,
    decode,
    score,
    results,
    export_mobile,
]


def plan(cfg: RecipeConfig, lay: Layout, python: str = "python") -> List[Step]:
    """Every step of stages 1-7 for ``cfg`` laid out as ``lay``, in the order run.sh runs them."""
    x = Ctx(cfg, lay, python)
    return [step for build in BUILDERS for step in build(x)]
