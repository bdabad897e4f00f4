"""An analytical timing model of data-parallel training, in the form of the slides' ring analysis.

Quantities (seconds, per learner, per minibatch):

- ``T_calc``: forward + backward of one minibatch; ``T_merge``: merging one update into a model (the optimizer
  step, or adding a model/gradient vector); both measured on one learner.
- ``T_transmit = latency + model_bytes / bandwidth``: sending the model (or a gradient) to a neighbour over a link.
- ``T_allreduce(n) = 2 (n-1) latency + 2 (n-1)/n * model_bytes / bandwidth`` (ring all-reduce). A library's
  collective is slower than its point-to-point transfer (reduction arithmetic, copies, chunking), so where
  all-reduces were timed on the machine (``allreduce_link``, fitted to this formula) they replace the
  point-to-point link's figures for that link.
- compute contention: when ``n`` learners (1 thread each) share ``cores`` CPU cores, T_calc and T_merge grow by
  a factor ``c(n)`` measured on the machine (``contention``: n processes doing the same forward/backward at once,
  no communication; c(1) = 1). Beyond the largest measured n, ``c`` grows in proportion to n; with no measurement
  ``c(n) = max(1, n / cores)``. Learners with a device each (``cores`` = None) do not contend.

Per-minibatch time of one learner with n learners (the algorithms as implemented in asrlib.parallel):

- local (n = 1): ``T_calc + T_merge``
- sync: ``T_calc + T_merge + T_allreduce(n)`` (the all-reduce follows the backward pass; no overlap)
- ma, period K: ``T_calc + T_merge + (T_allreduce(n) + T_merge) / K``
- bmuf, period tau: ``T_calc + T_merge + (T_allreduce(n) + 3 T_merge) / tau`` (mean, momentum, model update)
- adpsgd: ``T_calc + 2 T_merge + max(0, 2 T_transmit - T_calc)``: one exchange (send, receive) per step,
  overlapped with the next minibatch; the merge is added between steps.
- hadpsgd, L learners per node: ``T_calc + 2 T_merge + T_allreduce_intra(L) + T_transmit_intra +
  max(0, 2 T_transmit - T_calc)`` (node all-reduce every step, merge broadcast in the node, gossip overlapped).
- asgd: ``max(T_calc + 2 T_merge + 2 T_transmit, n (2 model_bytes / bandwidth + T_merge))``: a worker pushes and
  pulls every step; the server's one link and its serial apply are shared by all n workers.
- powersgd: ``T_calc + T_merge + T_compress + T_allreduce(n; payload, 3 calls)``: per step three all-reduces per
  bucket (the uncompressed vectors, P, Q) whose bytes are the compressed payload — learnt from a run's measured
  bytes per step (:func:`payload_per_step`), not computed from the shapes; ``T_compress`` the hook's matrix
  products (measured or 0).
- diloco, H inner steps: ``T_calc + T_merge + (T_allreduce(n; payload) + 2 T_merge + T_quantise) / H`` (one
  all-reduce of the pseudo-gradient, then the outer Nesterov step and the copy into the model). The payload is the
  float32 model, or with ``outer_bits`` 8 / 4 the quantised vector (codes + scales) a learner hands over per outer
  step, learnt from a run's measured bytes (:func:`payload_per_outer_step`): its reduce-scatter (all-to-all of the
  other learners' chunks) and all-gather move ``2 (n-1)/n`` of it over each link with ``2 (n-1)`` latencies, as a
  ring all-reduce does; ``T_quantise`` is the quantising and dequantising (measured or 0). With ``outer_topk``
  (``diloco_gather``) the payload is all-gathered instead: ``T_allgather(n; payload)`` as topk's below.
- topk: ``T_calc + T_merge + T_sparsify + T_allgather(n; payload)``: per step one all-gather of each learner's
  positions and values (``payload`` bytes, learnt from a run's measured bytes per step as powersgd's), ring
  all-gather ``(n-1) latency + (n-1) payload / bandwidth``: every learner receives every other's message, so the
  time grows with n where an all-reduce's stays ~2x the payload; ``T_sparsify`` the selection (measured or 0).
- ring (slides): ``T_calc + T_merge + T_wait`` with ``T_wait = max(n T_transmit + (n-1) T_merge - T_calc, 0)``,
  i.e. speed-up ``n (T_calc + T_merge) / (T_calc + T_merge + T_wait)``: n while the model's lap fits in one
  T_calc, then saturating near ``(T_calc + T_merge) / (T_transmit + T_merge)``.

Speed-up = throughput with n learners / throughput of one: ``n * t_local / t_algo(n)`` (samples per second; equal
minibatch size per learner). It says nothing about convergence per sample (see the P1 benchmark for that).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np


@dataclass
class Link:
    name: str
    bandwidth: float  # bytes per second, per direction
    latency: float  # seconds per message


LINKS: Dict[str, Link] = {
    "eth10": Link("10 Gb/s Ethernet", 10e9 / 8, 20e-6),
    "eth100": Link("100 Gb/s Ethernet", 100e9 / 8, 10e-6),
    "ib_hdr": Link("InfiniBand HDR 200 Gb/s (GPUDirect RDMA)", 200e9 / 8, 2e-6),
    "nvlink": Link("NVLink 4 (H100, 450 GB/s per direction)", 450e9, 2e-6),
}

ALGOS = ("sync", "ma", "bmuf", "adpsgd", "hadpsgd", "asgd", "ring", "powersgd", "diloco", "topk")


@dataclass
class TimingParams:
    t_calc: float  # s, forward + backward per minibatch (one learner, uncontended)
    t_merge: float  # s, one optimizer step / vector merge of the model
    model_bytes: float
    link: Link
    period: int = 4  # K (ma), tau (bmuf)
    local_world: int = 8  # hadpsgd: learners per node
    intra_link: Link = field(default_factory=lambda: LINKS["nvlink"])
    cores: Optional[int] = None  # learners share this many cores (None: each learner has its own device)
    contention: Dict[int, float] = field(default_factory=dict)  # n -> measured T_calc(n) / T_calc(1) on those cores
    allreduce_link: Optional[Link] = None  # all-reduce over ``link`` as timed (None: derived from ``link``)
    # powersgd: bytes a learner hands to the all-reduces per step once compression runs (measured; 0 = not
    # measured: the uncompressed model_bytes), the all-reduces per step and the compression's compute per step
    powersgd_payload: float = 0.0
    powersgd_calls: int = 3
    t_compress: float = 0.0
    diloco_period: int = 500  # H
    # diloco: bytes a learner hands over per outer step (measured; 0 = not measured: the float32 model_bytes) and the
    # quantise / dequantise compute per outer step
    diloco_payload: float = 0.0
    t_quantise: float = 0.0
    diloco_gather: bool = False  # diloco outer_topk: the payload is all-gathered (positions + values), not reduced
    # topk: bytes a learner hands to the all-gather per step (measured; 0 = not measured: the float32 model_bytes)
    # and the selection's compute per step
    topk_payload: float = 0.0
    t_sparsify: float = 0.0

    def slowdown(self, n: int) -> float:
        """c(n): how much longer a minibatch's computation takes when n learners share the cores."""
        if not self.cores:
            return 1.0
        measured = {int(k): v for k, v in self.contention.items() if int(k) <= n}
        if not measured:
            return max(1.0, n / self.cores)
        m = max(measured)
        return measured[m] * max(1.0, n / m)

    def allgather(self, n: int, nbytes: float) -> float:
        """Ring all-gather of ``nbytes`` from each of ``n`` learners (the all-reduce's link figures)."""
        link = self.allreduce_link if self.allreduce_link is not None else self.link
        return 0.0 if n <= 1 else (n - 1) * (link.latency + nbytes / link.bandwidth)

    def transmit(self, link: Optional[Link] = None) -> float:
        link = link or self.link
        return link.latency + self.model_bytes / link.bandwidth

    def allreduce(self, n: int, link: Optional[Link] = None, nbytes: Optional[float] = None, calls: int = 1) -> float:
        """Ring all-reduce of ``nbytes`` (default: the model) among ``n`` learners in ``calls`` collectives."""
        link = link or self.link
        if self.allreduce_link is not None and link == self.link:
            link = self.allreduce_link
        if n <= 1:
            return 0.0
        b = self.model_bytes if nbytes is None else nbytes
        return 2 * (n - 1) * link.latency * calls + 2 * (n - 1) / n * b / link.bandwidth


def step_time(algo: str, n: int, p: TimingParams) -> float:
    """Seconds per minibatch of one learner when ``n`` learners run ``algo`` (``local`` = one learner)."""
    slow = p.slowdown(n)
    tc, tm = p.t_calc * slow, p.t_merge * slow
    if algo == "local" or n == 1:
        return tc + tm
    if algo == "sync":
        return tc + tm + p.allreduce(n)
    if algo == "ma":
        return tc + tm + (p.allreduce(n) + tm) / p.period
    if algo == "bmuf":
        return tc + tm + (p.allreduce(n) + 3 * tm) / p.period
    if algo == "adpsgd":
        return tc + 2 * tm + max(0.0, 2 * p.transmit() - tc)
    if algo == "hadpsgd":
        L = min(p.local_world, n)
        inter = max(0.0, 2 * p.transmit() - tc) if n > L else 0.0
        return tc + 2 * tm + p.allreduce(L, p.intra_link) + (p.transmit(p.intra_link) if L > 1 else 0.0) + inter
    if algo == "asgd":
        server = n * (2 * p.model_bytes / p.link.bandwidth + tm)
        return max(tc + 2 * tm + 2 * p.transmit(), server)
    if algo == "ring":
        return tc + tm + ring_wait(n, tc, p.transmit(), tm)
    if algo == "powersgd":
        payload = p.powersgd_payload or p.model_bytes
        return tc + tm + p.t_compress * slow + p.allreduce(n, nbytes=payload, calls=p.powersgd_calls)
    if algo == "diloco":
        payload = p.diloco_payload or p.model_bytes
        shipped = p.allgather(n, payload) if p.diloco_gather else p.allreduce(n, nbytes=payload)
        exchange = shipped + p.t_quantise * slow
        return tc + tm + (exchange + 2 * tm) / p.diloco_period
    if algo == "topk":
        return tc + tm + p.t_sparsify * slow + p.allgather(n, p.topk_payload or p.model_bytes)
    raise ValueError(f"unknown algorithm {algo!r}")


def ring_wait(n: int, t_calc: float, t_transmit: float, t_merge: float) -> float:
    """The slides' T_wait = max{n T_transmit + (n-1) T_merge - T_calc, 0}."""
    return max(n * t_transmit + (n - 1) * t_merge - t_calc, 0.0)


def speedup(algo: str, n: int, p: TimingParams) -> float:
    return n * step_time("local", 1, p) / step_time(algo, n, p)


def speedup_table(
    p: TimingParams, algos: Sequence[str] = ALGOS, ns: Iterable[int] = range(1, 65)
) -> Dict[str, List[Tuple[int, float]]]:
    return {a: [(n, speedup(a, n, p)) for n in ns] for a in algos}


def with_bandwidth(link: Link, gbit: float) -> Link:
    """``link`` with its bandwidth set to ``gbit`` Gbit/s (latency kept)."""
    return Link(f"{link.name.split(' (')[0]} at {gbit:g} Gb/s", gbit * 1e9 / 8, link.latency)


def payload_per_step(summary: dict, skip_epochs: int = 1) -> float:
    """Bytes one learner handed to the collectives per step, from a run's ``log/dist.rank<R>.json`` (the measured
    per-epoch bytes, :mod:`asrlib.parallel.meter`), over the epochs after the first ``skip_epochs`` (powersgd's
    uncompressed warm-up)."""
    ep = summary["epochs"][skip_epochs:] or summary["epochs"]
    steps = sum(e["steps"] for e in ep)
    return sum(e["measured_sent_bytes"] for e in ep) / max(steps, 1)


def payload_per_outer_step(summary: dict) -> float:
    """Bytes one learner handed to the collectives per diloco outer step, from a run's ``log/dist.rank<R>.json``
    (its measured training bytes over its outer steps)."""
    return summary["measured_sent_bytes"] / max(summary["outer_steps"], 1)


def fit_link(sizes: Sequence[float], seconds: Sequence[float]) -> Link:
    """Least-squares ``t = latency + bytes / bandwidth`` from one-way transfer times."""
    A = np.stack([np.ones(len(sizes)), np.asarray(sizes, dtype=float)], axis=1)
    (lat, inv_bw), *_ = np.linalg.lstsq(A, np.asarray(seconds, dtype=float), rcond=None)
    return Link("measured", 1.0 / max(inv_bw, 1e-15), max(lat, 0.0))


def fit_allreduce(points: Sequence[Tuple[int, float, float]]) -> Link:
    """Least-squares ``latency`` and ``bandwidth`` of :meth:`TimingParams.allreduce` from timed all-reduces
    ``(learners, bytes, seconds)``."""
    A = np.array([[2.0 * (n - 1), 2.0 * (n - 1) / n * b] for n, b, _ in points])
    (lat, inv_bw), *_ = np.linalg.lstsq(A, np.array([t for _, _, t in points]), rcond=None)
    return Link("measured all-reduce", 1.0 / max(inv_bw, 1e-15), max(lat, 0.0))


def params_to_json(p: TimingParams) -> dict:
    return dataclasses.asdict(p)


def params_from_json(d: dict) -> TimingParams:
    d = dict(d)
    d.pop("background_load", None)  # parameter files written before contention was measured
    d["link"] = Link(**d["link"])
    d["intra_link"] = Link(**d["intra_link"])
    d["contention"] = {int(k): float(v) for k, v in d.get("contention", {}).items()}
    d["allreduce_link"] = Link(**d["allreduce_link"]) if d.get("allreduce_link") else None
    return TimingParams(**d)


def save_params(path: Path, p: TimingParams) -> None:
    from asrlib.io.atomic import write_json

    write_json(path, params_to_json(p))


def load_params(path: Path) -> TimingParams:
    return params_from_json(json.loads(Path(path).read_text()))
