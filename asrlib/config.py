"""Recipe configuration: YAML files checked against typed dataclasses.

An unknown key or a value of the wrong type is an :class:`AsrError` that names the file, the key and lists the
valid keys, so a typo in a recipe config never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import yaml

from asrlib.errors import AsrError


@dataclass
class DataConfig:
    # stage 1 runs `python -m local.<corpus>` (digits, yesno, fsdd, digits_fsdd, librispeech, ...)
    corpus: str = "digits"
    size: float = 1.0  # scales the default utterance counts (3000/300/300)
    train_scale: float = 1.0  # the training set alone is scaled by this too (train = 3000 x size x train_scale)
    seed: int = 0  # seeds corpus preparation (the synthetic corpora's texts, voices, noise)
    noise_fraction: float = 0.3  # synthetic corpora: share of utterances with added noise at 10-30 dB SNR
    train_flite_share: float = 0.25  # digits: share of the training set spoken by flite voices (dev/test: 0.25)
    # digits: the pitch/formant shifts (cents, sox pitch; 0 = as it is) each training flite voice is spoken through
    train_flite_shifts: List[int] = field(default_factory=lambda: [0, -250, 250, 500])
    # digits: a training flite utterance's mean F0 as multiples of its voice's usual one (dev/test: 0.85-1.2)
    train_flite_f0: List[float] = field(default_factory=lambda: [0.85, 1.2])
    sample_rate: int = 16000  # Hz: audio of another rate is refused by validation or resampled where a stage says so
    min_duration: float = 0.3  # shorter audio is excluded (listed in excluded.txt)
    max_duration: float = 30.0  # longer audio is excluded (memory budget)
    # Real corpora (stage 1 runs `python -m local.<corpus>`):
    corpus_dir: str = ""  # where the corpus lies; relative paths are relative to the config file's folder
    download_url: str = ""  # fetched into <data>/download when corpus_dir holds no corpus ("" = never download)
    subsets: List[str] = field(default_factory=list)  # corpus parts to prepare (e.g. LibriSpeech train-clean-100)
    speed_perturb: List[float] = field(default_factory=list)  # e.g. [0.9, 1.0, 1.1]: train set perturbed (Kaldi sp)
    eval_sets: List[str] = field(default_factory=lambda: ["dev", "test"])  # sets decoded and scored
    mix_weights: List[float] = field(default_factory=list)  # multi-corpus train sets: sampling weight per corpus
    # local.pooled: the corpora pooled into one training set and their folders ({an4: DIR, speechocean762: DIR};
    # relative folders are relative to the config file), each prepared by its own local.<name>
    pool: Dict[str, str] = field(default_factory=dict)
    level_db: float = 0.0  # < 0: scale every recording to this RMS level in dBFS in data prep (0 = keep levels)
    # local.kaldi_import: run the `cmd |` entries of an imported wav.scp (they run any program the file names; off:
    # such an entry is an error naming its line)
    allow_pipes: bool = False
    # a corpus' train/test convention where it has several ("" = its default), e.g. yesno: lhotse (even/odd
    # positions) | kaldi (sorted halves, egs/yesno)
    split: str = ""
    # an4: training speakers held out as the dev set ([] = 5 spread over the sorted speaker list)
    dev_speakers: List[str] = field(default_factory=list)
    max_speakers: int = 0  # an4: keep only the first N speakers (sorted) of each set; 0 = all (tiny test runs)


@dataclass
class FeatureConfig:
    num_mel_bins: int = 80  # log mel filterbank channels (the network's input dimension)
    nj: int = 2  # parallel feature-extraction jobs
    dither: float = 0.0  # fbank dither (0 = off; seeded per utterance when on)
    # store features as Kaldi compressed matrices (copy-feats --compress=true: about 0.26 of float32's bytes, WER
    # unchanged on digits: docs/data.md); false: float32 archives
    compress: bool = True
    # global: one mean/variance from the training set, folded into the model. speaker: Kaldi's default for
    # GMM and nnet recipes (compute-cmvn-stats --spk2utt + apply-cmvn --utt2spk, means only): every set's features
    # minus the mean of their speaker (over all of that speaker's utterances in the set, test speakers included:
    # unsupervised, like Kaldi), then the global normalisation on top. utterance: each recording minus its own mean
    # (ESPnet's utterance_mvn, means only), then the global one. online: the global one, then the causal running
    # mean (Kaldi's apply-cmvn-online; asrlib.features.cmvn.online_cmn), which starts from the training mean with
    # the weight of online_prior_frames frames; the only local normalisation a streaming model can apply, and with
    # global the one that exports to mobile.
    cmvn: str = "global"
    # cmvn online: weight, in frames, of the training mean the running mean starts from
    online_prior_frames: float = 50.0


@dataclass
class LangConfig:
    # digit_loop | one_word (isolated words: exactly one per utterance) | words_N (known length: exactly N words,
    # TIDIGITS' known-length condition) | arpa
    grammar: str = "digit_loop"
    arpa: Optional[str] = None  # path to an ARPA LM when grammar == arpa
    ngram_order: int = 3  # order of the n-gram estimated for grammar arpa
    # grammar == arpa without an arpa: steps.prepare_lang estimates <lang_dir>/lm_<order>gram.arpa (interpolated
    # modified Kneser-Ney, asrlib/lang/ngram.py) from these texts (one path or a list). A relative path names a file
    # of the data dir, the lang dir's parent (data/lang -> data/): "train/text" = the training transcripts.
    lm_text: Union[str, List[str], None] = None
    lm_text_has_utt_ids: bool = False  # the texts are Kaldi `text` files: the first column is an utterance id
    # pruning of the estimated n-gram (asrlib/lang/prune.py; steps.train_lm): count cut-offs per order (KenLM's
    # --prune: drop n-grams of order k seen at most cutoffs[k-1] times; the last value holds for higher orders, the
    # first must be 0), then relative-entropy pruning (Stolcke)
    lm_count_cutoffs: Optional[List[int]] = None
    lm_prune_target: int = 0  # entropy-prune the n-gram to this many n-grams in all orders (0 = no pruning)
    lm_toolkit: str = "ours"  # ours (pure Python) | kenlm (KenLM's lmplz, tools/install_kenlm.sh: text of any size)
    # an open vocabulary (asrlib/lang/open_vocab.py): "" = the transcripts' words (and lang.lexicon's) only |
    # wordfreq: also the lang.vocab_size most frequent English words of the wordfreq package that CMUdict pronounces
    vocab_source: str = ""
    vocab_size: int = 0  # lang.vocab_source: how many of its words join the vocabulary
    # lang.vocab_source: weight of its words' unigram (their frequencies) linearly interpolated into G's n-gram (0 =
    # the words join the vocabulary with only the n-gram's uniform share of the unigram mass)
    vocab_lm_weight: float = 0.0
    # the words G may emit (digit_loop, one_word, words_N): a task's closed vocabulary inside a larger lexicon (FSDD's
    # ten digits in a model trained with TIDIGITS' OH as well); None = every word of words.txt. Per eval set:
    # decode.set_words
    grammar_words: Optional[List[str]] = None
    # the CTC output units: phone (pronunciations from lang.lexicon, then CMUdict, then lang.g2p) | bpe (sentencepiece
    # pieces trained on the training transcripts, a word's lexicon entry is its segmentation) | char (a word's
    # letters after a word-start token); asrlib/lang/units.py, docs/lexicon-units.md
    units: str = "phone"
    # a pronunciation lexicon (WORD p1 p2 ..., one line per variant) tried before CMUdict; its words join the
    # vocabulary (Kaldi's data/local/dict). A relative path names a file of the data dir (the lang dir's parent)
    lexicon: Optional[str] = None
    # words without a pronunciation in lang.lexicon or CMUdict: "" = an error listing them; cmudict = a Phonetisaurus
    # G2P trained on CMUdict (once, into <data dir>/local/g2p_cmudict); else the folder of a model made by
    # asrlib.lang.g2p.train_g2p (relative: a folder of the data dir)
    g2p: str = ""
    bpe_vocab_size: int = 30  # units bpe: sentencepiece pieces (ESPnet's an4 recipe: 30)
    bpe_model_type: str = "unigram"  # units bpe: unigram | bpe


@dataclass
class ModelConfig:
    num_layers: int = 2  # LSTM layers
    hidden_size: int = 256  # LSTM cells per layer (and direction)
    proj_size: int = 128  # 0 = no recurrent projection
    peephole: bool = True  # peephole connections (the LSTM runs as its own cell instead of torch's fused kernel)
    bidirectional: bool = False  # BLSTM: needs whole utterances (no streaming export)
    stack: int = 3  # frames stacked (and subsampled) at the input
    dropout: float = 0.1  # between LSTM layers
    # > 0 with bidirectional: a latency-controlled BLSTM (asrlib/models/lc_blstm.py), chunks of this many output
    # frames, each chunk's backward direction restarted; 0 = a plain BLSTM
    chunk_frames: int = 0
    right_context: int = 0  # LC-BLSTM: output frames after each chunk that its backward direction hears
    # > 0 with a unidirectional model: a look-ahead convolution (DeepSpeech 2's row convolution) over this many
    # future output frames of the last LSTM layer (stage 7 exports it as a chunk model, as an LC-BLSTM's)
    lookahead: int = 0


@dataclass
class DistConfig:
    """``train.dist``: the distributed training algorithm and its knobs (see asrlib/parallel/ for what each does)."""

    algo: str = "local"  # local | sync | ma | bmuf | adpsgd | hadpsgd | asgd | ring | powersgd | diloco | topk
    period: int = 1  # K (ma) / tau (bmuf) / H (diloco): local steps between synchronisations
    # ma/bmuf/diloco: synchronous SGD (gradient all-reduce) for the first N steps; powersgd: torch's
    # start_powerSGD_iter, uncompressed all-reduce for the first max(2, N) steps; topk: whole-gradient all-reduces
    warmup_steps: int = 0
    block_momentum: float = -1.0  # bmuf eta; < 0 means 1 - 1/N
    block_lr: float = 1.0  # bmuf zeta
    nesterov: bool = True  # bmuf: next block starts from W + eta * Delta
    reset_local_momentum: bool = True  # bmuf: clear SGD's momentum buffer after each block sync
    overlap: bool = False  # bmuf: the block all-reduce runs while each learner takes its next local step
    adaptive: bool = False  # ma: adapt K to the measured divergence of the learners
    max_period: int = 32  # ma adaptive: upper bound for K
    div_low: float = 1e-4  # ma adaptive: relative divergence below which K doubles
    div_high: float = 1e-2  # ma adaptive: relative divergence above which K halves
    lr_scale: str = "none"  # ma: none | sqrt | linear: learning rate x f(N), ramped in over lr_ramp_steps
    lr_ramp_steps: int = 0  # ma lr_scale: steps over which the scaled learning rate is reached
    node_period: int = 0  # ma: > 0 averages within each node every node_period steps (hierarchical)
    local_world_size: int = 0  # learners per node (hadpsgd, hierarchical ma); 0 = torchrun's LOCAL_WORLD_SIZE
    backend: str = "auto"  # auto (nccl with CUDA, else gloo) | gloo | nccl
    timeout_s: int = 900  # process-group timeout (a lost learner fails the run after this)
    straggler_rank: int = -1  # benchmark aid: this learner sleeps straggler_sleep seconds per step
    straggler_sleep: float = 0.0  # seconds (benchmark aid, with straggler_rank)
    powersgd_rank: int = 1  # powersgd: rank of the low-rank gradient approximation (error feedback always on)
    powersgd_bucket_mb: float = 25.0  # powersgd: DDP gradient bucket size (one hook call per bucket)
    outer_lr: float = 0.7  # diloco: learning rate of the outer Nesterov step on the averaged pseudo-gradient
    outer_momentum: float = 0.9  # diloco: momentum of the outer step
    # diloco: bits per pseudo-gradient value sent: 32 (float32 all-reduce) | 8 | 4 (codes with a float32 scale per
    # outer_block values, reduce-scatter + all-gather; asrlib/parallel/quant.py)
    outer_bits: int = 32
    outer_block: int = 128  # diloco outer_bits 8 / 4: values per scale
    outer_error_feedback: bool = True  # diloco outer_bits 8 / 4: carry the rounding error into the next outer step
    # diloco: H = early_period (> 0) for the first early_steps steps after the warm-up, then period: frequent (cheap,
    # quantised) averaging while the learners leave CTC's blank plateau, where they drift apart most
    early_period: int = 0
    early_steps: int = 0  # diloco: how many steps (after the warm-up) use early_period
    outer_topk: float = 0.0  # diloco: > 0 sends only this share of the pseudo-gradient (+ residual), the largest
    # diloco outer_topk: > 0 also averages the learners' unsent rests whole (an all-reduce at topk_value_bits, what
    # that rounds off staying in each rest) after every outer_topk_dense_every-th outer step, so their models meet
    # again (besides the float32 average at the end of training)
    outer_topk_dense_every: int = 0
    outer_topk_dense_steps: int = 0  # diloco outer_topk_dense_every: > 0 only up to this trainer step
    topk_density: float = 0.005  # topk: share of each parameter's gradient (plus residual) sent a step
    topk_value_bits: int = 16  # topk, diloco outer_topk: 16 (bfloat16) | 32 bits per value sent
    # topk, diloco outer_topk: bits per position sent: 32 (in its parameter) | 16 (offset in a block of 65 536 values,
    # each block keeping its own share: 1.5x the values for the same bytes at 16-bit values)
    topk_index_bits: int = 32
    topk_ramp_steps: int = 0  # topk: after the warm-up, the density falls from 1 to topk_density over this many steps


@dataclass
class DistillConfig:
    """``train.distill``: teacher-student training (asrlib/train/distill.py, docs/streaming.md): the CTC stage also
    fits the frame posteriors of a trained model (e.g. the offline BLSTM) that sees the same batch."""

    # the teacher's final.pt (a path; relative: to the directory the step runs in, the recipe's for run.sh); "" = off.
    # Same units, feature dim and frame stacking as the student; its own CMVN is applied to the batch
    teacher: str = ""
    weight: float = 0.5  # w in (1 - w) * CTC + w * KL(teacher || student), both per output frame
    temperature: float = 1.0  # T: both posteriors softened as softmax(log p / T); the KL term scaled by T^2


@dataclass
class LoaderConfig:
    """``train.loader``: how batches reach the trainer (asrlib/train/loader.py): lhotse's DynamicBucketingSampler
    over the lazy cut manifest, then a torch DataLoader whose workers read the features and pad the batch."""

    num_workers: int = 2  # DataLoader worker processes (0 = read in the training process); more on a cluster node
    prefetch_factor: int = 2  # batches each worker prepares ahead
    pin_memory: bool = True  # page-locked host batches (only when CUDA is there)
    persistent_workers: bool = True  # keep the workers between epochs
    worker_nice: int = 19  # workers' CPU priority lowered by this (0-19): where cores are short, the step goes first


@dataclass
class TrainConfig:
    epochs: int = 10  # passes over the training set
    batch_seconds: float = 60.0  # total audio per minibatch (lhotse's max_duration)
    num_buckets: int = 10  # duration buckets of the sampler (lhotse DynamicBucketingSampler)
    bucket_buffer: int = 10000  # cuts the sampler holds across its buckets (its shuffling window; memory)
    bucket_bins_cuts: int = 2000  # cuts read to estimate the bucket boundaries
    optimizer: str = "adam"  # adam | sgd
    lr: float = 2e-3  # peak learning rate
    momentum: float = 0.9  # sgd only
    weight_decay: float = 0.0  # L2 weight decay
    scheduler: str = "warmup_cosine"  # warmup_cosine | constant
    warmup_steps: int = 100  # warmup_cosine: steps of linear warm-up to lr
    grad_clip: float = 5.0  # gradient norm clipping (0 = off)
    checkpoint_every: int = 100  # steps; a checkpoint is also written at each epoch end
    seed: int = 42  # seeds initialisation, batch order, augmentation and dropout (resume restores the RNG states)
    num_threads: int = 2  # torch threads per training process
    # where every stage that runs the network runs it: auto (cuda:LOCAL_RANK when torch sees CUDA, else cpu) | cpu |
    # cuda | cuda:N (asrlib/models/device.py; docs/gpus.md)
    device: str = "auto"
    # training arithmetic: auto (bf16 on CUDA, fp32 on the CPU) | fp32 | bf16 | fp16 (autocast for the network, losses
    # in fp32, a GradScaler for fp16 kept in the checkpoint)
    precision: str = "auto"
    spec_augment: bool = True  # SpecAugment: time and frequency masks on the training features
    freq_warp: float = 0.0  # VTLP-like mel-axis stretch of ±freq_warp per utterance (with spec_augment)
    # ours (asrlib/train/augment.py) | lhotse (lhotse.dataset.SpecAugment with the same masks plus its time warp)
    spec_augment_impl: str = "ours"
    time_warp: int = 80  # spec_augment_impl lhotse: its time_warp_factor (0 = none)
    # where SpecAugment runs: trainer (the training process, on the device, from the checkpointed global RNG) | loader
    # (the DataLoader's workers, each batch's draws seeded by its place in the run: off the training step; with
    # noise_prob > 0 it stays in the trainer, whose noise goes in before the masks). docs/data.md: why trainer stays
    spec_augment_in: str = "trainer"
    # on-the-fly noise (asrlib/train/noise_aug.py): share of training utterances that get white/pink/babble noise
    # added in the log-mel domain at an SNR (dB) drawn uniformly from [noise_snr_min, noise_snr_max]
    noise_prob: float = 0.0
    noise_snr_min: float = 5.0  # dB (noise_prob, noise_cuts)
    noise_snr_max: float = 25.0  # dB (noise_prob, noise_cuts)
    # noise from a corpus mixed into the training cuts by lhotse (asrlib/train/noise_mix.py; CTC training): a folder
    # of audio files or a lhotse cut/recording manifest (e.g. MUSAN's noise from `lhotse prepare musan`), mixed into a
    # noise_cuts_prob share of the cuts at an SNR from [noise_snr_min, noise_snr_max]; features computed on the fly
    noise_cuts: str = ""
    noise_cuts_prob: float = 0.5  # share of the training cuts that get noise from noise_cuts
    # CTC training: the share of batches whose cuts are joined, in runs of concat_max (lhotse Cut.append,
    # asrlib/train/concat.py), so the network learns utterances one after another as in a long recording
    # (docs/long-recordings.md); a batch is joined whole, so it pads no more than before; 0 = off. Dev: not joined
    concat_prob: float = 0.0
    concat_max: int = 2  # most cuts joined into one
    # CTC training: each training cut's start and end moved by up to this many seconds (uniform, whole frames; cut
    # short, or extended with copies of its own outermost frames; asrlib/train/jitter.py), so the network does not
    # learn the corpus's recording boundaries: a long recording's segments start and end elsewhere
    # (docs/long-recordings.md); 0 = off. Dev: not moved
    boundary_jitter: float = 0.0
    boundary_jitter_mode: str = "both"  # both: moves in [-J, J]; extend: [0, J] (frames only added); trim: [-J, 0]
    log_every: int = 10  # steps between training log lines (text log and TensorBoard)
    # testing aid: SIGKILL this process after N steps (0 = never; first torchrun attempt only)
    kill_after_steps: int = 0
    dist: DistConfig = field(default_factory=DistConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    # lazy speed perturbation of the training cuts, e.g. [0.9, 1.0, 1.1]: each cut also played at every factor != 1,
    # features computed on the fly in the loader workers, nothing written (data.speed_perturb instead writes
    # perturbed audio and features at stage 1, which GMM alignment needs)
    speed_perturb: List[float] = field(default_factory=list)
    init: str = "random"  # random | ce: LSTM layers start from the cross-entropy model (steps.train_ce)


# train settings that change how a run goes, not what it computes: left out of the training stage's fingerprint and
# of the resume check, so changing them neither retrains nor refuses to resume
TRAIN_RUN_ONLY = ("kill_after_steps", "loader", "device", "precision", "num_threads")  # how batches are read and
# where the network runs, not what it learns: a checkpoint written on a GPU resumes on the CPU and the other way
# round, one written with 1 thread resumes with 2; a finished model is not retrained for another thread count
RETIRED_TRAIN_KEYS = ("feature_cache_mb",)  # in checkpoints and .done markers of older versions: ignored
# what neither the resume check nor a finished model's .done marker compares: one name, so the two cannot drift apart
TRAIN_IGNORED_WHEN_COMPARING = TRAIN_RUN_ONLY + RETIRED_TRAIN_KEYS


@dataclass
class GmmConfig:
    """``gmm``: the monophone GMM-HMM system that aligns the data for cross-entropy training (asrlib/gmm/)."""

    feature_type: str = "mfcc_deltas"  # mfcc_deltas (MFCC from the fbank + deltas, 39-dim) | fbank
    num_ceps: int = 13  # MFCC cepstra (mfcc_deltas)
    sil_phone: str = "SIL"  # added to the phones of tokens.txt (optional between words, start and end)
    sil_prob: float = 0.5  # probability of optional silence after each word
    num_utts: int = 0  # train the monophones on this many random training utterances (0 = all)
    num_iters: int = 40  # EM passes (Kaldi train_mono.sh schedule)
    max_iter_inc: int = 30  # passes over which the Gaussian count grows
    total_gauss: int = 1000  # target number of Gaussians
    align_beam: float = 10.0  # final alignment (steps.align); training realigns with beam 6 / retry 24
    align_retry_beam: float = 40.0  # beam of the second try for an utterance that fails to align
    # steps.decode_gmm (Kaldi's decode.sh defaults): beam, max active states and acoustic scale (1/12)
    decode_beam: float = 13.0
    decode_max_active: int = 7000  # steps.decode_gmm: max active states
    decode_acwt: float = 0.083333  # steps.decode_gmm: acoustic scale (1/12)
    seed: int = 0  # seeds the training-utterance subset and the Gaussian splits


@dataclass
class CeConfig:
    """``ce``: frame-level cross-entropy training on GMM alignments (steps.train_ce); other settings from ``train``."""

    epochs: int = 4  # passes over the aligned training set
    lr: float = 2e-3  # peak learning rate


@dataclass
class DecodeConfig:
    beam: float = 12.0  # TLG search beam (log-probability units)
    max_active: int = 3000  # most active states per frame of the TLG search
    acoustic_scale: float = 1.0  # log-probabilities are multiplied by this before the search (also the bundle's)
    blank_penalty: float = 0.0  # subtracted from the blank's log-prob before the search (fewer deletions; bundle's too)
    # an utterance whose search ends in no final state of TLG (possible only with a grammar whose start is not
    # final: one_word, words_N) is searched once more with this beam (Kaldi's retry beam); 0 = never
    retry_beam: float = 40.0
    num_threads: int = 1  # torch threads of the log-posterior stage (steps.compute_logprobs)
    # stage 5 also runs the greedy no-LM baseline (decode_<set>_greedy). Its lexicon match composes the greedy
    # phones with every pronunciation: about 3 s an utterance with speechocean762's 20,000 words, against 6 ms for TLG
    greedy: bool = True
    # with train.init: ce, stage 5 also decodes with the monophone GMM-HMM (decode_<set>_mono): about 4 s an
    # utterance with speechocean762's 20,000-word HCLG on one core (its 2,500 test utterances: hours)
    mono: bool = True
    # long recordings (asr transcribe / Recognizer): cut at pauses, each segment decoded from a zero network state.
    # segment: auto (endpoint for a unidirectional model, blank for a bidirectional one or one with utterance CMN) |
    # endpoint (the streaming recogniser's endpointer, asrlib/decode/endpoint.py: a segment's end found by its own
    # network, the next start by the one that goes on listening) | blank (asrlib/decode/segment.py: pauses = runs
    # of the CTC blank in one pass over up to segment_max_seconds) | energy (runs of log mel energy near the local
    # floor) | none (one stream for the whole recording). bench/long_form.py measures them (docs/long-recordings.md)
    segment: str = "auto"
    segment_min_silence: float = 0.6  # seconds of non-speech that end a segment
    # a pause up to twice this is cut in its middle; a longer one keeps this much on each side and the rest is not
    # decoded (2.0: the best of 0.7-5.0 s on the digits dev set's 60 s recordings, docs/long-recordings.md)
    segment_pad: float = 2.0
    segment_max_seconds: float = 20.0  # a segment with no such pause is cut at its longest non-speech run by then
    segment_threshold_db: float = 6.0  # frames within this of the local energy floor (min over +-1 s) are quiet
    # seconds of the recording on each side of a segment that the network also runs over (its outputs there are
    # dropped): a bidirectional model keeps its context across a cut that fell inside an utterance
    segment_context: float = 0.0
    # eval sets searched with another grammar than lang.grammar, e.g. {test: one_word} for an isolated-word test set
    # beside connected-digit ones: stage 3 builds <lang>_<grammar> for each, stage 5 decodes the set with it
    set_grammars: Dict[str, str] = field(default_factory=dict)
    # eval sets whose G emits only these words (lang.grammar_words), e.g. {test: [ZERO, ..., NINE]}: stage 3 builds
    # <lang>_<set> for each (with the set's grammar: set_grammars, else lang.grammar), stage 5 decodes the set with it
    set_words: Dict[str, List[str]] = field(default_factory=dict)


@dataclass
class AdaptConfig:
    """``adapt``: unsupervised speaker adaptation against a first decoding pass (steps.adapt_speaker): a per-speaker
    affine transform of the network's input, the network frozen (asrlib/train/speaker_adapt.py)."""

    epochs: int = 30  # passes over the speaker's utterances
    lr: float = 1e-3  # Adam
    batch_frames: int = 100000  # padded input frames per step (a speaker with fewer: one step per pass)


@dataclass
class ExportConfig:
    """``export``: the mobile export stage (steps.export_mobile; see asrlib/export/)."""

    rank_ratio: float = 0.5  # low-rank: LSTM input matrices W_ih -> rank ratio*min(rows, cols) bottleneck; 0 = off
    sparsity: float = 0.5  # magnitude pruning: fraction of every weight matrix set to zero; 0 = off
    finetune_epochs: int = 1  # fine-tuning (same trainer) after the low-rank step and after pruning
    finetune_lr: float = 5e-4  # learning rate of the fine-tuning passes
    finetune_utts: int = 0  # fine-tune on a seeded random subset of this many training utterances (0 = all)
    per_channel: bool = False  # int8 weights quantized per output channel instead of per tensor
    fp16: bool = True  # also write an fp16-weight model (size/accuracy point)
    chunk_ms: int = 320  # streaming chunk length the bundle's README and the benchmark default to
    # a unidirectional model with a look-ahead (model.lookahead): output frames per call of its chunk model; 1 streams
    # at the model's own latency, each frame more adds a frame of latency and saves calls
    chunk_frames: int = 1
    # the bundle's network: pruned (compressed int8) | int8 (the trained model in int8) | auto: pruned unless its dev
    # WER is more than max_wer_loss (absolute %) above int8's
    bundle_model: str = "auto"
    max_wer_loss: float = 0.3  # bundle_model auto: the dev WER loss (absolute %) the pruned model may have


@dataclass
class ClusterConfig:
    """``cluster``: per-rule resources for Snakemake profiles (profiles/slurm, profiles/local) and the learner layout of
    the training rule (steps.train_dist: ``nodes`` x ``learners_per_node`` torchrun processes)."""

    nodes: int = 1  # machines for training (SLURM nodes); > 1 starts torchrun on each with c10d rendezvous
    learners_per_node: int = 1  # training processes per node (1 = plain steps.train when nodes == 1)
    max_restarts: int = 0  # torchrun restarts the job this often when a learner dies (resumes from checkpoint)
    gpus_per_node: int = 0  # requested as --gres=gpu:N; each learner then trains on its GPU (train.device auto)
    cpus_per_learner: int = 2  # CPUs per training process (SLURM --cpus-per-task = this x learners_per_node)
    train_mem_mb: int = 8000  # per node
    train_runtime_min: int = 720  # the other rules take the profile's default-resources
    partition: str = ""  # SLURM partition of the training job ("" = the profile's / cluster's default)


CMVN_MODES = ("global", "speaker", "utterance", "online")  # features.cmvn (asrlib.features.cmvn)
BUNDLE_MODELS = ("auto", "pruned", "int8")  # export.bundle_model (steps.export_mobile)
SEGMENT_METHODS = ("auto", "endpoint", "blank", "energy", "none")  # decode.segment (asrlib.decode.segment, .endpoint)
# the decode settings that say where a pause ends a segment: offline and in the streaming endpoint rules alike
SEGMENT_PAUSE_KEYS = ("segment_min_silence", "segment_pad", "segment_max_seconds")
UNITS = ("phone", "bpe", "char")  # lang.units (asrlib.lang.units)
GRAMMARS = ("digit_loop", "one_word", "words_N", "arpa")  # G of lang.grammar / decode.set_grammars (asrlib.lang.graphs)


def known_length(grammar: str) -> Optional[int]:
    """The word count N of a known-length grammar ``words_N`` (``one_word`` = ``words_1``); None for the others."""
    if grammar == "one_word":
        return 1
    m = re.fullmatch(r"words_([1-9][0-9]{0,2})", grammar)
    return int(m.group(1)) if m else None


def is_grammar(grammar: str) -> bool:
    """Whether ``grammar`` names a G that :func:`asrlib.lang.graphs.build_tlg` builds (``words_N``: N = 1..999)."""
    return grammar in GRAMMARS and grammar != "words_N" or known_length(grammar) is not None


@dataclass
class RecipeConfig:
    data: DataConfig = field(default_factory=DataConfig)
    features: FeatureConfig = field(default_factory=FeatureConfig)
    lang: LangConfig = field(default_factory=LangConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    gmm: GmmConfig = field(default_factory=GmmConfig)
    ce: CeConfig = field(default_factory=CeConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    adapt: AdaptConfig = field(default_factory=AdaptConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)


def _check_type(value: Any, tp: Any) -> Any:
    """Return ``value`` converted to ``tp`` when lossless (int → float), else raise TypeError."""
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        for arg in args:
            try:
                return _check_type(value, arg)
            except TypeError:
                pass
        names = " or ".join(str(getattr(a, "__name__", a)) for a in args)
        raise TypeError(f"expected {names}, got {type(value).__name__} {value!r}")
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is bool and isinstance(value, bool):
        return value
    if tp is str and isinstance(value, str):
        return value
    if origin in (list, List) and isinstance(value, list):
        return value
    if origin in (dict, Dict) and isinstance(value, dict):
        key_tp, val_tp = typing.get_args(tp) or (Any, Any)  # a bare dict: keys and values unchecked
        check = lambda x, t: x if t is Any else _check_type(x, t)  # noqa: E731
        return {check(k, key_tp): check(v, val_tp) for k, v in value.items()}
    raise TypeError(f"expected {getattr(tp, '__name__', tp)}, got {type(value).__name__} {value!r}")


def _build(cls, values: Dict[str, Any], where: str):
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise AsrError(f"{where}: expected a mapping, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, val in values.items():
        if key not in fields:
            raise AsrError(f"{where}: unknown key '{key}'. Valid keys: {', '.join(sorted(fields))}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _build(tp, val, f"{where}.{key}")
            continue
        try:
            kwargs[key] = _check_type(val, tp)
        except TypeError as e:
            raise AsrError(f"{where}.{key}: wrong type: {e}") from None
    return cls(**kwargs)


def load_config(path: str | Path, overrides: Optional[List[str]] = None) -> RecipeConfig:
    """Load a recipe YAML; ``overrides`` are ``section.key=value`` strings (value parsed as YAML)."""
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"config file {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as e:
        raise AsrError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except yaml.YAMLError as e:
        raise AsrError(f"{path}: not valid YAML: {e}") from None
    for ov in overrides or []:
        if "=" not in ov or "." not in ov.split("=", 1)[0]:
            raise AsrError(f"override '{ov}' must look like section.key=value")
        dotted, val = ov.split("=", 1)
        node = raw
        *parents, leaf = dotted.split(".")  # nested sections: train.dist.algo=bmuf
        for name in parents:
            node = node.setdefault(name, {})
            if node is None or not isinstance(node, dict):
                raise AsrError(f"override '{ov}': '{name}' is not a section")
        node[leaf] = yaml.safe_load(val)
    cfg = _build(RecipeConfig, raw, str(path))
    if cfg.features.cmvn not in CMVN_MODES:
        raise AsrError(f"{path}: features.cmvn must be one of {', '.join(CMVN_MODES)}, got {cfg.features.cmvn!r}")
    if cfg.features.cmvn == "online" and cfg.train.init == "ce":
        raise AsrError(
            f"{path}: features.cmvn online is for the neural models; the GMM-HMM that train.init: ce "
            f"aligns with has no online CMN: use global, speaker or utterance with train.init: ce"
        )
    if cfg.export.bundle_model not in BUNDLE_MODELS:
        raise AsrError(
            f"{path}: export.bundle_model must be one of {', '.join(BUNDLE_MODELS)}, got {cfg.export.bundle_model!r}"
        )
    check_segment_settings(cfg.decode, str(path))
    check_device_settings(cfg.train, str(path))
    if cfg.lang.units not in UNITS or cfg.lang.bpe_model_type not in ("unigram", "bpe"):
        raise AsrError(
            f"{path}: lang.units must be one of {', '.join(UNITS)} and lang.bpe_model_type unigram or bpe, got "
            f"{cfg.lang.units!r}, {cfg.lang.bpe_model_type!r}"
        )
    if cfg.features.online_prior_frames < 0:
        raise AsrError(f"{path}: features.online_prior_frames must be >= 0, got {cfg.features.online_prior_frames}")
    for where, g in [("lang.grammar", cfg.lang.grammar)] + [
        (f"decode.set_grammars.{k}", v) for k, v in cfg.decode.set_grammars.items()
    ]:
        if not is_grammar(g):  # said at load time, not when stage 3 or 5 reaches it
            raise AsrError(f"{path}: {where} must be one of {', '.join(GRAMMARS)} (N = 1..999), got {g!r}")
    for eval_set in [None, *cfg.decode.set_words]:
        lang = set_lang_config(cfg, eval_set)
        if lang.grammar_words is not None:
            where = "lang.grammar_words" if eval_set is None else f"decode.set_words.{eval_set}"
            if not lang.grammar_words or not all(isinstance(w, str) and w.strip() for w in lang.grammar_words):
                raise AsrError(f"{path}: {where} must be a non-empty list of words, got {lang.grammar_words!r}")
            if lang.grammar == "arpa":
                raise AsrError(
                    f"{path}: {where} restricts a word loop or a known-length grammar; the n-gram of "
                    f"grammar arpa has its own vocabulary"
                )
    return cfg


DEVICES = ("auto", "cpu", "cuda")  # and cuda:N
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def check_device_name(name: str, where: str = "train.device") -> None:
    base, _, index = str(name).partition(":")
    if base not in DEVICES or (index and (base != "cuda" or not index.isdigit())):
        raise AsrError(f"{where} must be auto, cpu, cuda or cuda:N, got {name!r}")


def check_device_settings(train: "TrainConfig", where: str) -> None:
    """``train.device`` and ``train.precision`` name a device and a precision (whether the device exists is asked
    when a stage resolves it: asrlib.models.device.resolve_device)."""
    check_device_name(train.device, f"{where}: train.device")
    if train.precision not in PRECISIONS:
        raise AsrError(f"{where}: train.precision must be one of {', '.join(PRECISIONS)}, got {train.precision!r}")


def check_segment_settings(decode: DecodeConfig, where: str) -> None:
    """The ``decode.segment*`` settings are usable (a clear error naming ``where`` otherwise)."""
    if decode.segment not in SEGMENT_METHODS:
        raise AsrError(f"{where}: decode.segment must be one of {', '.join(SEGMENT_METHODS)}, got {decode.segment!r}")
    for key in ("segment_min_silence", "segment_max_seconds"):
        if not getattr(decode, key) > 0:
            raise AsrError(f"{where}: decode.{key} must be > 0, got {getattr(decode, key)}")
    for key in ("segment_pad", "segment_context"):
        if not getattr(decode, key) >= 0:
            raise AsrError(f"{where}: decode.{key} must be >= 0, got {getattr(decode, key)}")
    if decode.segment_max_seconds <= 2 * decode.segment_min_silence:
        raise AsrError(
            f"{where}: decode.segment_max_seconds must be more than twice segment_min_silence, got "
            f"{decode.segment_max_seconds}"
        )
    if not decode.segment_threshold_db > 0:
        raise AsrError(f"{where}: decode.segment_threshold_db must be > 0, got {decode.segment_threshold_db}")


def lm_texts(lang: LangConfig, data_dir: str | Path) -> List[Path]:
    """The texts G's n-gram is estimated from: ``lang.lm_text`` as paths (relative ones under ``data_dir``), when
    ``lang.grammar`` is ``arpa`` and no ``lang.arpa`` is given; else ``[]``."""
    if lang.grammar != "arpa" or lang.arpa or not lang.lm_text:
        return []
    given = [lang.lm_text] if isinstance(lang.lm_text, str) else lang.lm_text
    if not all(isinstance(p, str) and p for p in given):
        raise AsrError(f"lang.lm_text must be a path or a list of paths, got {lang.lm_text!r}")
    paths = [Path(p).expanduser() for p in given]
    return [p if p.is_absolute() else Path(data_dir) / p for p in paths]


def set_lang_dir(lang_dir: str | Path, decode: DecodeConfig, eval_set: str) -> Path:
    """The lang dir whose TLG searches ``eval_set``: ``<lang_dir>_<set>`` when ``decode.set_words`` restricts that
    set's words, else ``<lang_dir>_<grammar>`` when ``decode.set_grammars`` names another grammar for it, else
    ``lang_dir`` itself (Kaldi's ``data/lang`` beside ``data/lang_test``)."""
    name = Path(lang_dir).name
    if eval_set in decode.set_words:
        return Path(lang_dir).with_name(f"{name}_{eval_set}")
    g = decode.set_grammars.get(eval_set)
    return Path(lang_dir) if not g else Path(lang_dir).with_name(f"{name}_{g}")


def set_decode_methods(cfg: RecipeConfig, eval_set: str) -> List[str]:
    """The searches stage 5 runs on ``eval_set`` (decode_<set>_<method>): ``greedy`` and ``tlg`` of the CTC model;
    ``isolated`` too when the set's grammar is one word (every candidate word's total CTC probability:
    asrlib.decode.isolated); ``mono``, the monophone GMM-HMM, with ``train.init: ce`` unless ``decode.mono: false``;
    no ``greedy`` with ``decode.greedy: false``."""
    methods = (["greedy"] if cfg.decode.greedy else []) + ["tlg"]
    if known_length(set_lang_config(cfg, eval_set).grammar) == 1:
        methods.append("isolated")
    return methods + (["mono"] if cfg.train.init == "ce" and cfg.decode.mono else [])


def set_lang_config(cfg: RecipeConfig, eval_set: Optional[str]) -> LangConfig:
    """The ``lang`` settings of the lang dir that searches ``eval_set`` (:func:`set_lang_dir`): ``lang`` with the
    set's grammar (``decode.set_grammars``) and words (``decode.set_words``, upper-cased like the lexicon's) in place
    of ``lang.grammar`` and ``lang.grammar_words``; ``eval_set`` None: ``lang`` itself."""
    lang = cfg.lang
    if eval_set is not None:
        lang = dataclasses.replace(
            lang,
            grammar=cfg.decode.set_grammars.get(eval_set, lang.grammar),
            grammar_words=cfg.decode.set_words.get(eval_set, lang.grammar_words),
        )
    if lang.grammar_words is not None and all(isinstance(w, str) for w in lang.grammar_words):
        lang = dataclasses.replace(lang, grammar_words=[w.strip().upper() for w in lang.grammar_words])
    return lang


def config_to_dict(cfg) -> Dict[str, Any]:
    return dataclasses.asdict(cfg)
