"""The training set's census (the pass over the metadata that gives the schedule's length) runs beside the training:
the first steps do not wait for it, the trained model is the one of a run that waited for it first, and a resumed run
takes it from its checkpoint instead of passing over the manifest again."""

import dataclasses
import time

import torch

from helpers import make_toy_ctc_setup, toy_config_yaml, toy_trainer
from asrlib.train.checkpoint import load_checkpoint
from asrlib.train.loader import CutData


def _slow_census(monkeypatch, seconds: float) -> None:
    original = CutData.census

    def slow(self, settings):  # runs in the census's forked process, which inherits the patch
        time.sleep(seconds)
        return original(self, settings)

    monkeypatch.setattr(CutData, "census", slow)


def test_training_starts_before_the_census_and_ends_as_if_it_came_first(tmp_path, monkeypatch):
    setup = make_toy_ctc_setup(tmp_path / "toy")
    cfg = toy_config_yaml(tmp_path / "c.yaml")  # warm-up 2 steps: from step 2 the schedule needs its length
    first = toy_trainer(setup, cfg, tmp_path / "first", torch.device("cpu"))
    counts = first.census.get()  # the census before any step, as before it ran beside the training
    first.fit()

    _slow_census(monkeypatch, 3.0)
    beside = toy_trainer(setup, cfg, tmp_path / "beside", torch.device("cpu"))
    seen = []
    step = beside.train_step

    def recording_step(batch):
        seen.append(beside.census.done())
        return step(batch)

    beside.train_step = recording_step
    beside.fit()
    assert seen[0] is False and seen[-1] is True  # the first step ran while the census was under way
    assert beside.census.counts == counts and beside.census.proc is None
    for k, v in first.model.state_dict().items():
        assert torch.equal(v, beside.model.state_dict()[k]), k


def test_a_resumed_run_takes_the_census_from_its_checkpoint(tmp_path, monkeypatch):
    setup = make_toy_ctc_setup(tmp_path / "toy")
    cfg = toy_config_yaml(tmp_path / "c.yaml")
    ref = toy_trainer(setup, cfg, tmp_path / "ref", torch.device("cpu"))
    ref.fit()
    stopped = toy_trainer(setup, cfg, tmp_path / "res", torch.device("cpu"))
    stopped.tcfg = dataclasses.replace(stopped.tcfg, epochs=1)  # a checkpoint after epoch 1 ...
    stopped.fit()
    ck = load_checkpoint(tmp_path / "res" / "checkpoints" / "latest.pt")
    assert tuple(ck["census"]) == ref.census.counts

    def no_pass(self, settings):
        raise RuntimeError("the resumed run passed over the manifest again")

    monkeypatch.setattr(CutData, "census", no_pass)
    resumed = toy_trainer(setup, cfg, tmp_path / "res", torch.device("cpu"))  # ... and the resume for epoch 2
    resumed.fit()
    assert resumed.census.counts == ref.census.counts
    for k, v in ref.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


def test_a_set_with_no_usable_cut_still_stops_training_with_the_census_error(tmp_path, monkeypatch):
    import pytest

    from asrlib.errors import AsrError

    setup = make_toy_ctc_setup(tmp_path / "toy")
    usable = CutData.usable
    # no training cut is usable (the census's process inherits the patch); the dev set's are
    monkeypatch.setattr(CutData, "usable", lambda self, cut: "fbank/train" not in self.name and usable(self, cut))
    monkeypatch.setattr(CutData, "feature_dim", lambda self: 20)  # (the toy set-up's, for building the model)
    t = toy_trainer(setup, toy_config_yaml(tmp_path / "c.yaml"), tmp_path / "exp", torch.device("cpu"))
    with pytest.raises(AsrError, match="no usable utterance in .*cuts"):
        t.fit()
    assert t.step == 0 and t.census.proc is None
