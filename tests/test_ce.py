"""Cross-entropy training on GMM alignments and CTC initialised from it (one trainer loop, two criteria)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import toy_dirs
from asrlib.cli import env_with_root
from asrlib.config import ModelConfig
from asrlib.errors import AsrError
from asrlib.io.tables import read_table, write_table
from asrlib.kaldi_io import read_int_vectors, write_int_vectors
from asrlib.models.lstm import build_model
from asrlib.models.saved import save_model
from asrlib.train.ce import CeCriterion, FrameTargets, init_from_ce, subsample_targets
from asrlib.train.loader import open_set
from test_gmm import gmm_toy_config, make_gmm_toy, run_mono_and_align


def test_targets_are_the_middle_frame_of_each_stack():
    assert subsample_targets(np.arange(10), 3).tolist() == [1, 4, 7]
    assert subsample_targets(np.arange(8), 2).tolist() == [1, 3, 5, 7]
    assert subsample_targets(np.arange(2), 3).tolist() == []


def test_ce_loss_and_frame_accuracy_are_masked_sums():
    torch.manual_seed(0)
    model = build_model(6, 5, ModelConfig(num_layers=1, hidden_size=8, proj_size=4, stack=3, dropout=0.0)).eval()
    feats = torch.randn(2, 12, 6)
    batch = {
        "feats": feats,
        "feat_lens": torch.tensor([12, 7]),
        "frame_targets": torch.tensor([[0, 1, 2, 3], [4, 0, -100, -100]]),
    }
    crit = CeCriterion(3)
    with torch.no_grad():
        loss, total, count = crit.loss(model, batch)
        logp, _ = model(feats, batch["feat_lens"])
    ref = -(logp[0, [0, 1, 2, 3], [0, 1, 2, 3]].sum() + logp[1, [0, 1], [4, 0]].sum())
    assert count == 6 and abs(total - float(ref)) < 1e-4 and abs(float(loss) - float(ref) / 6) < 1e-5
    ev = crit.evaluate(model, batch)
    best = logp.argmax(-1)
    correct = int((best[0] == torch.tensor([0, 1, 2, 3])).sum() + (best[1, :2] == torch.tensor([4, 0])).sum())
    assert ev["count"] == 6 and ev["frame_acc"] == correct


def test_init_from_ce_copies_all_but_the_output_layer(tmp_path):
    cfg = ModelConfig(num_layers=2, hidden_size=8, proj_size=4, peephole=True, stack=3)
    ce = build_model(6, 11, cfg)
    save_model(tmp_path / "ce.pt", ce, np.zeros(6), np.ones(6))
    torch.manual_seed(1)
    ctc = build_model(6, 5, cfg)
    out_before = ctc.output.weight.detach().clone()
    info = init_from_ce(ctc, tmp_path / "ce.pt")
    ce_sd, ctc_sd = ce.state_dict(), ctc.state_dict()
    for k in ce_sd:
        if not k.startswith("output."):
            assert torch.equal(ce_sd[k], ctc_sd[k]), k
    assert torch.equal(ctc.output.weight, out_before) and ctc.output.weight.shape == (5, 4)
    assert info["init_tensors"] == len([k for k in ce_sd if not k.startswith("output.")])
    other = build_model(6, 5, ModelConfig(num_layers=2, hidden_size=8, proj_size=4, peephole=False, stack=3))
    with pytest.raises(AsrError, match="another architecture"):
        init_from_ce(other, tmp_path / "ce.pt")
    with pytest.raises(AsrError, match="steps.train_ce"):
        init_from_ce(ctc, tmp_path / "missing.pt")


def test_dataset_lists_what_it_cannot_use(tmp_path):
    root, _ = make_gmm_toy(tmp_path / "toy", {"train": 6, "dev": 2})
    utts = [u for u, _ in read_table(root / "fbank" / "train" / "utt2num_frames")]
    n = dict(read_table(root / "fbank" / "train" / "utt2num_frames"))
    ali = tmp_path / "ali"
    good = [u for u in utts if u.startswith("spk")]
    items = [(u, np.zeros(int(n[u]), np.int32)) for u in good[:-1]] + [(good[-1], np.zeros(3, np.int32))]
    write_int_vectors(ali / "pdf.ark", items)
    write_table(ali / "excluded.txt", [("bad-oov", "OOV word(s) W9 (not in the lexicon)")])
    ds = open_set(
        root / "fbank" / "train",
        FrameTargets(ali, num_classes=4),
        root / "fbank" / "train" / "cmvn.scp",
        excluded_path=tmp_path / "excl.txt",
        data_dir=root / "data" / "train",
    )
    assert ds.stats()[0] == len(good) - 1
    ds.write_report()
    reasons = dict(read_table(tmp_path / "excl.txt"))
    assert "OOV word(s) W9" in reasons["bad-oov"] and "not in" in reasons["bad-short"]
    assert "alignment has 3 frames" in reasons[good[-1]]


def test_mono_align_ce_then_ctc_from_ce_end_to_end(tmp_path):
    """The whole path: GMM alignments -> CE (dev frame accuracy) -> CTC initialised from the CE model."""
    from steps import train, train_ce

    root, _ = make_gmm_toy(tmp_path / "toy", {"train": 60, "dev": 12})
    cfg = gmm_toy_config(root / "c.yaml")
    _, ali = run_mono_and_align(root, cfg)
    assert (
        train_ce.main(
            [
                "--config",
                str(cfg),
                "--feats-dir",
                str(root / "fbank"),
                "--ali-dir",
                str(ali),
                "--exp-dir",
                str(root / "exp" / "ce"),
            ]
        )
        == 0
    )
    dev = [m for m in json.loads((root / "exp" / "ce" / "metrics.json").read_text()) if m["kind"] == "dev"]
    assert len(dev) == 3 and dev[-1]["frame_acc"] > 0.6 and dev[-1]["loss"] < dev[0]["loss"]
    assert "frame_acc" in (root / "exp" / "ce" / "log" / "train.log").read_text()
    excl = dict(read_table(root / "exp" / "ce" / "excluded_train.txt"))
    assert "OOV" in excl["bad-oov"] and "too short" in excl["bad-short"]  # the aligner's reasons carried along
    common = [
        "--config",
        str(cfg),
        *toy_dirs(root),
    ]
    with pytest.raises(AsrError, match="--init-model"):
        train.main(common + ["--exp-dir", str(root / "exp" / "x"), "--set", "train.init=ce"])
    assert (
        train.main(
            common
            + [
                "--exp-dir",
                str(root / "exp" / "ctc"),
                "--set",
                "train.init=ce",
                "--init-model",
                str(root / "exp" / "ce" / "final.pt"),
            ]
        )
        == 0
    )
    info = torch.load(root / "exp" / "ctc" / "final.pt", weights_only=True)["info"]
    assert info["init"] == "ce" and info["init_tensors"] > 0 and info["final_dev_loss"] < 1.0
    assert read_int_vectors(ali / "dev" / "pdf.scp")


def test_recipe_stage_train_runs_gmm_and_ce_first_when_init_is_ce(tmp_path):
    """Stage 4 of the pipeline (steps.plan --run) with train.init: ce runs train_mono, align, train_ce, then CTC."""
    import subprocess
    import sys

    root_dir = Path(__file__).resolve().parents[1]
    root, _ = make_gmm_toy(tmp_path / "toy", {"train": 30, "dev": 6})
    (root / "data" / "fbank").symlink_to(root / "fbank")
    (root / "data" / "lang").symlink_to(root / "lang")
    cfg = gmm_toy_config(
        root / "c.yaml", train={"init": "ce", "epochs": 1}, ce={"epochs": 1}, gmm={"num_iters": 3, "max_iter_inc": 2}
    )
    exp = root / "exp" / "ctc"
    plan = [
        sys.executable,
        "-m",
        "steps.plan",
        "--run",
        "--config",
        str(cfg),
        "--data",
        str(root / "data"),
        "--exp",
        str(exp),
        "--stage",
        "4",
        "--stop-stage",
        "4",
    ]
    env = env_with_root(root_dir)
    r = subprocess.run(plan, capture_output=True, text=True, cwd=root, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    for step in ("steps.train_mono", "steps.align", "steps.train_ce", "steps.train "):
        assert f"+ {step}" in r.stderr
    assert (root / "exp" / "mono" / ".done").is_file() and (root / "exp" / "mono_ali" / "dev" / "pdf.scp").is_file()
    info = torch.load(exp / "final.pt", weights_only=True)["info"]
    assert info["init"] == "ce" and info["init_model"] == f"{exp}_ce/final.pt"
    # stages 5-6 with train.init: ce also decode and score the monophone GMM-HMM itself (method "mono")
    from asrlib.lang.graphs import build_tlg

    build_tlg(root / "lang")  # G.fst (word loop) and TLG.fst for the toy lexicon
    plan[plan.index("--stage") + 1 : plan.index("--stop-stage") + 2] = ["5", "--stop-stage", "6"]
    plan += ["--set", "data.eval_sets=[dev]"]  # the toy has no test set
    r = subprocess.run(plan, capture_output=True, text=True, cwd=root, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "+ steps.decode_gmm" in r.stderr and (root / "exp" / "mono" / "graph" / "HCLG.fst").is_file()
    results = (exp / "RESULTS.md").read_text()
    assert "| set | greedy | mono | tlg |" in results, results
    assert (exp / "decode_dev_mono" / "wer.json").is_file()
    # decode.set_grammars reaches the GMM too: the set searched through lang_one_word, its HCLG in graph_one_word
    from asrlib.lang.lexicon import write_lang_files
    from test_gmm import LEXICON

    write_lang_files(root / "data" / "lang_one_word", LEXICON)
    build_tlg(root / "data" / "lang_one_word", grammar="one_word")
    cfg_1w = gmm_toy_config(
        root / "c1w.yaml",
        train={"init": "ce", "epochs": 1},
        ce={"epochs": 1},
        gmm={"num_iters": 3, "max_iter_inc": 2},
        decode={"set_grammars": {"dev": "one_word"}},
    )
    plan[plan.index("--config") + 1] = str(cfg_1w)
    r = subprocess.run(plan, capture_output=True, text=True, cwd=root, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (
        f"--lang-dir {root / 'data'}/lang_one_word" in r.stderr
        and f"--graph-dir {root}/exp/mono/graph_one_word" in r.stderr
    )
    assert (root / "exp" / "mono" / "graph_one_word" / "HCLG.fst").is_file()
    for m in ("mono", "tlg"):  # exactly one word per hypothesis now (the word loop gave up to three)
        hyps = [line.split()[1:] for line in (exp / f"decode_dev_{m}" / "hyp.txt").read_text().splitlines()]
        assert hyps and all(len(h) == 1 for h in hyps), (m, hyps)
