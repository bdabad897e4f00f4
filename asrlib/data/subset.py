"""A smaller copy of a recipe's training tables (Kaldi's utils/subset_data_dir.sh for the feature stage's output),
for quick benchmark and timing runs: the first N utterances of each set's ``text``, ``feats.scp`` and
``utt2num_frames``, and the train set's ``cmvn.scp``. The archives are not copied: the scp entries keep pointing at
them (they hold absolute paths)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from asrlib.errors import PathLike
from asrlib.io.tables import read_table, write_table


def subset_training_tables(
    data_dir: PathLike, feats_dir: PathLike, out_dir: PathLike, counts: Mapping[str, int]
) -> Path:
    """Write ``out_dir/data/<set>/text`` and ``out_dir/fbank/<set>/{feats.scp,utt2num_frames}`` for each
    ``set: n`` of ``counts`` (the first ``n`` utterances of ``data_dir/<set>/text``) plus
    ``out_dir/fbank/train/cmvn.scp``; returns ``out_dir`` (use ``out_dir/data`` and ``out_dir/fbank`` as the
    ``--data-dir`` and ``--feats-dir`` of steps.train)."""
    data_dir, feats_dir, out = Path(data_dir), Path(feats_dir), Path(out_dir)
    for name, n in counts.items():
        keep = read_table(data_dir / name / "text")[:n]
        ids = {k for k, _ in keep}
        write_table(out / "data" / name / "text", keep)
        for f in ("feats.scp", "utt2num_frames"):
            write_table(out / "fbank" / name / f, [r for r in read_table(feats_dir / name / f) if r[0] in ids])
    write_table(out / "fbank" / "train" / "cmvn.scp", read_table(feats_dir / "train" / "cmvn.scp"))
    return out
