"""Teacher-student training (train.distill, asrlib/train/distill.py): the KL term, the teacher's normalisation, the
checks on the teacher, and that a student trained on it moves toward the teacher and resumes exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from asrlib.config import DistillConfig, ModelConfig
from asrlib.errors import AsrError
from asrlib.models.lstm import build_model
from asrlib.models.saved import save_model
from asrlib.train.distill import DistillCriterion, frame_kl, make_criterion, normalisation_shift
from tests.helpers import final_params, make_toy_ctc_setup, toy_config_yaml, train_step


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_toy_ctc_setup(tmp_path_factory.mktemp("distill"), {"train": 60, "dev": 10})


@pytest.fixture(scope="module")
def teacher(setup, tmp_path_factory):
    """A bidirectional toy model trained with plain CTC: the teacher."""
    root = tmp_path_factory.mktemp("teacher")
    cfg = toy_config_yaml(root / "c.yaml", epochs=6, spec_augment=False)
    r = train_step(setup, cfg, root / "exp", "--set", "model.bidirectional=true")
    assert r.returncode == 0, r.stderr
    return root / "exp" / "final.pt"


def _log_probs(n=2, t=7, v=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, t, v, generator=g).log_softmax(-1)


def test_frame_kl_is_the_kl_divergence_over_real_frames():
    p, q = _log_probs(seed=0), _log_probs(seed=1)
    lengths = torch.tensor([7, 4])
    assert float(frame_kl(p, p, lengths, 1.0)) == pytest.approx(0.0, abs=1e-6)
    want = sum(
        torch.nn.functional.kl_div(q[i, :n], p[i, :n], log_target=True, reduction="sum") for i, n in enumerate([7, 4])
    )
    assert float(frame_kl(p, q, lengths, 1.0)) == pytest.approx(float(want), rel=1e-5)
    q2 = q.clone()
    q2[1, 4:] = _log_probs(1, 3, 5, seed=2)  # padding frames changed: the same sum
    assert float(frame_kl(p, q2, lengths, 1.0)) == pytest.approx(float(frame_kl(p, q, lengths, 1.0)))
    # T = 2: the softened distributions' KL times 4
    soft = lambda x: (x / 2).log_softmax(-1)  # noqa: E731
    want2 = 4 * sum(
        torch.nn.functional.kl_div(soft(q)[i, :n], soft(p)[i, :n], log_target=True, reduction="sum")
        for i, n in enumerate([7, 4])
    )
    assert float(frame_kl(p, q, lengths, 2.0)) == pytest.approx(float(want2), rel=1e-5)


def test_the_batch_is_renormalised_for_the_teacher():
    rng = np.random.default_rng(0)
    x = rng.normal(3, 2, size=(50, 6))
    sm, si = rng.normal(size=6), rng.uniform(0.5, 2, size=6)
    tm, ti = rng.normal(size=6), rng.uniform(0.5, 2, size=6)
    scale, offset = normalisation_shift(sm, si, tm, ti)
    z_student = torch.tensor((x - sm) * si, dtype=torch.float32)
    assert np.allclose((z_student * scale + offset).numpy(), (x - tm) * ti, atol=1e-4)
    assert normalisation_shift(sm, si, sm.copy(), si.copy()) is None


def test_a_teacher_that_cannot_teach_is_refused_by_name(tmp_path):
    cfg = ModelConfig(num_layers=1, hidden_size=8, stack=3)
    path = tmp_path / "other.pt"
    save_model(path, build_model(20, 9, cfg), np.zeros(20), np.ones(20))
    with pytest.raises(AsrError, match=r"other\.pt cannot teach.*vocabulary 9 \(the student's: 5\)"):
        make_criterion(DistillConfig(teacher=str(path)), "global", 20, 5, 3, np.zeros(20), np.ones(20))
    with pytest.raises(AsrError, match="frame stacking 3"):
        make_criterion(DistillConfig(teacher=str(path)), "global", 20, 9, 4, np.zeros(20), np.ones(20))
    with pytest.raises(AsrError, match="missing.pt does not exist"):
        missing = DistillConfig(teacher=str(tmp_path / "missing.pt"))
        make_criterion(missing, "global", 20, 9, 3, np.zeros(20), np.ones(20))
    with pytest.raises(AsrError, match="weight"):
        make_criterion(DistillConfig(teacher=str(path), weight=1.5), "global", 20, 9, 3, np.zeros(20), np.ones(20))
    assert make_criterion(DistillConfig(), "global", 20, 9, 3, np.zeros(20), np.ones(20)).name == "ctc"


def test_the_teacher_stays_frozen_and_in_eval_mode():
    cfg = ModelConfig(num_layers=1, hidden_size=8, stack=1, dropout=0.5)
    teacher, student = build_model(4, 5, cfg), build_model(4, 5, cfg)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    crit = DistillCriterion(teacher, 0.5, 2.0)
    teacher.train()  # what a careless caller might do: the criterion runs it in eval mode anyway
    batch = {
        "feats": torch.randn(2, 6, 4),
        "feat_lens": torch.tensor([6, 5]),
        "targets": torch.tensor([1, 2, 3]),
        "target_lens": torch.tensor([2, 1]),
    }
    a = crit._teacher_log_probs(batch["feats"], batch["feat_lens"])
    b = crit._teacher_log_probs(batch["feats"], batch["feat_lens"])
    assert torch.equal(a, b)  # no dropout
    loss, _, frames = crit.loss(student, batch)
    loss.backward()
    assert frames == 11
    assert all(p.grad is None for p in teacher.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in student.parameters())
    assert all(torch.equal(before[k], v) for k, v in teacher.state_dict().items())


def _dev_kl(exp):
    return [m["kl"] for m in json.loads((exp / "metrics.json").read_text()) if m["kind"] == "dev"]


def test_a_distilled_student_comes_closer_to_its_teacher(setup, teacher, tmp_path):
    """The same unidirectional student, trained with only the KL term (w = 1) and with only CTC (w = 0, the KL still
    measured): the first ends far closer to the teacher's posteriors."""
    cfg = toy_config_yaml(tmp_path / "c.yaml", epochs=4)
    runs = {}
    for w in (0.0, 1.0):
        exp = tmp_path / f"w{w}"
        kd = ("--set", f"train.distill.teacher={teacher}", "--set", f"train.distill.weight={w}")
        r = train_step(setup, cfg, exp, *kd)
        assert r.returncode == 0, r.stderr
        runs[w] = _dev_kl(exp)
    assert runs[1.0][-1] < runs[1.0][0]
    assert runs[1.0][-1] < 0.5 * runs[0.0][-1], runs


def test_a_killed_distillation_resumes_exactly(setup, teacher, tmp_path):
    cfg = toy_config_yaml(tmp_path / "c.yaml", batch_seconds=4.0)
    kd = ("--set", f"train.distill.teacher={teacher}", "--set", "train.distill.temperature=2")
    ref = train_step(setup, cfg, tmp_path / "ref", *kd)
    assert ref.returncode == 0, ref.stderr
    killed = train_step(setup, cfg, tmp_path / "res", *kd, "--set", "train.kill_after_steps=4")
    assert killed.returncode == -9, killed.stderr
    resumed = train_step(setup, cfg, tmp_path / "res", *kd)
    assert resumed.returncode == 0 and "resumed from" in resumed.stderr, resumed.stderr
    a, b = final_params(tmp_path / "ref" / "final.pt"), final_params(tmp_path / "res" / "final.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    plain = train_step(setup, cfg, tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    c = final_params(tmp_path / "plain" / "final.pt")
    assert any(not torch.equal(a[k], c[k]) for k in a)  # the teacher reached the gradients
