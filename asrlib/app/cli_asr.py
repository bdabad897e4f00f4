"""The ``asr`` command: use a trained model on your own audio.

    asr transcribe MODEL INPUT... [--format text|jsonl|srt|vtt] [--nj N] [--method tlg|greedy] [-o OUT]
                   [--segment energy|blank|none] [--segment-min-silence S] [--segment-max-seconds S] ...
    asr info MODEL [--json] [--verify]
    asr convert-model --trust FILE_OR_DIR...
    asr package EXP_DIR LANG_DIR OUT_DIR [--config recipes/digits/config.yaml] [--force]

MODEL is a packaged model dir (``asr package``), a mobile bundle (``steps.export_mobile``: int8 ONNX run with ONNX
Runtime, the files sherpa-onnx deploys) or a training experiment dir (``final.pt``; its lang dir is found as
described in :mod:`asrlib.app.model_dir`). INPUTs are audio files (wav, flac, ogg, mp3: any sample rate, any
number of channels), directories (searched recursively for those extensions) or Kaldi ``wav.scp`` files
(``KEY PATH`` lines; a file named ``*.scp``). A file's key is its name without the extension; keys must be unique.

Output (stdout, or ``-o FILE`` written atomically): ``--format text`` gives Kaldi ``text`` lines ``KEY WORD...``;
``--format jsonl`` gives one JSON object per input: ``{"key", "path", "text", "duration", "words": [{"word",
"start", "end", "confidence"}]}`` (times in seconds; see :mod:`asrlib.app.word_times` for how times and confidences
are defined) and ``"segments": [{"start", "end", "text"}]`` (the stretches decoded from a zero network state,
cut at pauses: :mod:`asrlib.decode.segment`), or ``{"key", "path", "error"}`` for an input that could not be
transcribed; ``--format srt`` / ``vtt`` gives subtitles (:mod:`asrlib.app.subtitles`), one file per input with ``-o
DIR`` when there are several. A file of a minute or more shows its own progress bar. Every failed input is
also reported on stderr; the others are still transcribed, and the exit status is then 1. A problem with the
model or the arguments stops everything with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from asrlib.config import SEGMENT_METHODS
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_open
from asrlib.io.tables import read_table
from asrlib.app.subtitles import subtitles

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3", ".opus")
FORMATS = ("text", "jsonl", "srt", "vtt")
SUBTITLE_FORMATS = ("srt", "vtt")
LONG_FILE_SECONDS = 60.0  # a file at least this long gets its own progress bar (nj 1)
DEFAULT_MAX_DURATION = 7200.0  # seconds of audio per input, at most (--max-duration)

Item = Tuple[str, str, Optional[str]]  # key, path, error found while listing (e.g. a piped wav.scp entry)


# ------------------------------------------------------------------------------------------------ inputs
def _key(path: Path) -> str:
    return "_".join(path.stem.split()) or "_"


def collect_inputs(inputs: List[str]) -> List[Item]:
    """Expand files, directories and ``wav.scp`` files into ``(key, path, error)`` items, in order."""
    items: List[Item] = []
    for s in inputs:
        p = Path(s)
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in AUDIO_EXTENSIONS)
            if not files:
                raise AsrError(f"{p}: directory holds no audio files ({', '.join(AUDIO_EXTENSIONS)})")
            items += [(_key(f), str(f), None) for f in files]
        elif p.suffix == ".scp" and p.is_file():
            for key, val in read_table(p):
                if not val:
                    items.append((key, "", f"{p}: entry '{key}' has no path"))
                elif val.endswith("|") or len(val.split()) != 1:
                    items.append(
                        (
                            key,
                            val,
                            f"{p}: entry '{key}' is a command ('{val}'); only file paths are "
                            f"supported (convert the audio to files first)",
                        )
                    )
                else:
                    items.append((key, val, None))
        else:
            items.append((_key(p), str(p), None))
    seen = {}
    for key, path, _ in items:
        if key in seen:
            raise AsrError(
                f"two inputs have the key '{key}' ({seen[key]} and {path}); keys must be unique: "
                f"rename a file or list the inputs in a wav.scp with unique keys"
            )
        seen[key] = path
    if not items:
        raise AsrError("no inputs")
    return items


# ------------------------------------------------------------------------------------------------ workers
_worker_rec = None


def add_pause_args(group) -> None:
    """The options that say where a long recording's segments end (the model dir's / bundle's ``decode`` settings
    when not given): ``asr transcribe`` and ``steps.recognize_mobile --endpoint`` share them. Their destinations
    are :data:`asrlib.config.SEGMENT_PAUSE_KEYS`."""
    group.add_argument("--segment-min-silence", type=float, metavar="SECONDS", help="a pause this long ends a segment")
    group.add_argument("--segment-pad", type=float, metavar="SECONDS", help="silence kept on each side of a cut")
    group.add_argument(
        "--segment-max-seconds",
        type=float,
        metavar="SECONDS",
        help="longest segment (cut at its longest non-speech run)",
    )


def _make_recognizer(a: argparse.Namespace):
    from asrlib.app.recognizer import Recognizer

    from asrlib.app.model_dir import DECODE_KEYS

    return Recognizer.from_dir(
        a.model,
        method=a.method,
        chunk_seconds=a.chunk_seconds,
        max_duration=a.max_duration or None,
        device=a.device,
        **{k: getattr(a, k) for k in DECODE_KEYS},  # each has its option; None keeps the model dir's setting
    )


def _init_worker(a: argparse.Namespace) -> None:
    global _worker_rec
    import torch

    torch.set_num_threads(a.num_threads)
    _worker_rec = _make_recognizer(a)


def _transcribe_item(item: Item, rec=None, show_progress: bool = False) -> Tuple[Item, Optional[dict], Optional[str]]:
    key, path, err = item
    if err:
        return item, None, err
    bar = file_progress(key, path) if show_progress else None
    try:
        res = (rec or _worker_rec).transcribe_file(path, progress=bar.update if bar else None)
        return item, res.to_dict(), None
    except AsrError as e:
        return item, None, str(e)
    finally:
        if bar is not None:
            bar.close()


def file_progress(key: str, path: str):
    """A progress bar in seconds of audio for one file at least :data:`LONG_FILE_SECONDS` long, else None."""
    import soundfile as sf
    from tqdm import tqdm

    try:
        seconds = sf.info(path).duration
    except Exception:  # noqa: BLE001 - unreadable: transcribe_file says why
        return None
    if seconds < LONG_FILE_SECONDS:
        return None
    return tqdm(
        total=round(seconds, 1),
        desc=key,
        unit="s",
        unit_scale=False,
        leave=False,
        mininterval=1.0,
        file=sys.stderr,
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s audio [{elapsed}<{remaining}]",
    )


# ------------------------------------------------------------------------------------------------ commands
def cmd_transcribe(a: argparse.Namespace) -> int:
    from tqdm import tqdm

    if a.nj < 1 or a.num_threads < 1:
        raise AsrError("--nj and --num-threads must be >= 1")
    items = collect_inputs(a.inputs)
    nj = min(a.nj, len(items))
    subtitles_dir = subtitles_dir_for(a.format, a.output, len(items))
    t0 = time.perf_counter()
    if nj == 1:
        import torch

        torch.set_num_threads(a.num_threads)
        rec = _make_recognizer(a)  # model problems stop here, before any output
        results = (_transcribe_item(it, rec, show_progress=not a.quiet) for it in items)
        pool = None
        load_note = f"; model loaded in {time.perf_counter() - t0:.2f} s"
        t0 = time.perf_counter()
    else:
        import multiprocessing as mp

        from asrlib.app.model_dir import open_model_dir

        open_model_dir(a.model)  # fail fast, in the parent, with one clear message
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        pool = ctx.Pool(nj, initializer=_init_worker, initargs=(a,))
        load_note = " including the workers' start-up"
        results = pool.imap(_transcribe_item, items, chunksize=1)
    failed, audio_seconds = [], 0.0
    try:
        with output_file(a.output, subtitles_dir) as out:
            for (key, path, _), res, err in tqdm(
                results,
                total=len(items),
                desc="transcribe",
                unit="file",
                disable=a.quiet or len(items) < 2,
                mininterval=1.0,
                file=sys.stderr,
            ):
                if err is not None:
                    failed.append(key)
                    tqdm.write(f"ERROR [asr]: {key}: {err}", file=sys.stderr)
                    if a.format == "jsonl":
                        out.write(json.dumps({"key": key, "path": path, "error": err}) + "\n")
                    continue
                audio_seconds += res["duration"]
                write_result(out, a.format, key, path, res, subtitles_dir)
                out.flush()
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    wall = time.perf_counter() - t0
    if not a.quiet:
        rtf = f", RTF {wall / audio_seconds:.3f}" if audio_seconds > 0 else ""
        print(
            f"asr transcribe: {len(items) - len(failed)} of {len(items)} inputs transcribed "
            f"({audio_seconds:.1f} s of audio in {wall:.2f} s{rtf}, nj={nj}{load_note})",
            file=sys.stderr,
        )
    if failed:
        print(
            f"ERROR [asr]: {len(failed)} of {len(items)} inputs failed (reasons above): "
            f"{' '.join(failed[:10])}{' ...' if len(failed) > 10 else ''}",
            file=sys.stderr,
        )
        return 1
    return 0


class _Stdout:
    def __enter__(self):
        return sys.stdout

    def __exit__(self, *exc) -> None:
        sys.stdout.flush()


def subtitles_dir_for(fmt: str, output: Optional[Path], n_inputs: int) -> Optional[Path]:
    """With ``--format srt|vtt`` and several inputs, ``-o`` names a directory (made here) that gets each input's
    ``KEY.<fmt>``: that directory; else None. AsrError when it is missing or a file."""
    if fmt not in SUBTITLE_FORMATS or n_inputs < 2:
        return None
    if output is None:
        raise AsrError(
            f"--format {fmt} with {n_inputs} inputs writes one file per input: give -o DIR (each input's "
            f"KEY.{fmt} is written there)"
        )
    if output.exists() and not output.is_dir():
        raise AsrError(f"-o {output}: with --format {fmt} and several inputs, -o is a directory")
    output.mkdir(parents=True, exist_ok=True)
    return output


def output_file(output: Optional[Path], subtitles_dir: Optional[Path]):
    """Where the results go: ``-o`` written atomically, or stdout (also when each goes to ``subtitles_dir``)."""
    return atomic_open(output) if output and not subtitles_dir else _Stdout()


def write_result(out, fmt: str, key: str, path: str, res: Dict, subtitles_dir: Optional[Path]) -> None:
    """One input's result (a :meth:`asrlib.app.results.Result.to_dict`) in ``fmt`` (:data:`FORMATS`)."""
    if fmt == "jsonl":
        out.write(json.dumps({"key": key, "path": path, **res}, ensure_ascii=False) + "\n")
    elif subtitles_dir is not None:
        with atomic_open(subtitles_dir / f"{key}.{fmt}") as sub:
            sub.write(subtitles(res, fmt))
    elif fmt in SUBTITLE_FORMATS:
        out.write(subtitles(res, fmt))
    else:
        out.write(f"{key} {res['text']}".rstrip() + "\n")


def cmd_info(a: argparse.Namespace) -> int:
    from asrlib.lang.lexicon import read_lexicon, read_tokens, read_words
    from asrlib.app.model_dir import DECODE_KEYS, open_model_dir, verify_files

    md = open_model_dir(a.model)
    backend = md.load_backend("cpu")
    lang = md.lang_dir
    words = [w for w in read_words(lang / "words.txt").values() if not (w.startswith("#") or w.startswith("<"))]
    kind = "mobile bundle" if md.type == "onnx-bundle" else "packaged" if md.packaged else "experiment dir"
    info = {
        "model_dir": str(md.root),
        "kind": kind,
        "type": md.type,
        "format_version": md.meta.get("format_version"),
        "model_file": str(md.model_path),
        "lang_dir": str(lang),
        "sample_rate": md.sample_rate,
        "num_mel_bins": backend.num_mel_bins,
        "subsampling": backend.subsampling,
        "tokens": len(read_tokens(lang / "tokens.txt")),
        "words": len(words),
        "lexicon_entries": sum(len(p) for p in read_lexicon(lang / "lexicon.txt").values()),
        "tlg": (lang / "TLG.fst").is_file(),
        "decode": {k: getattr(md.decode_config(), k) for k in DECODE_KEYS},
        "network": backend.describe(),
    }
    for k in ("asrlib_version", "source", "decode_source"):
        if md.meta.get(k) is not None:
            info[k] = md.meta[k]
    if a.verify:
        problems = verify_files(md) if md.packaged else []
        info["verified"] = "ok" if not problems else problems
    if a.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        for k, v in info.items():
            if isinstance(v, dict):
                v = " ".join(f"{kk}={vv}" for kk, vv in v.items())
            print(f"{k:16s} {v}")
    if a.verify and info["verified"] != "ok":
        raise AsrError(f"{md.root}: " + "; ".join(info["verified"]))
    return 0


def model_files(paths: List[str]) -> List[Path]:
    """The model files of ``paths``: files as given; in a directory, every ``*.pt`` and ``*.mdl`` below it."""
    out: List[Path] = []
    for s in paths:
        p = Path(s)
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.suffix in (".pt", ".mdl") and f.is_file())
        elif p.is_file():
            out.append(p)
        else:
            raise AsrError(f"{p} does not exist")
    if not out:
        raise AsrError(f"no model files (*.pt, *.mdl) in {' '.join(paths)}")
    return out


def cmd_convert_model(a: argparse.Namespace) -> int:
    from asrlib.gmm.model import convert_trusted_gmm
    from asrlib.io.torchfile import convert_trusted

    files = model_files(a.paths)
    if not a.trust:
        raise AsrError(
            "convert-model rewrites each file in place, taking its numbers as they are (it builds only data from "
            "an old file and refuses anything that could run code): do it only for files you trust (your own, or "
            "from a source you trust), and say so with --trust"
        )
    for f in files:
        done = convert_trusted_gmm(f) if f.suffix == ".mdl" else convert_trusted(f)
        print(f"{f}: {'converted' if done else 'already in the safe format'}")
    return 0


def cmd_package(a: argparse.Namespace) -> int:
    from asrlib.config import DecodeConfig, load_config
    from asrlib.app.model_dir import package_model

    decode, sample_rate = DecodeConfig(), 16000
    if a.config:
        cfg = load_config(a.config)
        decode, sample_rate = cfg.decode, cfg.data.sample_rate
    out = package_model(a.exp_dir, a.lang_dir, a.out_dir, decode=decode, sample_rate=sample_rate, force=a.force)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    print(f"packaged {a.exp_dir} + {a.lang_dir} into {out}: {' '.join(files)}")
    return 0


# ------------------------------------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="asr", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("transcribe", help="transcribe audio files, directories or wav.scp lists")
    t.add_argument("model", help="packaged model dir (asr package), mobile bundle dir or training experiment dir")
    t.add_argument("inputs", nargs="+", help="audio files, directories, or Kaldi wav.scp files")
    t.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text: Kaldi text lines; jsonl: words and segments with times; srt / vtt: subtitles "
        "(several inputs: -o DIR gets one KEY.srt / KEY.vtt each)",
    )
    t.add_argument("--method", choices=["tlg", "greedy"], default="tlg")
    t.add_argument("--nj", type=int, default=1, help="parallel processes (files are spread over them)")
    t.add_argument("--num-threads", type=int, default=1, help="torch threads per process")
    t.add_argument(
        "--device",
        default="auto",
        help="where a torch model runs: auto (CUDA when there is one), cpu, cuda, cuda:N (a mobile bundle: the CPU)",
    )
    t.add_argument("-o", "--output", type=Path, help="write here (atomically) instead of stdout")
    t.add_argument("--beam", type=float, help="search beam (default: the model dir's decode settings)")
    t.add_argument("--max-active", type=int)
    t.add_argument("--acoustic-scale", type=float)
    t.add_argument("--blank-penalty", type=float)
    t.add_argument(
        "--chunk-seconds",
        type=float,
        default=10.0,
        help="audio processed per step (bounds memory; does not change the result)",
    )
    seg = t.add_argument_group(
        "long recordings",
        "cut at pauses, each segment decoded from a zero network state (default: the model dir's decode settings)",
    )
    seg.add_argument(
        "--segment",
        choices=SEGMENT_METHODS,
        help="auto (endpoint for a unidirectional model, else blank); endpoint: the streaming endpointer's rules; "
        "blank: pauses by the network's CTC blank; energy: by log mel energy; none: one stream",
    )
    add_pause_args(seg)
    seg.add_argument(
        "--segment-threshold-db",
        type=float,
        metavar="DB",
        help="frames within this of the local energy floor are quiet",
    )
    seg.add_argument(
        "--segment-context",
        type=float,
        metavar="SECONDS",
        help="audio on each side of a segment the network also hears (a bidirectional model's context)",
    )
    t.add_argument(
        "--max-duration",
        type=float,
        default=DEFAULT_MAX_DURATION,
        metavar="SECONDS",
        help="refuse a longer input (bounds the work one input can cause; 0 = no limit)",
    )
    t.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary line")
    t.set_defaults(func=cmd_transcribe)

    i = sub.add_parser("info", help="describe a model dir")
    i.add_argument("model")
    i.add_argument("--json", action="store_true")
    i.add_argument("--verify", action="store_true", help="re-hash the files of a packaged model dir")
    i.set_defaults(func=cmd_info)

    c = sub.add_parser(
        "convert-model",
        help="rewrite trusted model files of an older asrlib (pickles) in the format that loads without running code",
    )
    c.add_argument("paths", nargs="+", help="model files (final.pt, checkpoints, final.mdl) or dirs holding them")
    c.add_argument(
        "--trust", action="store_true", help="you trust these files (their contents become a model asrlib loads)"
    )
    c.set_defaults(func=cmd_convert_model)

    k = sub.add_parser("package", help="copy a trained model and its lang files into a self-contained model dir")
    k.add_argument("exp_dir", help="experiment dir holding final.pt (or the .pt file)")
    k.add_argument(
        "lang_dir", help="the lang dir the model was trained with (tokens.txt, words.txt, lexicon.txt, TLG.fst)"
    )
    k.add_argument("out_dir")
    k.add_argument("--config", help="recipe config: its decode settings and data.sample_rate are recorded")
    k.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    k.set_defaults(func=cmd_package)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``asr`` with ``argv``; returns the exit status (raises :class:`AsrError` for fatal problems)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    a = build_parser().parse_args(argv)
    return a.func(a)


def console_main() -> None:
    """Entry point of the ``asr`` console script: AsrError → one ``ERROR [asr]:`` line, exit status 2."""
    from asrlib.cli import run_main

    sys.argv[0] = "asr"
    run_main(main)


if __name__ == "__main__":
    console_main()
