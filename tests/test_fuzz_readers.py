"""Every reader of a file a user may bring, fed mutated files: each case ends in the file's content or in our clear
error (AsrError), never another exception, a hang or an allocation far beyond the file's size.

A seeded mutator (no extra dependency) changes a valid seed file: it truncates it, flips, inserts or deletes bytes,
swaps lines, repeats a chunk, or writes huge or negative numbers into it. ``make test`` runs FUZZ_CASES cases per
reader; the slow tier (``make test-slow``) runs FUZZ_CASES_SLOW. Python allocations are measured with tracemalloc
(numpy's included; C++ libraries' are not visible to it) and bounded by ALLOC_FACTOR x the file's size + 8 MiB.
"""

import json
import random
import signal
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asrlib.errors import AsrError

FUZZ_CASES = 40
FUZZ_CASES_SLOW = 1000
ALLOC_FACTOR = 64
CASE_SECONDS = 10


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        pos = rng.randrange(len(b) + 1) if b else 0
        if op == 0 and b:
            del b[pos:]  # truncate
        elif op == 1 and b:
            b[min(pos, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif op == 2:
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 3 and b:
            del b[pos : pos + rng.randint(1, 16)]
        elif op == 4:
            lines = bytes(b).split(b"\n")
            rng.shuffle(lines)
            b = bytearray(b"\n".join(lines))
        elif op == 5 and b:
            chunk = bytes(b[pos : pos + rng.randint(1, 64)])
            b[pos:pos] = chunk * rng.randint(1, 8)
        elif op == 6:
            b[pos:pos] = rng.choice([b"99999999999", b"-1", b"1e308", b"nan", b"\x00", b"\xff\xfe", b" | ", b"\t"])
        elif op == 7 and len(b) > 8:  # a 32-bit field set to a huge value (binary headers)
            at = rng.randrange(len(b) - 4)
            b[at : at + 4] = rng.choice([b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\x00\xca\x9a\x3b"])
    return bytes(b)


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout()


def run_case(read, path: Path) -> None:
    """Call ``read(path)``: it may return or raise AsrError; anything else, a hang or a big allocation fails."""
    size = path.stat().st_size
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    tracemalloc.start()
    try:
        read(path)
    except AsrError:
        pass
    except _Timeout:
        pytest.fail(f"{read.__name__} hung on {path} ({size} bytes)")
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert peak <= ALLOC_FACTOR * size + (8 << 20), f"{read.__name__} allocated {peak} bytes for a {size}-byte file"


# ------------------------------------------------------------------------------------------------ seeds and readers
def _seed_table(d: Path) -> Path:
    p = d / "text"
    p.write_text("utt1 HELLO WORLD\nutt2 ONE TWO THREE\nutt3 YES\n")
    return p


def read_table(p: Path):
    from asrlib.io.tables import read_table_dict

    return read_table_dict(p)


def _seed_data_dir(d: Path) -> Path:
    root = d / "dir"
    root.mkdir()
    (root / "wav.scp").write_text("r1 /data/a.wav\nr2 sph2pipe -f wav /data/b.sph |\n")
    (root / "segments").write_text("u1 r1 0.00 1.50\nu2 r1 1.50 3.20\nu3 r2 0 2.5\n")
    (root / "text").write_text("u1 HELLO\nu2 WORLD AGAIN\nu3 YES\n")
    (root / "utt2spk").write_text("u1 s1\nu2 s1\nu3 s2\n")
    (root / "spk2utt").write_text("s1 u1 u2\ns2 u3\n")
    return root / "segments"  # the file mutated; the reader reads the whole dir


def read_data_dir(p: Path):
    from asrlib.data.kaldi_dir import inspect_data_dir

    return inspect_data_dir(p.parent)


def _seed_ark(d: Path) -> Path:
    from asrlib.kaldi_io import write_matrices

    write_matrices(
        d / "feats.ark", [(f"u{i}", np.random.default_rng(i).normal(size=(7, 5)).astype(np.float32)) for i in range(3)]
    )
    return d / "feats.ark"


def read_ark(p: Path):
    from asrlib.kaldi_io import MatrixReader

    return [x.shape for _, x in MatrixReader(p.with_suffix(".scp"))]


def _seed_scp(d: Path) -> Path:
    return _seed_ark(d).with_suffix(".scp")


def read_scp(p: Path):
    from asrlib.kaldi_io import MatrixReader

    return [x.shape for _, x in MatrixReader(p)]


def _seed_wav(d: Path) -> Path:
    p = d / "a.wav"
    sf.write(p, (0.1 * np.sin(np.arange(8000) / 5)).astype(np.float32), 16000, subtype="PCM_16")
    return p


def _seed_flac(d: Path) -> Path:
    p = d / "a.flac"
    sf.write(p, (0.1 * np.sin(np.arange(8000) / 5)).astype(np.float32), 16000, subtype="PCM_16")
    return p


def read_audio(p: Path):
    from asrlib.app.audio_input import open_audio_blocks

    sr, blocks = open_audio_blocks(p, block_seconds=1.0)
    return sum(len(b) for b in blocks)


def _seed_lexicon(d: Path) -> Path:
    p = d / "lexicon.txt"
    p.write_text("HELLO HH AH L OW\nWORLD W ER L D\nYES Y EH S\nYES Y AE S\n")
    return p


def read_lexicon(p: Path):
    from asrlib.lang.lexicon import read_lexicon as rl

    return rl(p)


def _seed_tokens(d: Path) -> Path:
    p = d / "tokens.txt"
    p.write_text("<blk> 0\nAH 1\nD 2\nEH 3\nER 4\n")
    return p


def read_tokens(p: Path):
    from asrlib.lang.lexicon import read_tokens as rt

    return rt(p)


def _seed_config(d: Path) -> Path:
    p = d / "c.yaml"
    p.write_text((Path(__file__).parents[1] / "recipes/digits/config.yaml").read_text())
    return p


def read_config(p: Path):
    from asrlib.config import load_config

    return load_config(p)


def _seed_model_json(d: Path) -> Path:
    from asrlib.app.model_dir import MODEL_DIR_FORMAT, MODEL_DIR_VERSION

    root = d / "model"
    (root / "lang").mkdir(parents=True)
    for f in ("tokens.txt", "words.txt", "lexicon.txt"):
        (root / "lang" / f).write_text("<eps> 0\nA 1\n")
    (root / "final.pt").write_bytes(b"x")
    meta = {
        "format": MODEL_DIR_FORMAT,
        "format_version": MODEL_DIR_VERSION,
        "type": "torch",
        "model": "final.pt",
        "lang": "lang",
        "sample_rate": 16000,
        "decode": {"beam": 12.0, "segment": "blank"},
        "files": {"final.pt": {"size": 1}},
    }
    (root / "model.json").write_text(json.dumps(meta))
    return root / "model.json"


def read_model_json(p: Path):
    from asrlib.app.model_dir import open_model_dir

    md = open_model_dir(p.parent)
    return md.decode_config(), md.sample_rate


def _seed_torch(d: Path) -> Path:
    import torch

    from asrlib.io.torchfile import save_torch

    save_torch(
        d / "final.pt",
        {"model": {"w": torch.ones(3, 4)}, "info": {"a": [1, 2.5, "x"]}, "cmvn_mean": np.zeros(4, np.float32)},
    )
    return d / "final.pt"


def read_torch(p: Path):
    from asrlib.io.torchfile import load_torch

    return load_torch(p)


def _seed_gmm(d: Path) -> Path:
    import kaldi_hmm_gmm as khg

    from asrlib.gmm.lang import make_topology
    from asrlib.gmm.model import GmmModel, save_gmm

    topo_text = (
        "<Topology>\n<TopologyEntry>\n<ForPhones>\n1 2\n</ForPhones>\n<State> 0 <PdfClass> 0 <Transition> 0 "
        "0.5 <Transition> 1 0.5 </State>\n<State> 1 </State>\n</TopologyEntry>\n</Topology>\n"
    )
    topo = make_topology(topo_text)
    tree = khg.monophone_context_dependency(
        phones=topo.phones, phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes()
    )
    am = khg.AmDiagGmm()
    for _ in range(tree.num_pdfs):
        g = khg.DiagGmm(nmix=1, dim=3)
        g.set_weights(np.ones(1, np.float32))
        g.set_means(np.zeros((1, 3), np.float32))
        g.set_invvars(np.ones((1, 3), np.float32))
        g.compute_gconsts()
        am.add_pdf(g)
    tm = khg.TransitionModel(ctx_dep=tree, hmm_topo=topo)
    model = GmmModel(topo_text, tree, tm, am, {"A": 1, "SIL": 2}, "SIL", "fbank", 13)
    save_gmm(model, d)
    return d / "final.mdl"


def read_gmm(p: Path):
    from asrlib.gmm.model import load_gmm

    return load_gmm(p)


def _seed_arpa(d: Path) -> Path:
    from asrlib.lang.lexicon import write_lang_files

    write_lang_files(d / "lang", {"HELLO": [["HH", "AH"]], "WORLD": [["W", "ER"]], "YES": [["Y", "EH"]]})
    p = d / "lm.arpa"
    p.write_text(
        "\\data\\\nngram 1=5\nngram 2=3\n\n\\1-grams:\n-0.7\t</s>\n-99\t<s>\t-0.3\n-0.7\tHELLO\t-0.2\n"
        "-0.7\tWORLD\t-0.2\n-0.9\tYES\t-0.2\n\n\\2-grams:\n-0.3\t<s> HELLO\n-0.2\tHELLO WORLD\n"
        "-0.1\tWORLD </s>\n\n\\end\\\n"
    )
    return p


def read_arpa(p: Path):
    from asrlib.lang.graphs import make_arpa_fst

    return make_arpa_fst(p, p.parent / "lang" / "words.txt", 2)


def _seed_manifest(d: Path) -> Path:
    from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet

    wav = _seed_wav(d)
    rec = Recording.from_file(wav, recording_id="r1")
    RecordingSet.from_recordings([rec]).to_file(d / "recordings.jsonl.gz")
    sups = [SupervisionSegment(f"s{i}", "r1", start=0.1 * i, duration=0.1, text="HELLO") for i in range(3)]
    SupervisionSet.from_segments(sups).to_file(d / "supervisions.jsonl")
    return d / "supervisions.jsonl"


def read_manifest(p: Path):
    from asrlib.data.corpus import load_manifest

    return len(load_manifest(p))


def _seed_manifest_gz(d: Path) -> Path:
    _seed_manifest(d)
    return d / "recordings.jsonl.gz"


def _seed_cuts(d: Path) -> Path:
    import numpy as np

    from asrlib.data.cuts import write_cuts
    from asrlib.kaldi_io import write_matrices

    (d / "data").mkdir()
    (d / "data" / "wav.scp").write_text(f"u1 {_seed_wav(d)}\n")
    (d / "data" / "text").write_text("u1 HELLO\n")
    write_matrices(d / "fb" / "feats.ark", [("u1", np.zeros((10, 4), np.float32))])
    (d / "fb" / "utt2num_frames").write_text("u1 10\n")
    write_cuts(d / "data", d / "cuts.jsonl.gz", d / "fb")
    return d / "cuts.jsonl.gz"


def read_cuts(p: Path):
    from asrlib.data.cuts import open_cuts

    return len(list(open_cuts(p)))


READERS = {
    "cuts_lazy": (_seed_cuts, read_cuts),
    "table": (_seed_table, read_table),
    "data_dir": (_seed_data_dir, read_data_dir),
    "ark": (_seed_ark, read_ark),
    "scp": (_seed_scp, read_scp),
    "wav": (_seed_wav, read_audio),
    "flac": (_seed_flac, read_audio),
    "lexicon": (_seed_lexicon, read_lexicon),
    "tokens": (_seed_tokens, read_tokens),
    "config": (_seed_config, read_config),
    "model_json": (_seed_model_json, read_model_json),
    "torch": (_seed_torch, read_torch),
    "gmm": (_seed_gmm, read_gmm),
    "manifest": (_seed_manifest, read_manifest),
    "manifest_gz": (_seed_manifest_gz, read_manifest),
    "arpa": (_seed_arpa, read_arpa),  # parsed by kaldilm in a child process: fewer cases (about 0.3 s each)
}
SLOW_READERS = {"arpa": 10}  # cases in make test for readers slower than the others


def fuzz(name: str, cases: int, tmp_path: Path) -> None:
    seed, read = READERS[name]
    path = seed(tmp_path)
    read(path)  # the seed itself is valid
    original = path.read_bytes()
    rng = random.Random(f"{name}-{cases}")
    for _ in range(cases):
        path.write_bytes(mutate(original, rng))
        run_case(read, path)


@pytest.mark.parametrize("name", sorted(READERS))
def test_mutated_files_end_in_a_clear_error(name, tmp_path):
    fuzz(name, SLOW_READERS.get(name, FUZZ_CASES), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(READERS))
def test_mutated_files_end_in_a_clear_error_many(name, tmp_path):
    fuzz(name, FUZZ_CASES_SLOW // 5 if name in SLOW_READERS else FUZZ_CASES_SLOW, tmp_path)
