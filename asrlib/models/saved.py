"""A trained acoustic model as one self-contained file: weights, model config, feature dim, vocabulary and CMVN."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from asrlib.config import ModelConfig
from asrlib.features.cmvn import Cmvn, check_cmvn_mode
from asrlib.errors import AsrError
from asrlib.models.lstm import StackedLstmAcousticModel, build_model
from asrlib.io.torchfile import load_torch, save_torch

FORMAT_VERSION = 1


def trained_cmn(st: dict) -> str:
    """The mean normalisation a saved model's checkpoint dict says it was trained with before the global CMVN:
    ``""`` (none: features.cmvn global), ``speaker`` or ``utterance`` (:func:`check_cmvn_mode`)."""
    return check_cmvn_mode(st.get("info", {}).get("cmvn") or "global")


def trained_online_prior(st: dict) -> Optional[float]:
    """The prior weight of a model trained with ``features.cmvn: online`` (None for the other modes)."""
    return float(st["info"].get("online_prior_frames", 0.0)) if trained_cmn(st) == "online" else None


@dataclass
class SavedModel:
    model: StackedLstmAcousticModel
    cmvn_mean: np.ndarray
    cmvn_inv_std: np.ndarray
    # features.cmvn other than global: speaker or utterance: its inputs must be mean-normalised first
    # (asrlib.features.cmvn.open_features), the global mean and 1/std above apply after that; online: the model
    # applies the causal mean normalisation after the global one itself (online_prior: its prior weight)
    cmn: str = ""
    online_prior: Optional[float] = None

    @property
    def cmvn(self) -> Cmvn:
        """The normalisation this model applies to its (already mean-normalised, for speaker/utterance) input."""
        return Cmvn(
            np.asarray(self.cmvn_mean, np.float32), np.asarray(self.cmvn_inv_std, np.float32), self.online_prior
        )

    def normalise(self, feats: np.ndarray) -> np.ndarray:
        """A whole utterance's input frames (T, D) -> the network's input."""
        return self.cmvn.apply(np.asarray(feats, np.float32))

    def log_probs(self, feats: np.ndarray) -> np.ndarray:
        """Raw (un-normalised) fbank (T, D) → CTC log-probs (T // stack, V) as float32."""
        return self.log_probs_of_inputs(self.normalise(feats))

    @property
    def device(self) -> torch.device:
        """Where the network's weights are (the CPU for a network without any)."""
        t = next(itertools.chain(self.model.parameters(), self.model.buffers()), None)  # the first one only
        return t.device if t is not None else torch.device("cpu")

    def to(self, device: torch.device) -> "SavedModel":
        """Run the network on ``device`` (asrlib.models.device.resolve_device); inputs and outputs stay numpy."""
        self.model.to(device)
        return self

    @torch.no_grad()
    def log_probs_of_inputs(self, inputs: np.ndarray) -> np.ndarray:
        """Network-input frames (T, D) (:meth:`normalise`'s output, or a transform of it) → CTC log-probs, computed
        in fp32 on the model's device."""
        dev = self.device
        x = torch.from_numpy(np.asarray(inputs, np.float32)).unsqueeze(0).to(dev)
        logp, _ = self.model(x, torch.tensor([x.shape[1]], device=dev))
        return logp[0].cpu().numpy()


def save_model(
    path: Path,
    model: StackedLstmAcousticModel,
    cmvn_mean: np.ndarray,
    cmvn_inv_std: np.ndarray,
    info: Optional[dict] = None,
    extra: Optional[dict] = None,
) -> None:
    """Write the model file atomically; ``extra``: more top-level keys (e.g. a compressed model's structure)."""
    save_torch(
        Path(path),
        {
            "format_version": FORMAT_VERSION,
            "model": model.state_dict(),
            "model_config": dataclasses.asdict(model.cfg),
            "feat_dim": model.feat_dim,
            "vocab_size": model.vocab_size,
            "cmvn_mean": np.asarray(cmvn_mean, np.float32),
            "cmvn_inv_std": np.asarray(cmvn_inv_std, np.float32),
            **(extra or {}),
            "info": info or {},
        },
    )


def load_model(
    path: Path, restructure: Optional[Callable[[StackedLstmAcousticModel, dict], None]] = None
) -> SavedModel:
    """Read a model file; ``restructure(model, file dict)`` changes the built model's structure to the saved one
    before its weights are loaded (a compressed model's bottlenecks)."""
    path = Path(path)
    if not path.is_file():
        raise AsrError(f"model file {path} does not exist (has the train stage finished?)")
    st = load_torch(path)
    if st.get("format_version") != FORMAT_VERSION:
        raise AsrError(
            f"{path}: model format version {st.get('format_version')} is not supported "
            f"(this asrlib reads version {FORMAT_VERSION}); retrain or use a matching asrlib"
        )
    model = build_model(st["feat_dim"], st["vocab_size"], ModelConfig(**st["model_config"]))
    if restructure is not None:
        restructure(model, st)
    model.load_state_dict(st["model"])
    model.eval()
    mean, inv_std = (np.asarray(st[k], np.float32) for k in ("cmvn_mean", "cmvn_inv_std"))
    return SavedModel(model, mean, inv_std, trained_cmn(st), trained_online_prior(st))
