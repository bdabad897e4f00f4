"""Score fusion of CTC log-posteriors (steps.combine_logprobs): the two rules, weights, and clear errors."""

import numpy as np
import pytest

from asrlib.errors import AsrError
from asrlib.kaldi_io import read_matrix, read_scp, write_matrices
from steps.combine_logprobs import fuse, main


def _post(rows):
    return np.log(np.asarray(rows, dtype=np.float64)).astype(np.float32)


A = _post([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
B = _post([[0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])


def test_prob_rule_is_the_mean_posterior_and_weights_count():
    np.testing.assert_allclose(np.exp(fuse([A, B], [0.5, 0.5])), [[0.4, 0.5, 0.1], [0.2, 0.2, 0.6]], atol=1e-6)
    np.testing.assert_allclose(np.exp(fuse([A, B], [1.0, 0.0])), np.exp(A), atol=1e-6)


def test_logprob_rule_is_the_normalised_geometric_mean():
    out = np.exp(fuse([A, B], [0.5, 0.5], "logprob"))
    geo = np.sqrt(np.exp(A) * np.exp(B))
    np.testing.assert_allclose(out, geo / geo.sum(axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-6)


def test_cli_combines_archives_and_skips_when_done(tmp_path, capsys):
    scps = []
    for name, m in (("a", A), ("b", B)):
        write_matrices(tmp_path / name / "logprobs.ark", [("u1", m), ("u2", m[:1])])
        scps.append(str(tmp_path / name / "logprobs.scp"))
    out = tmp_path / "fused"
    assert main(["--logprobs", *scps, "--out-dir", str(out)]) == 0
    fused = read_scp(out / "logprobs.scp")
    assert sorted(fused) == ["u1", "u2"]
    np.testing.assert_allclose(read_matrix(fused["u1"]), fuse([A, B], [0.5, 0.5]), atol=1e-6)
    assert main(["--logprobs", *scps, "--out-dir", str(out)]) == 0
    assert "complete; skipping" in capsys.readouterr().out


def test_mismatches_are_named(tmp_path):
    write_matrices(tmp_path / "a" / "logprobs.ark", [("u1", A)])
    write_matrices(tmp_path / "b" / "logprobs.ark", [("u1", A[:1])])
    write_matrices(tmp_path / "c" / "logprobs.ark", [("u9", A)])
    a, b, c = (str(tmp_path / x / "logprobs.scp") for x in "abc")
    with pytest.raises(AsrError, match="utterance u1: .*different shapes"):
        main(["--logprobs", a, b, "--out-dir", str(tmp_path / "o1")])
    with pytest.raises(AsrError, match="different utterances .*u1|different utterances .*u9"):
        main(["--logprobs", a, c, "--out-dir", str(tmp_path / "o2")])
    with pytest.raises(AsrError, match="needs 2 non-negative values"):
        main(["--logprobs", a, a, "--weights", "1", "--out-dir", str(tmp_path / "o3")])
    with pytest.raises(AsrError, match="at least two"):
        main(["--logprobs", a, "--out-dir", str(tmp_path / "o4")])
    assert not (tmp_path / "o1" / "logprobs.scp").exists()
