"""Long recordings: WER, peak memory and speed of `asr transcribe` on 60 s, 10 min and 1 h files made of a test set's
utterances, against the same utterances transcribed one by one.

    python bench/long_form.py [--quick] [--model recipes/digits/exp/lstm_ctc] [--data recipes/digits/data/test]
                              [--lengths 60 600 3600] [--segment auto blank energy none] [--out FILE.json]

Recordings: the test set's utterances (sorted by id) concatenated, as they are, into consecutive recordings of at
least L seconds (a remainder shorter than L is left out); when the set is shorter than L, it is repeated, each
repetition in another (seeded) order, to one recording of at least L seconds. Written as 16-bit WAV into a temporary
folder (deleted afterwards).

For each ``--segment`` method and length, one `asr transcribe` process (nj 1, 1 thread) transcribes that length's
recordings: its WER against the utterances' references joined in the same order, the WER of the utterances' own
one-by-one hypotheses joined alike (the same words: ``wer_pieces``), a 95 % interval of the gap between the two
(``gap_ci95``: the utterances resampled, each recording's errors counted to its utterances), the RTF the command prints
(transcription time without model loading / audio seconds) and the process's peak RSS (``wait4``). ``per_utt`` is the
one-by-one pass over the test set's wav.scp (same command), and ``per_utt.none`` the same with each utterance as one
stream (the decode stage's way, the speed reference: ``rtf_vs_one_stream_per_utt``). Ends with one JSON line of all
figures. ``--quick``: 60 s only, two recordings, ``auto`` (under a minute). ``auto`` is the default method: ``endpoint``
on a unidirectional model, ``blank`` on a bidirectional one. The processes' RTFs drift with the machine's speed, so the
firm time figure is ``offline_paired``: the first method's recogniser on each recording of the shortest length against
its utterances each as one stream, the two run side by side in the bench's process (1 thread, the model's decode
settings, ``--repeats`` times; the median ratio and quartiles; and the recording as one stream, the control);
``--calls F S W`` adds the endpointer under other call sizes (how ``OFFLINE_CALLS`` and, on a mobile bundle's
ONNX Runtime network, ``OFFLINE_CHEAP_CALLS`` were chosen), ``--oracle-calls``
under calls that each end just after the next detected speech (the floor of any plan of its calls).

``--streaming``: also the model's mobile bundle (``MODEL/mobile/bundle``) through its streaming recogniser
(`python -m steps.recognize_mobile`, the bundle's search, or ``--search SCALE PENALTY``'s, the bundle's network or
``--stream-model``, chunks of the bundle's ``chunk_ms``): per
utterance, the long recordings as one stream, and with ``--endpoint`` (segments cut by the bundle's endpoint rules).
Its RTF is each file's time from opening to words (``--repeats`` runs of every pass, interleaved; the median, and
``rtf_vs_per_utt``), ``cpu_rtf`` the same from the process's CPU time over its files, and ``network_frames`` the
fbank frames the network ran over per frame of audio. The machine's speed drifts between such runs; the firm figure
is ``streaming_endpoint_paired``: the endpointed stream's time on each recording of the shortest length against its
utterances' own streams', the two run side by side in the bench's process, ``--repeats`` times (median ratio; and
the recording as one stream without endpointing, the control).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from asrlib.cli import env_with_root  # noqa: E402
from asrlib.io.tables import read_table_dict  # noqa: E402
from asrlib.score import errors_by_part, score  # noqa: E402


def run_asr(model: Path, inputs: List[str], out: Path, segment: str, extra: List[str]) -> Dict:
    """Run `asr transcribe` in its own process; its results, printed RTF and peak RSS (MiB)."""
    cmd = [
        sys.executable,
        "-m",
        "asrlib.app.cli_asr",
        "transcribe",
        str(model),
        *inputs,
        "--format",
        "jsonl",
        "-o",
        str(out),
        "--segment",
        segment,
        *extra,
    ]
    env = {**env_with_root(ROOT), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"asr transcribe failed ({p.returncode}):\n{err[-3000:]}")
    m = re.search(r"([\d.]+) s of audio in ([\d.]+) s, RTF ([\d.]+)", err)
    results = {r["key"]: r for r in map(json.loads, out.read_text().splitlines())}
    return {
        "results": results,
        "audio_s": float(m.group(1)),
        "decode_s": float(m.group(2)),
        "rtf": round(float(m.group(2)) / float(m.group(1)), 5),  # the printed RTF has 3 decimals
        "rss_mib": round(usage.ru_maxrss / 1024, 1),
        "wall_s": round(wall, 1),
    }


def run_streaming(
    bundle: Path, inputs: List[str], out: Path, endpoint: bool, search: List[float], model: Optional[Path]
) -> Dict:
    """`steps.recognize_mobile` (streaming engine) in its own process: its hypotheses, printed RTF and peak RSS.
    ``search``: [acoustic scale, blank penalty], or empty for the bundle's; ``model``: another streaming ONNX model
    in place of the bundle's network, or None."""
    cmd = [sys.executable, "-m", "steps.recognize_mobile", "--bundle", str(bundle), *inputs, "-o", str(out)]
    if model is not None:
        cmd += ["--model", str(model)]
    if search:
        cmd += ["--acoustic-scale", str(search[0]), "--blank-penalty", str(search[1])]
    env = {**env_with_root(ROOT), "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd + (["--endpoint"] if endpoint else []), capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"recognize_mobile failed ({p.returncode}):\n{p.stderr[-3000:]}")
    m = re.search(r"RTF ([\d.]+), peak RSS (\d+) MB", p.stderr)
    f = re.search(r"the network ran (\d+) fbank frames for (\d+) of audio", p.stderr)
    c = re.search(r"CPU RTF ([\d.]+)", p.stderr)
    hyp = {k: " ".join(v) for k, *v in (line.split() for line in out.read_text().splitlines() if line.strip())}
    return {
        "results": hyp,
        "rtf": float(m.group(1)),
        "cpu_rtf": float(c.group(1)),
        "rss_mib": float(m.group(2)),
        "network_frames": round(int(f.group(1)) / int(f.group(2)), 3),
    }


def paired_ratios(
    groups: List[List[str]], files: List[str], wavs: Dict[str, str], repeats: int, runners: Dict[str, Callable]
) -> Dict:
    """Each runner's time on each long recording against ``runners["utts"]``'s on the recording's utterances,
    measured side by side in this process, so that the machine's speed, which drifts by tens of percent over
    minutes here, is the same for both: one ratio per recording and repeat (the order rotates); their medians and
    quartiles. A runner takes a list of audio paths."""

    def spent(run: Callable, paths: List[str]) -> float:
        t0 = time.perf_counter()
        run(paths)
        return time.perf_counter() - t0

    names = [n for n in runners if n != "utts"]
    ratios: Dict[str, List[float]] = {n: [] for n in names}
    for r in range(repeats):
        for i, (g, f) in enumerate(zip(groups, files)):
            jobs = [("utts", [wavs[u] for u in g])] + [(n, [f]) for n in names]
            k = (r + i) % len(jobs)  # each goes first as often as the others
            t = {n: spent(runners[n], paths) for n, paths in jobs[k:] + jobs[:k]}
            for n in names:
                ratios[n].append(t[n] / t["utts"])
    out: Dict = {"pairs": len(ratios[names[0]])}
    for n, rs in ratios.items():
        q = sorted(rs)
        out[n] = {
            "median": round(statistics.median_high(q), 3),
            "quartiles": [round(q[len(q) // 4], 3), round(q[3 * len(q) // 4], 3)],
        }
    return out


def planned(detections: List[int], record: bool = False) -> Callable:
    """An :class:`asrlib.decode.endpoint.Endpointer` type whose held calls each end one output frame after the first
    of ``detections`` (output frames of the input where it detected a segment's first speech, ascending) that is
    later than its last one (after the last: its call sizes). With ``record``, it appends its own detections to
    ``detections`` instead, calling as its sizes say. The words and segments are the same either way."""
    from asrlib.decode import endpoint

    class Planned(endpoint.Endpointer):
        def _call_end(self, start: int) -> int:
            if record:
                return super()._call_end(start)
            i = bisect.bisect_right(detections, self.speech_at)
            return (detections[i] + 1) * self.stack if i < len(detections) else super()._call_end(start)

        @property
        def speech_at(self) -> int:
            return self._speech_at

        @speech_at.setter
        def speech_at(self, b: int) -> None:  # the endpointer sets it at each detection
            self._speech_at = b
            if record and b >= 0:
                detections.append(b)

    return Planned


def paired_offline_cost(
    model: Path,
    groups: List[List[str]],
    files: List[str],
    wavs: Dict[str, str],
    repeats: int,
    method: str,
    calls: List[List[float]],
    oracle: bool = False,
) -> Dict:
    """:func:`paired_ratios` of `asr transcribe`'s recogniser (1 thread, the model's decode settings): each long
    recording segmented by ``method`` and, the control, as one stream, against its utterances each as one stream;
    and segmented with the endpointer's calls of each of ``calls`` (first, segment, waiting seconds held:
    :class:`asrlib.decode.endpoint.CallSizes`, the recogniser's ``endpoint_calls``) in place of the backend's own; with
    ``oracle``, with calls that each end just after the next speech that the endpointer detects (:func:`planned`,
    from a first pass over the recording: the least the network can run with no call cut short); with each, the
    fbank frames the network ran per frame of audio."""
    import torch

    from asrlib.app.recognizer import Recognizer
    from asrlib.decode import endpoint

    torch.set_num_threads(1)
    plain, seg = Recognizer.from_dir(model, segment="none"), Recognizer.from_dir(model, segment=method)
    ran: Dict[str, List[float]] = {}  # runner -> [fbank frames the network ran, seconds of audio]
    now = [""]

    def counted(rec: Recognizer) -> None:  # the network's frames, counted to the runner that runs it
        make = rec.backend.stream

        def stream():
            s = make()
            accept = s.accept

            def run(feats):
                ran[now[0]][0] += len(feats)
                return accept(feats)

            s.accept = run
            return s

        rec.backend.stream = stream

    counted(plain)
    counted(seg)

    oracles: Dict[str, type] = {}  # file -> the endpointer type that plans its calls (oracle)

    def runner(name: str, rec: Recognizer, sizes: endpoint.CallSizes) -> Callable:
        def run(paths: List[str]) -> None:
            now[0], rec.endpoint_calls = name, sizes
            counts = ran.setdefault(name, [0.0, 0.0])
            for p in paths:
                if name == "oracle calls":
                    rec.endpointer_type = oracles[p]
                counts[1] += rec.transcribe_file(p).duration  # the audio's seconds, without reading the file again
            rec.endpointer_type = endpoint.Endpointer

        return run

    names = {"utts": plain, method: seg, "one_stream": plain}
    sizes = {n: seg.endpoint_calls for n in names}  # the backend's own (OFFLINE_CALLS on torch)
    for c in calls:
        name = "calls " + " / ".join(f"{x:g}" for x in c)
        names[name], sizes[name] = seg, endpoint.CallSizes(*c, hold=True)
    if oracle and seg.segment_method == "endpoint":
        now[0], ran["plan"] = "plan", [0.0, 0.0]  # the first pass: not timed
        for f in files:
            detections: List[int] = []
            seg.endpointer_type = planned(detections, record=True)
            seg.transcribe_file(f)
            oracles[f] = planned(detections)  # made here, not in the timed runs
        seg.endpointer_type = endpoint.Endpointer
        names["oracle calls"], sizes["oracle calls"] = seg, seg.endpoint_calls
    out = paired_ratios(groups, files, wavs, repeats, {n: runner(n, r, sizes[n]) for n, r in names.items()})
    shift = plain.frame_shift
    for n, (frames, seconds) in ran.items():  # the network's frames per frame of audio
        if n in out:
            out[n]["network_frames"] = round(frames * shift / seconds, 3)
    return out


def paired_streaming_cost(
    bundle: Path,
    groups: List[List[str]],
    files: List[str],
    wavs: Dict[str, str],
    repeats: int,
    search: List[float],
    model: Optional[Path],
):
    """:func:`paired_ratios` of the streaming recogniser (1 thread, the bundle's chunks): the endpointed stream on
    each long recording and, the control, the recording as one stream without endpointing (the same frames as its
    utterances'), against its utterances' own streams."""
    from asrlib.export.bundle import check_bundle, read_wav_blocks
    from asrlib.export.streaming import EndpointRules, StreamingRecognizer

    how = {**dict(zip(("acoustic_scale", "blank_penalty"), search)), "model": str(model) if model else "int8"}
    plain = StreamingRecognizer(bundle, num_threads=1, **how)
    ep = StreamingRecognizer(bundle, num_threads=1, endpoint=EndpointRules.of_bundle(check_bundle(bundle)), **how)
    rate = plain.bundle.sample_rate
    chunk = rate * plain.bundle.info.get("streaming", {}).get("chunk_ms", 320) // 1000

    def runner(rec) -> Callable:
        return lambda paths: [rec.recognize_blocks(read_wav_blocks(p, rate, chunk), rate).finish() for p in paths]

    return paired_ratios(
        groups, files, wavs, repeats, {"utts": runner(plain), "endpoint": runner(ep), "one_stream": runner(plain)}
    )


def gap_interval(
    groups: List[List[str]], refs: Dict[str, str], long_hyp: List[str], pieces_hyp: List[str], draws: int = 2000
) -> List[float]:
    """95 % interval of long minus pieces %WER over the utterances: each recording's errors counted to its
    utterances (``errors_by_part``, for the long hypothesis and for the pieces' joined), the utterances resampled
    with replacement ``draws`` times (seeded; an utterance that the recordings hold more than once, as the 1 h one
    holds the set in several orders, is drawn with all its copies), the 2.5th and 97.5th percentiles of the
    resampled gap."""
    import numpy as np

    words: Dict[str, int] = {}
    diff: Dict[str, int] = {}
    for g, long, pieces in zip(groups, long_hyp, pieces_hyp):
        texts = [refs[u] for u in g]
        for u, t, a, b in zip(g, texts, errors_by_part(texts, long), errors_by_part(texts, pieces)):
            words[u] = words.get(u, 0) + len(t.split())
            diff[u] = diff.get(u, 0) + a - b
    n, d = np.asarray(list(words.values())), np.asarray([diff[u] for u in words])
    pick = np.random.default_rng(0).integers(0, len(n), (draws, len(n)))
    gaps = 100.0 * d[pick].sum(1) / np.maximum(n[pick].sum(1), 1)
    return [round(float(x), 2) for x in np.percentile(gaps, [2.5, 97.5])]


def recordings(utts: List[str], seconds: Dict[str, float], length: float, seed: int) -> List[List[str]]:
    """Groups of utterance ids, each at least ``length`` seconds (see the module docstring)."""
    total = sum(seconds[u] for u in utts)
    if total < length:
        rng, order, acc = random.Random(seed), list(utts), 0.0
        group: List[str] = []
        while acc < length:
            group += order
            acc += total
            rng.shuffle(order)
        return [group]
    groups, acc = [[]], 0.0
    for u in utts:
        groups[-1].append(u)
        acc += seconds[u]
        if acc >= length:
            groups.append([])
            acc = 0.0
    return [g for g in groups if sum(seconds[u] for u in g) >= length]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model",
        type=Path,
        default=ROOT / "recipes/digits/exp/lstm_ctc",
        help="what `asr transcribe --model` takes: a recipe's exp dir, a model dir or a mobile bundle (--streaming: "
        "an exp dir, for its mobile/bundle)",
    )
    p.add_argument(
        "--data",
        type=Path,
        default=ROOT / "recipes/digits/data/test",
        help="Kaldi data dir: wav.scp (file paths) and text",
    )
    p.add_argument("--lengths", type=float, nargs="+", default=[60, 600, 3600])
    p.add_argument(
        "--segment",
        nargs="*",
        default=["auto", "blank", "energy", "none"],
        help="offline methods (asr transcribe --segment; none given: streaming only)",
    )
    p.add_argument("--max-recordings", type=int, default=0, help="at most this many recordings per length (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--asr-args", default="", help="more `asr transcribe` options, e.g. '--segment-min-silence 0.5'")
    p.add_argument("--streaming", action="store_true", help="also the mobile bundle's streaming recogniser")
    p.add_argument(
        "--search",
        type=float,
        nargs=2,
        default=[],
        metavar=("SCALE", "PENALTY"),
        help="streaming: search at this acoustic scale and blank penalty instead of the bundle's decode settings "
        "(e.g. a bundle exported before the recipe's search was folded into it, at the recipe's)",
    )
    p.add_argument(
        "--stream-model",
        type=Path,
        help="streaming: this streaming ONNX model in place of the bundle's network (e.g. MODEL/mobile/"
        "pruned.streaming.int8.onnx against a bundle that carries the uncompressed one)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="the paired timings' repeats (offline and streaming; 0: none), and streaming: the per-utterance pass "
        "and the long recordings' runs, interleaved, this many times (the median RTF is reported)",
    )
    p.add_argument(
        "--calls",
        type=float,
        nargs=3,
        action="append",
        default=[],
        metavar=("FIRST", "SEGMENT", "WAITING"),
        help="the offline paired timing also with the endpointer's calls of these seconds (asrlib.decode.endpoint."
        "CallSizes, held) in place of the backend's own (OFFLINE_CALLS on torch); may be given more than once",
    )
    p.add_argument(
        "--oracle-calls",
        action="store_true",
        help="the offline paired timing also with calls that each end just after the next speech the endpointer "
        "detects (found by a first pass over the recording): the least time any plan of its calls could take",
    )
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    a = p.parse_args()
    if a.quick:
        a.lengths, a.segment, a.max_recordings, a.repeats = [60], ["auto"], 2, 1
    if not any((a.model / f).is_file() for f in ("final.pt", "model.json", "bundle.json")):
        raise SystemExit(f"{a.model}: no trained model (run `make run` first)")
    wavs, refs = read_table_dict(a.data / "wav.scp"), read_table_dict(a.data / "text")
    utts = sorted(u for u in wavs if u in refs)
    seconds = {u: sf.info(wavs[u]).duration for u in utts}
    figures: Dict = {
        "model": str(a.model),
        "data": str(a.data),
        "utterances": len(utts),
        "asr_args": a.asr_args,
        "search": a.search or "the bundle's",
        "stream_model": str(a.stream_model) if a.stream_model else "the bundle's",
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    with tempfile.TemporaryDirectory(prefix="long_form.") as tmp:
        tmp = Path(tmp)
        plans = {}
        for length in a.lengths:
            groups = recordings(utts, seconds, length, a.seed)
            groups = groups[: a.max_recordings] if a.max_recordings else groups
            files = []
            for i, g in enumerate(groups):
                f = tmp / f"long{int(length)}_{i}.wav"
                with sf.SoundFile(
                    str(f), "w", samplerate=sf.info(wavs[g[0]]).samplerate, channels=1, subtype="PCM_16"
                ) as w:
                    for u in g:
                        w.write(sf.read(wavs[u], dtype="int16")[0])
                files.append(str(f))
            plans[length] = (groups, files)
        needed = sorted({u for groups, _ in plans.values() for g in groups for u in g})
        scp = tmp / "wav.scp"
        scp.write_text("".join(f"{u} {wavs[u]}\n" for u in needed))
        figures["per_utt"] = {}
        # the reference speed, each utterance as one stream: measured first
        methods = sorted(a.segment, key=lambda m: m != "none")
        if methods and methods[0] != "none":
            one = run_asr(a.model, [str(scp)], tmp / "utt.jsonl", "none", a.asr_args.split())
            figures["per_utt"]["none"] = {"rtf": one["rtf"], "rss_mib": one["rss_mib"]}
        for method in methods:
            one = run_asr(a.model, [str(scp)], tmp / "utt.jsonl", method, a.asr_args.split())
            hyp = {u: r["text"] for u, r in one["results"].items()}
            figures["per_utt"][method] = {
                "wer": round(score({u: refs[u] for u in needed}, hyp).wer, 2),
                "rtf": one["rtf"],
                "rss_mib": one["rss_mib"],
            }
            for length, (groups, files) in plans.items():
                run = run_asr(a.model, files, tmp / "long.jsonl", method, a.asr_args.split())
                ref, hyp_long, hyp_pieces = {}, {}, {}
                for i, g in enumerate(groups):
                    key = Path(files[i]).stem
                    ref[key] = " ".join(refs[u] for u in g)
                    hyp_pieces[key] = " ".join(hyp[u] for u in g if hyp[u])
                    hyp_long[key] = run["results"][key]["text"]
                res = score(ref, hyp_long)
                row = {
                    "recordings": len(groups),
                    "audio_s": round(run["audio_s"], 1),
                    "words": res.num_words,
                    "wer": round(res.wer, 2),
                    "wer_pieces": round(score(ref, hyp_pieces).wer, 2),
                    "gap_ci95": gap_interval(groups, refs, list(hyp_long.values()), list(hyp_pieces.values())),
                    "rtf": run["rtf"],
                    # against each utterance decoded as one stream (segment none), the decode stage's way
                    "rtf_vs_one_stream_per_utt": round(run["rtf"] / figures["per_utt"]["none"]["rtf"], 3),
                    "rss_mib": run["rss_mib"],
                    "segments": sum(len(r.get("segments", [])) for r in run["results"].values()),
                }
                figures.setdefault(method, {})[str(int(length))] = row
                print(
                    f"{method:6s} {int(length):5d} s x{len(groups):2d}: WER {row['wer']:5.2f} (pieces "
                    f"{row['wer_pieces']:5.2f}; 95 % of the gap {row['gap_ci95']}), RTF {row['rtf']:.4f} "
                    f"({row['rtf_vs_one_stream_per_utt']}x one stream per utterance), "
                    f"peak RSS {row['rss_mib']} MiB, "
                    f"{row['segments']} segments",
                    file=sys.stderr,
                )
        timed = [m for m in methods if m != "none"]
        if timed and a.repeats > 0:
            groups, files = plans[min(plans)]  # the shortest recordings: many pairs
            paired = paired_offline_cost(a.model, groups, files, wavs, a.repeats, timed[0], a.calls, a.oracle_calls)
            figures["offline_paired"] = {"length": int(min(plans)), "method": timed[0], **paired}
            print(
                f"paired with per utterance ({int(min(plans))} s recordings, {paired['pairs']} pairs): "
                + ", ".join(f"{k} {v['median']:.3f}x {v['quartiles']}" for k, v in paired.items() if k != "pairs"),
                file=sys.stderr,
            )
        if a.streaming:
            bundle = a.model / "mobile" / "bundle"
            runs: Dict = {}  # (name, length) -> its runs, the per-utterance pass and the long ones interleaved
            jobs = [("per_utt", None, ["--wav-scp", str(scp)], False)] + [
                (name, length, files, endpoint)
                for name, endpoint in (("streaming", False), ("streaming_endpoint", True))
                for length, (_, files) in plans.items()
            ]
            for _ in range(a.repeats):
                for name, length, inputs, endpoint in jobs:
                    runs.setdefault((name, length), []).append(
                        run_streaming(bundle, inputs, tmp / "s.txt", endpoint, a.search, a.stream_model)
                    )

            def timing(rs: List[Dict]) -> Dict:  # the median RTFs of the repeats (the words are the same each time)
                rtfs, cpu = [r["rtf"] for r in rs], [r["cpu_rtf"] for r in rs]
                return {
                    "rtf": statistics.median_high(rtfs),
                    "rtf_runs": rtfs,
                    "cpu_rtf": statistics.median_high(cpu),
                    "cpu_rtf_runs": cpu,
                    "rss_mib": max(r["rss_mib"] for r in rs),
                    "network_frames": rs[0]["network_frames"],
                }

            one = runs[("per_utt", None)]
            hyp = one[0]["results"]
            figures["per_utt"]["streaming"] = {
                "wer": round(score({u: refs[u] for u in needed}, hyp).wer, 2),
                **timing(one),
            }
            groups, files = plans[min(plans)]  # the shortest recordings: many pairs
            paired = paired_streaming_cost(bundle, groups, files, wavs, a.repeats, a.search, a.stream_model)
            figures["streaming_endpoint_paired"] = {"length": int(min(plans)), **paired}
            print(
                f"paired with per utterance ({int(min(plans))} s recordings, {paired['pairs']} pairs): time "
                f"endpointed {paired['endpoint']['median']:.3f}x (quartiles {paired['endpoint']['quartiles']}), one "
                f"stream {paired['one_stream']['median']:.3f}x",
                file=sys.stderr,
            )
            for name, length, files, _ in jobs[1:]:
                groups, rs = plans[length][0], runs[(name, length)]
                keys = [Path(f).stem for f in files]
                ref = {k: " ".join(refs[u] for u in g) for k, g in zip(keys, groups)}
                pieces = {k: " ".join(hyp[u] for u in g if hyp.get(u)) for k, g in zip(keys, groups)}
                long = [rs[0]["results"].get(k, "") for k in keys]
                res = score(ref, dict(zip(keys, long)))
                row = {
                    "recordings": len(groups),
                    "words": res.num_words,
                    "wer": round(res.wer, 2),
                    "wer_pieces": round(score(ref, pieces).wer, 2),
                    "gap_ci95": gap_interval(groups, refs, long, [pieces[k] for k in keys]),
                    **timing(rs),
                }
                for k in ("rtf", "cpu_rtf"):
                    row[f"{k}_vs_per_utt"] = round(row[k] / figures["per_utt"]["streaming"][k], 3)
                figures.setdefault(name, {})[str(int(length))] = row
                print(
                    f"{name} {int(length):5d} s: WER {row['wer']:5.2f} (pieces {row['wer_pieces']:5.2f}; 95 % of the "
                    f"gap {row['gap_ci95']}), "
                    f"RTF {row['rtf']:.4f} ({row['rtf_vs_per_utt']:.2f}x per utterance's; CPU "
                    f"{row['cpu_rtf_vs_per_utt']:.2f}x), network frames "
                    f"{row['network_frames']:.2f}x the audio's",
                    file=sys.stderr,
                )
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
