"""The recipe pipeline, declared once: every stage's steps, their commands, inputs and outputs.

Both ways of running a recipe read this module: ``recipes/<corpus>/run.sh --stage N --stop-stage M`` runs the steps
of stages N..M in order (``python -m steps.plan --run``), and the ``Snakefile`` turns every step into a rule whose
inputs and outputs make the DAG (``snakemake --cores all train``). A new stage or step is added here, in
:func:`plan`, and nowhere else.

=====  ==============================================================================================================
stage  steps (``python -m ...``; every step skips work it finds finished)
=====  ==============================================================================================================
1      ``local.<data.corpus>`` (corpus-specific data preparation), ``steps.validate_data_dir`` per set
2      ``steps.compute_fbank`` per set, ``steps.compute_cmvn`` (global; per speaker with ``features.cmvn: speaker``)
3      ``steps.prepare_lang`` (``data/lang``, and the lang dir of each eval set with its own grammar or words)
4      with ``train.init: ce``: ``steps.train_mono``, ``steps.align``, ``steps.train_ce``; then ``steps.train``
       (``steps.train_dist`` under torchrun for several learners)
5      ``steps.compute_logprobs`` per eval set, ``steps.decode`` per search (``steps.decode_gmm`` for ``mono``)
6      ``steps.score`` per search, ``steps.make_results``
7      ``steps.export_mobile`` (unidirectional models only)
=====  ==============================================================================================================

Paths are those of a recipe run: ``data`` (Kaldi data dirs, ``fbank/``, ``lang/``), ``exp`` (the experiment); the
GMM system, when there is one, beside it (``<dirname exp>/mono``, ``mono_ali``) and the cross-entropy model in
``<exp>_ce``. This module only builds commands; it runs nothing.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from asrlib.config import RecipeConfig, lm_texts, set_decode_methods, set_lang_dir

STAGES = range(1, 8)


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
        words = [w if "$" in w else shlex.quote(w) for w in self.argv(python)]  # $VARS: expanded by the shell
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
    slurm: bool = False  # the Snakefile: training as the config's cluster section says (srun over its nodes)


def mono_dir(exp: str) -> str:
    return os.path.join(os.path.dirname(exp) or ".", "mono")


def train_launch(cfg: RecipeConfig, lay: Layout, python: str) -> List[str]:
    """How stage 4 starts ``steps.train``: plainly, or under torchrun through ``steps.train_dist`` (with the
    learners of ``lay``, or with ``cfg.cluster``'s layout when ``lay.slurm``)."""
    if lay.slurm:
        cl = cfg.cluster
        if cl.nodes > 1:  # one torchrun per node (srun), c10d rendezvous on the job's first node
            return [
                *"srun --nodes=$SLURM_NNODES --ntasks-per-node=1 --kill-on-bad-exit=1".split(),
                python,
                "-m",
                "steps.train_dist",
                "--nnodes",
                "$SLURM_NNODES",
                "--num-learners",
                str(cl.learners_per_node),
                "--rdzv-id",
                "$SLURM_JOB_ID",
                "--max-restarts",
                str(cl.max_restarts),
                "--rdzv-endpoint",
                "$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1):29400",
                "--",
            ]
        if cl.learners_per_node > 1 or cl.max_restarts > 0:
            return [
                python,
                "-m",
                "steps.train_dist",
                "--num-learners",
                str(cl.learners_per_node),
                "--max-restarts",
                str(cl.max_restarts),
                "--",
            ]
        return []
    if lay.num_learners > 1 or lay.nnodes > 1 or lay.max_restarts > 0:
        return [
            python,
            "-m",
            "steps.train_dist",
            "--num-learners",
            str(lay.num_learners),
            "--nnodes",
            str(lay.nnodes),
            "--threads-per-learner",
            str(lay.threads_per_learner),
            *(["--rdzv-endpoint", lay.rdzv_endpoint] if lay.rdzv_endpoint else []),
            "--max-restarts",
            str(lay.max_restarts),
            "--",
        ]
    return []


def validation_vocab(cfg: RecipeConfig, data_set: str) -> str:
    """What stage 1's validation holds a set's words to: ``cmudict`` for the training set when CMUdict alone
    pronounces the words (phone units, no ``lang.lexicon``, no ``lang.g2p``: an utterance with another word could
    not be trained on), else ``none``. An eval set is scored whole: a word outside the vocabulary is an error of the
    recognizer, not a reason to drop the utterance."""
    cmudict_only = cfg.lang.units == "phone" and not cfg.lang.lexicon and not cfg.lang.g2p
    return "cmudict" if data_set == "train" and cmudict_only else "none"


def plan(cfg: RecipeConfig, lay: Layout, python: str = "python") -> List[Step]:
    """Every step of stages 1-7 for ``cfg`` laid out as ``lay``, in the order run.sh runs them."""
    d, e, c = lay.data, lay.exp, lay.config
    conf = ["--config", c, *[w for o in lay.overrides for w in ("--set", o)]]
    nj = str(lay.nj or cfg.features.nj)
    eval_sets = list(cfg.data.eval_sets)
    sets = list(dict.fromkeys(["train", "dev", *eval_sets]))  # dev: the training step logs its loss
    mono, ce = mono_dir(e), e + "_ce"
    ali = mono + "_ali"
    spk_cmn = cfg.features.cmvn == "speaker"
    lm_text = [str(p) for p in lm_texts(cfg.lang, d)]
    steps: List[Step] = []

    def feats(s: str) -> List[str]:  # what a reader of <data>/fbank/<s>/feats.scp needs
        return [f"{d}/fbank/{s}/.done"] + ([f"{d}/fbank/{s}/cmvn_spk.scp"] if spk_cmn and s != "train" else [])

    # 1: data
    if lay.prepare:
        steps.append(
            Step(
                "prepare_data",
                1,
                f"local.{cfg.data.corpus}",
                [
                    "--config",
                    c,
                    "--out-dir",
                    d,
                    "--nj",
                    nj,
                    *(["--corpus-dir", lay.corpus_dir] if lay.corpus_dir else []),
                ],
                outputs=[f"{d}/{s}/wav.scp" for s in sets]
                + [p for p in lm_text if not os.path.isabs(p) or p.startswith(d)],
            )
        )
    for s in sets:
        steps.append(
            Step(
                f"validate_{s}",
                1,
                "steps.validate_data_dir",
                [
                    "--data-dir",
                    f"{d}/{s}",
                    "--vocab",
                    validation_vocab(cfg, s),
                    "--sample-rate",
                    str(cfg.data.sample_rate),
                    "--min-duration",
                    str(cfg.data.min_duration),
                    "--max-duration",
                    str(cfg.data.max_duration),
                ],
                [f"{d}/{s}/wav.scp"],
                [f"{d}/{s}/.validated"],
            )
        )
    # 2: features
    for s in sets:
        steps.append(
            Step(
                f"fbank_{s}",
                2,
                "steps.compute_fbank",
                [*conf, "--data-dir", f"{d}/{s}", "--out-dir", f"{d}/fbank/{s}", "--nj", nj],
                [f"{d}/{s}/.validated"],
                [f"{d}/fbank/{s}/.done"],
                threads=int(nj),
            )
        )
        if spk_cmn and s != "train":  # per-speaker stats of every set; train's come with the global ones
            steps.append(
                Step(
                    f"spk_cmvn_{s}",
                    2,
                    "steps.compute_cmvn",
                    [
                        "--feats",
                        f"{d}/fbank/{s}/feats.scp",
                        "--utt2spk",
                        f"{d}/{s}/utt2spk",
                        "--out-dir",
                        f"{d}/fbank/{s}",
                        "--speaker-only",
                    ],
                    [f"{d}/fbank/{s}/.done"],
                    [f"{d}/fbank/{s}/cmvn_spk.scp"],
                )
            )
    mode = {"speaker": ["--utt2spk", f"{d}/train/utt2spk"], "utterance": ["--cmn", "utterance"]}
    steps.append(
        Step(
            "cmvn",
            2,
            "steps.compute_cmvn",
            [
                "--feats",
                f"{d}/fbank/train/feats.scp",
                "--out-dir",
                f"{d}/fbank/train",
                *mode.get(cfg.features.cmvn, []),
            ],
            [f"{d}/fbank/train/.done"],
            [f"{d}/fbank/train/cmvn.scp"] + ([f"{d}/fbank/train/cmvn_spk.scp"] if spk_cmn else []),
        )
    )
    # 3: lang dirs (data/lang; data/lang_<grammar> or data/lang_<set> for eval sets with their own G)
    lang = f"{d}/lang"
    steps.append(
        Step(
            "lang",
            3,
            "steps.prepare_lang",
            [*conf, "--text", f"{d}/train/text", "--lang-dir", lang],
            [f"{d}/train/.validated", *lm_text],
            [f"{lang}/.done"],
        )
    )
    set_langs: Dict[str, str] = {}
    for s in sorted(set(cfg.decode.set_grammars) | set(cfg.decode.set_words)):
        set_langs.setdefault(str(set_lang_dir(lang, cfg.decode, s)), s)
    for dir_, s in set_langs.items():
        if dir_ != lang:
            steps.append(
                Step(
                    f"lang_{os.path.basename(dir_)[len('lang_') :]}",
                    3,
                    "steps.prepare_lang",
                    [*conf, "--eval-set", s, "--text", f"{d}/train/text", "--lang-dir", dir_],
                    [f"{d}/train/.validated"],
                    [f"{dir_}/.done"],
                )
            )
    # 4: training (train.init: ce — GMM-HMM, alignments and a cross-entropy model first)
    feats_args = ["--data-dir", d, "--feats-dir", f"{d}/fbank", "--lang-dir", lang]
    init = []
    if cfg.train.init == "ce":
        steps.append(
            Step(
                "train_mono",
                4,
                "steps.train_mono",
                [*conf, *feats_args, "--exp-dir", mono, "--train-set", "train"],
                [f"{d}/fbank/train/cmvn.scp", f"{lang}/.done"],
                [f"{mono}/.done"],
            )
        )
        steps.append(
            Step(
                "align",
                4,
                "steps.align",
                [*conf, "--model", f"{mono}/final.mdl", *feats_args, "--out-dir", ali, "--sets", "train", "dev"],
                [f"{mono}/.done", *feats("dev")],
                [f"{ali}/train/.done", f"{ali}/dev/.done"],
            )
        )
        steps.append(
            Step(
                "train_ce",
                4,
                "steps.train_ce",
                [
                    *conf,
                    "--feats-dir",
                    f"{d}/fbank",
                    "--ali-dir",
                    ali,
                    "--exp-dir",
                    ce,
                    "--train-set",
                    "train",
                    "--dev-set",
                    "dev",
                ],
                [f"{ali}/train/.done", f"{ali}/dev/.done"],
                [f"{ce}/.train.done"],
                threads=None,
                training=True,
            )
        )
        init = ["--init-model", f"{ce}/final.pt"]
    cl = cfg.cluster
    res = {
        "nodes": cl.nodes,
        "tasks": cl.nodes,
        "cpus_per_task": cl.cpus_per_learner * cl.learners_per_node,
        "mem_mb": cl.train_mem_mb,
        "runtime": cl.train_runtime_min,
        **({"slurm_partition": cl.partition} if cl.partition else {}),
        **({"slurm_extra": f"'--gres=gpu:{cl.gpus_per_node}'"} if cl.gpus_per_node else {}),
    }
    steps.append(
        Step(
            "train_model",
            4,
            "steps.train",
            [*conf, *feats_args, "--exp-dir", e, "--train-set", "train", "--dev-set", "dev", *init],
            [f"{d}/fbank/train/cmvn.scp", *feats("dev"), f"{lang}/.done", *([f"{ce}/.train.done"] if init else [])],
            [f"{e}/.train.done"],
            threads=None,
            launch=train_launch(cfg, lay, python),
            training=True,
            resources=res,
        )
    )
    # 5-6: decoding and scoring of every eval set, each through its lang dir
    scores = []
    for s in eval_sets:
        steps.append(
            Step(
                f"logprobs_{s}",
                5,
                "steps.compute_logprobs",
                [
                    "--model",
                    f"{e}/final.pt",
                    "--feats",
                    f"{d}/fbank/{s}/feats.scp",
                    "--out-dir",
                    f"{e}/logprobs_{s}",
                    "--num-threads",
                    str(cfg.decode.num_threads),
                    "--device",
                    cfg.train.device,
                ],
                [f"{e}/.train.done", *feats(s)],
                [f"{e}/logprobs_{s}/.done"],
            )
        )
        set_lang = str(set_lang_dir(lang, cfg.decode, s))
        for m in set_decode_methods(cfg, s):
            out = f"{e}/decode_{s}_{m}"
            if m == "mono":  # the GMM-HMM through its HCLG (Kaldi's mkgraph.sh + decode.sh)
                steps.append(
                    Step(
                        f"decode_{s}_{m}",
                        5,
                        "steps.decode_gmm",
                        [
                            *conf,
                            "--model",
                            f"{mono}/final.mdl",
                            "--lang-dir",
                            set_lang,
                            "--feats",
                            f"{d}/fbank/{s}/feats.scp",
                            "--graph-dir",
                            f"{mono}/graph{set_lang[len(lang) :]}",
                            "--out-dir",
                            out,
                        ],
                        [f"{mono}/.done", *feats(s), f"{set_lang}/.done"],
                        [f"{out}/.decode.done"],
                    )
                )
            else:
                steps.append(
                    Step(
                        f"decode_{s}_{m}",
                        5,
                        "steps.decode",
                        [
                            *conf,
                            "--method",
                            m,
                            "--logprobs",
                            f"{e}/logprobs_{s}/logprobs.scp",
                            "--lang-dir",
                            set_lang,
                            "--out-dir",
                            out,
                        ],
                        [f"{e}/logprobs_{s}/.done", f"{set_lang}/.done"],
                        [f"{out}/.decode.done"],
                    )
                )
            scores.append(
                Step(
                    f"score_{s}_{m}",
                    6,
                    "steps.score",
                    ["--ref", f"{d}/{s}/text", "--hyp", f"{out}/hyp.txt", "--out-dir", out],
                    [f"{out}/.decode.done"],
                    [f"{out}/wer.json"],
                )
            )
    steps += scores
    steps.append(
        Step("results", 6, "steps.make_results", ["--exp-dir", e], [s.outputs[0] for s in scores], [f"{e}/RESULTS.md"])
    )
    # 7: mobile export
    if cfg.model.bidirectional:  # a BLSTM needs the whole utterance: no streaming on-device model to export
        steps.append(
            Step(
                "export_mobile",
                7,
                "",
                message=(
                    f"stage 7 (mobile export) skipped: {c} has a bidirectional model, which cannot stream on a device "
                    "(set model.bidirectional: false to get a mobile bundle)"
                ),
            )
        )
    else:
        steps.append(
            Step(
                "export_mobile",
                7,
                "steps.export_mobile",
                [
                    *conf,
                    "--model",
                    f"{e}/final.pt",
                    *feats_args,
                    "--out-dir",
                    f"{e}/mobile",
                    "--train-set",
                    "train",
                    "--dev-set",
                    "dev",
                ],
                [f"{e}/.train.done", f"{d}/fbank/dev/.done", f"{lang}/.done"],
                [f"{e}/mobile/.export.done"],
                threads=None,
                training=False,
            )
        )
    return steps
