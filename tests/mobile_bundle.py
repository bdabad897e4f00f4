"""A mobile bundle of the tone model (tests/tone_model.py: a trained LSTM-CTC on synthetic tone "speech", with its
TLG), made by the real ``steps.export_mobile`` (low rank + pruning, each with one fine-tuning epoch, int8, bundle).
Built once per pytest session and shared by tests/test_export_streaming.py and tests/test_sherpa.py."""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import yaml

from tone_model import ToneModel, tone_model


def tone_bundle(tmp_path_factory, cmvn: str = "global", search=None) -> tuple[ToneModel, Path]:
    """(tone model trained with ``features.cmvn`` = ``cmvn``, export dir); the bundle is ``<export dir>/bundle``.
    ``search``: (acoustic scale, blank penalty) of the config's decode section, which the export folds in."""
    tm = tone_model(tmp_path_factory, cmvn)
    name = "tone_mobile" if cmvn == "global" else f"tone_mobile_{cmvn}"
    out = tmp_path_factory.getbasetemp() / (name if search is None else f"{name}_search")
    if not (out / ".export.done").is_file():
        from steps import export_mobile

        cfg = yaml.safe_load((tm.root / "config.yaml").read_text())
        cfg["export"] = {"rank_ratio": 0.25, "sparsity": 0.3, "finetune_epochs": 1, "finetune_lr": 0.002, "fp16": False}
        if search is not None:
            cfg.setdefault("decode", {}).update(acoustic_scale=search[0], blank_penalty=search[1])
        (out / "cfg").mkdir(parents=True, exist_ok=True)
        (out / "cfg" / "config.yaml").write_text(yaml.safe_dump(cfg))
        with contextlib.redirect_stdout(io.StringIO()):
            rc = export_mobile.main(
                [
                    "--config",
                    str(out / "cfg" / "config.yaml"),
                    "--model",
                    str(tm.exp / "final.pt"),
                    "--data-dir",
                    str(tm.data),
                    "--feats-dir",
                    str(tm.fbank),
                    "--lang-dir",
                    str(tm.lang),
                    "--out-dir",
                    str(out),
                ]
            )
        logging.getLogger().handlers.clear()  # the step logs to its own file; detach it again
        assert rc == 0
    return tm, out
