"""Recognise audio files with a mobile bundle: asrlib's streaming recogniser or sherpa-onnx (the on-device engine).

    python -m steps.recognize_mobile --bundle exp/lstm_ctc/mobile/bundle [--engine streaming|sherpa|sherpa-streaming] \
        [--chunk-ms MS] [--endpoint [--segment-min-silence S] [--segment-pad S] [--segment-max-seconds S]] \
        [--num-threads 1] [--format text|jsonl|srt|vtt] (--wav-scp data/test/wav.scp | a.wav b.wav ...) [-o hyp.txt]

``--endpoint`` (streaming): a long recording is cut into segments at its pauses, each decoded from a zero state, by
the bundle's endpoint rules (:class:`asrlib.export.streaming.EndpointRules`: its ``decode`` settings, as
``asr transcribe`` uses a model dir's), or by the ``--segment-*`` values given (the same options as ``asr
transcribe``'s), also for a bundle whose ``decode.segment`` is ``none``.
sherpa-onnx's engine (its offline recogniser) takes each file as one utterance: a file of a minute or more gets a
note saying so, and ``--endpoint`` with it is an error.
The search is the bundle's ``decode`` settings (the recipe's acoustic scale and blank penalty, which its networks'
output carries so that sherpa-onnx searches with them too); ``--acoustic-scale`` / ``--blank-penalty`` (streaming)
replace them (docs/mobile-export.md). ``--model PATH`` (streaming) runs another streaming ONNX model with the
bundle's signature in place of the bundle's network, e.g. the export dir's uncompressed or pruned one.

Output: Kaldi ``text`` lines ``KEY WORD...`` (stdout, or ``-o`` written atomically; a file's key is its name
without the extension). Streaming also writes what ``asr transcribe`` does: ``--format jsonl`` (words with times
and confidences, and the segments: with ``--endpoint`` those cut at pauses, else the file as one), ``srt`` or
``vtt`` (subtitles; one ``-o DIR/KEY.srt`` per file when there are several). Word times need the bundle's
``lexicon.txt``. A summary line (utterances, audio seconds, processing seconds, RTF, peak memory) goes to
stderr; processing time is each file's from its opening to its words, the bundle's loading left out (streaming: the
stream's creation and the file's reading included; sherpa: the recognition of the decoded samples), then the
process's CPU time over all files (reading included; on a busy machine it moves less than the wall time). Streaming also
prints how many fbank frames the network ran against the audio's (more than 1x with ``--endpoint``: the detector
over pauses and the reruns from their middle). A broken bundle, audio at another sample rate or with several
channels stops with one ``ERROR`` line (exit status 2).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

from asrlib.app.cli_asr import (
    FORMATS,
    LONG_FILE_SECONDS,
    add_pause_args,
    output_file,
    subtitles_dir_for,
    write_result,
)
from asrlib.cli import run_main
from asrlib.config import SEGMENT_PAUSE_KEYS
from asrlib.errors import AsrError
from asrlib.io.tables import read_table


def peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM (Linux; reset at exec, unlike ru_maxrss, which a child started
    by fork+exec inherits from its parent), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument(
        "--engine",
        choices=("streaming", "sherpa", "sherpa-streaming"),
        default="streaming",
        help="sherpa-streaming: sherpa-onnx's OnlineRecognizer on an LC-BLSTM bundle (asrlib.export.sherpa_online)",
    )
    p.add_argument(
        "--chunk-ms",
        type=int,
        default=None,
        help="streaming: audio per call (0 = whole file at once; default: the bundle's chunk_ms, or 320)",
    )
    p.add_argument(
        "--endpoint", action="store_true", help="streaming: segments cut at pauses by the bundle's endpoint rules"
    )
    add_pause_args(p.add_argument_group("endpoint rules", "with --endpoint, in place of the bundle's decode settings"))
    p.add_argument(
        "--acoustic-scale",
        type=float,
        help="streaming: the search's acoustic scale (default: the bundle's, what sherpa-onnx searches with)",
    )
    p.add_argument(
        "--blank-penalty",
        type=float,
        help="streaming: subtracted from the blank's log-prob before the search (default: the bundle's)",
    )
    p.add_argument(
        "--model",
        type=Path,
        help="streaming: another streaming ONNX model with the bundle's signature in place of the bundle's network "
        "(e.g. the export dir's baseline.streaming.int8.onnx or pruned.streaming.int8.onnx), for comparisons",
    )
    p.add_argument("--num-threads", type=int, default=1)
    p.add_argument("--format", choices=FORMATS, default="text", help="streaming: also jsonl, srt or vtt")
    p.add_argument("--wav-scp", type=Path, help="Kaldi wav.scp (KEY PATH lines)")
    p.add_argument("-o", "--output", type=Path)
    p.add_argument("wavs", nargs="*")
    a = p.parse_args(argv)
    if a.wav_scp:
        if not a.wav_scp.is_file():
            raise AsrError(f"{a.wav_scp} does not exist")
        items = read_table(a.wav_scp)
    else:
        items = [(Path(w).stem, w) for w in a.wavs]
    if not items:
        raise AsrError("no audio given (pass files or --wav-scp)")
    overrides = {k: getattr(a, k) for k in SEGMENT_PAUSE_KEYS}
    given = [f"--{k.replace('_', '-')}" for k, v in overrides.items() if v is not None]
    if a.endpoint and a.engine != "streaming":
        raise AsrError(
            "--endpoint needs --engine streaming (sherpa-onnx's offline recogniser takes a file as one utterance)"
        )
    if given and not a.endpoint:
        raise AsrError(f"{', '.join(given)} set the streaming engine's endpoint rules: add --endpoint")
    if (a.acoustic_scale, a.blank_penalty) != (None, None) and a.engine != "streaming":
        raise AsrError(
            "--acoustic-scale and --blank-penalty need --engine streaming (sherpa-onnx searches with what the "
            "bundle's networks carry: its decode settings)"
        )
    if a.model is not None and a.engine != "streaming":
        raise AsrError("--model needs --engine streaming (sherpa-onnx runs the bundle's own networks)")
    if a.model is not None and not a.model.is_file():
        raise AsrError(f"--model {a.model}: no such file")
    if a.format != "text" and a.engine != "streaming":
        raise AsrError(f"--format {a.format} needs --engine streaming (sherpa-onnx's gives text only)")
    subtitles_dir = subtitles_dir_for(a.format, a.output, len(items))
    from asrlib.export.bundle import SherpaRecognizer, read_wav, read_wav_blocks

    if a.engine == "sherpa-streaming":
        from asrlib.export.sherpa_online import SherpaOnlineRecognizer

        online = SherpaOnlineRecognizer(a.bundle, num_threads=a.num_threads)
        rate = online.bundle.sample_rate
        step = rate * (a.chunk_ms if a.chunk_ms is not None else 320) // 1000

        def run(key, path):
            x = read_wav(path, rate)
            t0 = time.perf_counter()
            words = online.recognize(x, rate, step or None)
            return {"text": " ".join(words)}, len(x), time.perf_counter() - t0
    elif a.engine == "sherpa":
        rec = SherpaRecognizer(a.bundle, num_threads=a.num_threads)
        rate = rec.bundle.sample_rate

        def run(key, path):
            x = read_wav(path, rate)
            if len(x) >= LONG_FILE_SECONDS * rate:  # one state carried over all of it: long-form WER suffers
                print(
                    f"recognize_mobile: {key}: {len(x) / rate:.0f} s decoded as one utterance by sherpa-onnx's offline "
                    "recogniser; for long recordings use --engine streaming --endpoint",
                    file=sys.stderr,
                )
            t0 = time.perf_counter()
            words = rec.recognize(x, rate)
            return {"text": " ".join(words)}, len(x), time.perf_counter() - t0
    else:
        from asrlib.app.cli_asr import file_progress
        from asrlib.app.word_times import result_of_stream
        from asrlib.export.bundle import check_bundle
        from asrlib.lang.lexicon import read_lexicon_ids
        from asrlib.export.streaming import EndpointRules, StreamingRecognizer

        rules = None
        if a.endpoint:
            rules = EndpointRules.of_bundle(check_bundle(a.bundle, verify=False), even_if_off=True, **overrides)
        rec = StreamingRecognizer(
            a.bundle,
            model=str(a.model) if a.model is not None else "int8",
            num_threads=a.num_threads,
            endpoint=rules,
            acoustic_scale=a.acoustic_scale,
            blank_penalty=a.blank_penalty,
        )
        rate = rec.bundle.sample_rate
        chunk_ms = a.chunk_ms
        if chunk_ms is None:
            chunk_ms = rec.bundle.info.get("streaming", {}).get("chunk_ms", 320)
        chunk = int(rate * chunk_ms / 1000)  # 0: the whole file at once
        lexicon = rec.bundle.dir / "lexicon.txt"
        prons = read_lexicon_ids(rec.bundle.dir) if a.format != "text" and lexicon.is_file() else {}

        def run(key, path):  # the file read chunk by chunk as it is fed: memory does not grow with its length
            t0 = time.perf_counter()  # the whole file's time: its stream's creation and its reading included
            bar = file_progress(key, path)  # a file of a minute or more: a progress bar in seconds of audio
            blocks = read_wav_blocks(path, rate, chunk) if chunk > 0 else [read_wav(path, rate)]
            stream = rec.recognize_blocks(blocks, rate, bar.update if bar is not None else None)
            if bar is not None:
                bar.close()
            words, spent = stream.finish(), time.perf_counter() - t0
            frames[0] += stream.frames_used
            frames[1] += stream.network_frames
            samples = sum(t.samples for t in stream.timings)
            if a.format == "text":
                return {"text": " ".join(words)}, samples, spent
            res = result_of_stream(stream.all_segments(), prons, rec.frame_seconds, samples / rate)
            return res.to_dict(), samples, spent

    frames = [0, 0]  # streaming: fbank frames of the audio, and those the network ran (the detector's, reruns')

    results, audio_s, proc_s, cpu0 = [], 0.0, 0.0, time.process_time()
    for key, path in items:
        res, samples, seconds = run(key, path)
        proc_s += seconds
        audio_s += samples / rate
        results.append((key, path, res))
    cpu_s = time.process_time() - cpu0  # all files, their reading included: less moved by a busy machine
    with output_file(a.output, subtitles_dir) as out:
        for key, path, res in results:
            write_result(out, a.format, key, str(path), res, subtitles_dir)
    peak_mb = peak_rss_mb()
    print(
        f"recognize_mobile: {len(items)} utterances, {audio_s:.1f} s audio, {proc_s:.2f} s processing, "
        f"RTF {proc_s / max(audio_s, 1e-9):.4f}, peak RSS {peak_mb:.0f} MB ({a.engine}, {a.num_threads} thread)",
        file=sys.stderr,
    )
    print(f"recognize_mobile: CPU {cpu_s:.3f} s, CPU RTF {cpu_s / max(audio_s, 1e-9):.5f}", file=sys.stderr)
    if frames[0]:
        print(
            f"recognize_mobile: the network ran {frames[1]} fbank frames for {frames[0]} of audio "
            f"({frames[1] / frames[0]:.3f}x)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    run_main(main)
