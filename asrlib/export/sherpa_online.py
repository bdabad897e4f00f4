"""sherpa-onnx's *streaming* recogniser on an LC-BLSTM bundle: the chunk model dressed as a WeNet streaming CTC model.

sherpa-onnx's ``OnlineRecognizer`` runs a WeNet CTC model chunk by chunk (its ``OnlineWenetCtcModel``): it feeds
``(chunk_size - 1) · subsampling_factor + right_context + 1`` fbank frames per call, steps by ``chunk_size ·
subsampling_factor``, and carries an attention cache (num_blocks, head, chunk_size · num_left_chunks, 2 · output_size
/ head) and a convolution cache (num_blocks, 1, output_size, cnn_module_kernel - 1), sizes read from the model's
metadata; its fbank is of samples in int16 range. :meth:`asrlib.export.lc_onnx.LcExport.sherpa_online` maps an
LC-BLSTM's chunk model onto that: ``chunk_size`` = N, ``subsampling_factor`` = S, ``right_context`` = (M + 1) S - 1
(so a call is one window of (N + M) S frames and the step N S), ``num_left_chunks`` 0 (an empty attention cache),
``cnn_module_kernel`` 3 with ``output_size`` = H: the convolution cache holds the forward state (h, c); the int16
range is a constant on every log-mel bin (``2 ln 32768``), taken off before the CMVN. What differs from the bundle's
own streaming recogniser: sherpa-onnx has no ``valid`` input, so the end of the input is the window of the padding
that the caller adds (:data:`TAIL_SECONDS` of zeros here), every frame of it taken as real; bins whose energy is at
the log floor are off by the shift. The CTC graph search is sherpa-onnx's (``OnlineCtcFstDecoderConfig``: the
bundle's TLG.fst, max-active 3000), which its Python factory ``from_wenet_ctc`` does not expose: the configuration is
built from sherpa-onnx's config classes.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from asrlib.errors import AsrError, PathLike
from asrlib.export.bundle import SHERPA_ONLINE_TAIL_SECONDS

TAIL_SECONDS = SHERPA_ONLINE_TAIL_SECONDS


class SherpaOnlineRecognizer:
    """sherpa-onnx's ``OnlineRecognizer`` on a bundle's ``model.sherpa-online.int8.onnx`` with the bundle's TLG."""

    def __init__(self, bundle_dir: PathLike, num_threads: int = 1, tail_seconds: float = TAIL_SECONDS):
        from sherpa_onnx.lib import _sherpa_onnx as so

        from asrlib.export.bundle import SHERPA_MAX_ACTIVE, SHERPA_ONLINE, check_bundle

        self.bundle = b = check_bundle(bundle_dir)
        if not b.path(SHERPA_ONLINE).is_file():
            raise AsrError(f"{b.dir} has no {SHERPA_ONLINE} (an LC-BLSTM bundle of steps.export_mobile has it)")
        lc = b.info.get("streaming", {}).get("lc_blstm", {})
        self.id2word = b.id2word()
        self.tail = float(tail_seconds)
        model = so.OnlineModelConfig(
            wenet_ctc=so.OnlineWenetCtcModelConfig(
                model=str(b.path(SHERPA_ONLINE)), chunk_size=int(lc["chunk_frames"]), num_left_chunks=0
            ),
            tokens=str(b.path("tokens.txt")),
            num_threads=num_threads,
        )
        cfg = so.OnlineRecognizerConfig(
            feat_config=so.FeatureExtractorConfig(sampling_rate=b.sample_rate, feature_dim=b.feat_dim),
            model_config=model,
            endpoint_config=so.EndpointConfig(),
            enable_endpoint=False,
            decoding_method="greedy_search",
            ctc_fst_decoder_config=so.OnlineCtcFstDecoderConfig(
                graph=str(b.path("TLG.fst")), max_active=SHERPA_MAX_ACTIVE
            ),
        )
        self.recognizer = so.OnlineRecognizer(cfg)

    def recognize(self, samples: np.ndarray, sample_rate: int, chunk_samples: Optional[int] = None) -> List[str]:
        """Feed ``samples`` in chunks (all at once when None), then the tail of zeros; the final words."""
        from asrlib.export.bundle import check_audio

        x = check_audio(samples, sample_rate, self.bundle.sample_rate)
        rec, sr = self.recognizer, self.bundle.sample_rate
        s = rec.create_stream()
        step = chunk_samples or max(1, len(x))
        for i in range(0, len(x), step):
            s.accept_waveform(sr, x[i : i + step])
            while rec.is_ready(s):
                rec.decode_stream(s)
        s.accept_waveform(sr, np.zeros(int(self.tail * sr), np.float32))
        s.input_finished()
        while rec.is_ready(s):
            rec.decode_stream(s)
        out = []
        for w in rec.get_result(s).words:
            if int(w) not in self.id2word:
                raise AsrError(f"sherpa-onnx returned word id {w}, which is not in {self.bundle.path('words.txt')}")
            out.append(self.id2word[int(w)])
        return out
