"""Predicted speed-up of each distributed algorithm for N = 1..64 learners over a given link, from the timing model
(asrlib.parallel.timing) with parameters fitted on measured values; optionally validated against measured runs.

    python -m steps.scaling_report --params exp/bench_timing/params.json --link eth100 \
        --measured exp/bench_timing/measured.json --out-dir exp/scaling

Writes OUT_DIR/scaling.json (speed-up per algorithm and N), scaling.md (table + validation), scaling.png (plot).
``--link`` is one of the named links (eth10, eth100, ib_hdr, nvlink) or ``measured`` (the fitted one);
``--t-calc``/``--t-merge`` replace the measured compute times (e.g. to project a faster device: say so).
``--bandwidth-gbit`` sets the link's bandwidth (its latency kept). Compressed payloads: ``--powersgd-run EXP_DIR``
reads the bytes per step a powersgd run measured (its ``log/dist.rank0.json``, epochs after the first) as the
payload of powersgd's all-reduces; ``--diloco-period`` is H; ``--diloco-run EXP_DIR`` reads a diloco run's measured
bytes per outer step (e.g. a quantised one, ``train.dist.outer_bits`` 4) and its H (unless ``--diloco-period``);
``--topk-run EXP_DIR`` a topk run's measured bytes per step (its all-gather's payload).

    python -m steps.scaling_report --params exp/bench_timing/params.json --link eth10 --bandwidth-gbit 10 \
        --powersgd-run exp/bench_comm/powersgd_r1_s42 --diloco-period 100 --algos sync bmuf adpsgd powersgd diloco \
        --max-n 256 --out-dir exp/scaling_10g
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path
from typing import List, Optional

from asrlib.cli import run_main, setup_logging
from asrlib.parallel.timing import (
    ALGOS,
    LINKS,
    load_params,
    payload_per_outer_step,
    payload_per_step,
    speedup_table,
    step_time,
    with_bandwidth,
)
from asrlib.errors import AsrError
from asrlib.io.atomic import atomic_path, write_json, write_text

log = logging.getLogger("steps.scaling_report")


def calibrate(params, measured: List[dict]):
    """Fit T_calc to the measured 1-learner run (same machine, same load model); None if there is none."""
    ones = [m for m in measured if m["n"] == 1]
    if not ones:
        return None
    m = ones[0]
    p = params_for(params, m)
    slow = step_time("local", 1, dataclasses.replace(p, t_calc=1.0, t_merge=0.0))
    return dataclasses.replace(params, t_calc=max(m["step_s"] / slow - params.t_merge, 1e-6))


def validate(params, measured: List[dict]) -> List[dict]:
    """Predicted vs measured seconds per step (params as fitted: this machine's link, core count and measured
    compute contention)."""
    rows = []
    for m in measured:
        pred = step_time(m["algo"] if m["n"] > 1 else "local", m["n"], params_for(params, m))
        rows.append(
            {
                "algo": m["algo"],
                "n": m["n"],
                "measured_s": m["step_s"],
                "predicted_s": pred,
                "error_pct": 100.0 * (pred - m["step_s"]) / m["step_s"],
                "fit": m["n"] == 1,
            }
        )
    return rows


def params_for(params, m: dict):
    period = params.period
    for e in m.get("extra", []):
        if e.startswith("train.dist.period="):
            period = int(e.split("=", 1)[1])
    return dataclasses.replace(params, period=period)


def plot(table, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    ns = [n for n, _ in next(iter(table.values()))]
    ax.plot(ns, ns, "k:", label="linear")
    for algo, pts in table.items():
        ax.plot([n for n, _ in pts], [s for _, s in pts], label=algo)
    ax.set_xlabel("learners N")
    ax.set_ylabel("speed-up (throughput vs 1 learner)")
    ax.set_title(title, fontsize=9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", type=Path, required=True, help="fitted TimingParams JSON (bench/dist_timing.py)")
    p.add_argument("--measured", type=Path, default=None, help="measured step times to validate against")
    p.add_argument("--link", default="eth100", help=f"{', '.join(LINKS)} or measured")
    p.add_argument("--intra-link", default="nvlink", help="link inside a node (hadpsgd)")
    p.add_argument("--local-world", type=int, default=8, help="learners per node for hadpsgd")
    p.add_argument("--t-calc", type=float, default=None, help="override T_calc (s per minibatch)")
    p.add_argument("--t-merge", type=float, default=None, help="override T_merge (s)")
    p.add_argument("--period", type=int, default=None, help="K / tau (default: the fitted params')")
    p.add_argument("--max-n", type=int, default=64)
    p.add_argument("--bandwidth-gbit", type=float, default=None, help="link bandwidth in Gbit/s (latency kept)")
    p.add_argument("--powersgd-run", type=Path, default=None, help="a powersgd exp dir: its measured payload")
    p.add_argument("--diloco-period", type=int, default=None, help="H of diloco (default: the params')")
    p.add_argument("--diloco-run", type=Path, default=None, help="a diloco exp dir: its measured payload and H")
    p.add_argument("--t-quantise", type=float, default=0.0, help="diloco: quantise + dequantise s per outer step")
    p.add_argument("--topk-run", type=Path, default=None, help="a topk exp dir: its measured payload per step")
    p.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    p.add_argument("--out-dir", type=Path, required=True)
    a = p.parse_args(argv)
    setup_logging()
    if not a.params.is_file():
        raise AsrError(f"{a.params} does not exist; run bench/dist_timing.py first")
    fitted = load_params(a.params)
    for name, val in (("link", a.link), ("intra-link", a.intra_link)):
        if val != "measured" and val not in LINKS:
            raise AsrError(f"--{name} must be measured or one of {', '.join(LINKS)}, not {val!r}")
    proj = dataclasses.replace(
        fitted,
        link=fitted.link if a.link == "measured" else LINKS[a.link],
        allreduce_link=fitted.allreduce_link if a.link == "measured" else None,
        intra_link=fitted.intra_link if a.intra_link == "measured" else LINKS[a.intra_link],
        local_world=a.local_world,
        cores=None,
        t_calc=a.t_calc if a.t_calc is not None else fitted.t_calc,
        t_merge=a.t_merge if a.t_merge is not None else fitted.t_merge,
        period=a.period or fitted.period,
        diloco_period=a.diloco_period or fitted.diloco_period,
    )
    if a.bandwidth_gbit:
        proj = dataclasses.replace(proj, link=with_bandwidth(proj.link, a.bandwidth_gbit), allreduce_link=None)
    if a.powersgd_run is not None:
        summary = a.powersgd_run / "log" / "dist.rank0.json"
        if not summary.is_file():
            raise AsrError(f"{summary} does not exist: --powersgd-run must be the exp dir of a finished powersgd run")
        proj = dataclasses.replace(proj, powersgd_payload=payload_per_step(json.loads(summary.read_text())))
    proj = dataclasses.replace(proj, t_quantise=a.t_quantise)
    if a.diloco_run is not None:
        summary = a.diloco_run / "log" / "dist.rank0.json"
        if not summary.is_file():
            raise AsrError(f"{summary} does not exist: --diloco-run must be the exp dir of a finished diloco run")
        d = json.loads(summary.read_text())
        proj = dataclasses.replace(
            proj,
            diloco_payload=payload_per_outer_step(d),
            diloco_period=a.diloco_period or d["H"],
            diloco_gather=bool(d.get("outer_topk")),  # sparsified: all-gathered
        )
    if a.topk_run is not None:
        summary = a.topk_run / "log" / "dist.rank0.json"
        if not summary.is_file():
            raise AsrError(f"{summary} does not exist: --topk-run must be the exp dir of a finished topk run")
        proj = dataclasses.replace(proj, topk_payload=payload_per_step(json.loads(summary.read_text()), 0))
    ns = [n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n <= a.max_n]
    table = speedup_table(proj, a.algos, ns)
    out = {"params": dataclasses.asdict(proj), "speedup": table}
    md = [
        f"# Predicted speed-up ({proj.link.name}; intra-node {proj.intra_link.name}, {proj.local_world} per node)",
        "",
        f"T_calc = {proj.t_calc * 1e3:.2f} ms, T_merge = {proj.t_merge * 1e3:.3f} ms, model = "
        f"{proj.model_bytes / 1e6:.2f} MB, T_transmit = {proj.transmit() * 1e3:.3f} ms, K = tau = {proj.period}, "
        f"diloco H = {proj.diloco_period}, powersgd payload "
        + (
            f"{proj.powersgd_payload / 1e3:.1f} kB per step (measured, {a.powersgd_run})"
            if proj.powersgd_payload
            else "not measured (the uncompressed model)"
        )
        + (
            f", diloco payload {proj.diloco_payload / 1e3:.1f} kB per outer step (measured, {a.diloco_run})"
            if proj.diloco_payload
            else ""
        )
        + (
            f", topk payload {proj.topk_payload / 1e3:.1f} kB per step (measured, {a.topk_run})"
            if proj.topk_payload
            else ""
        )
        + (
            " (T_calc/T_merge overridden)"
            if a.t_calc is not None or a.t_merge is not None
            else " (T_calc, T_merge measured on this machine, 1 thread)"
        ),
        "",
        "| algo | " + " | ".join(f"N={n}" for n in ns) + " |",
        "|---|" + "---:|" * len(ns),
    ]
    for algo, pts in table.items():
        md.append(f"| {algo} | " + " | ".join(f"{s:.2f}" for _, s in pts) + " |")
    if a.measured is not None:
        measured = json.loads(a.measured.read_text())
        fit = calibrate(fitted, measured) or fitted
        rows = validate(fit, measured)
        out["validation"] = rows
        out["validation_t_calc"] = fit.t_calc
        errs = [abs(r["error_pct"]) for r in rows if not r["fit"]]
        md += [
            "",
            f"## Validation on this machine ({fitted.link.name} Gloo link: latency "
            f"{fitted.link.latency * 1e6:.0f} us, {fitted.link.bandwidth / 1e9:.2f} GB/s; {fitted.cores} cores; "
            f"T_calc fitted to the 1-learner run: {fit.t_calc * 1e3:.1f} ms uncontended; compute contention "
            + (", ".join(f"c({n}) = {c:.2f}" for n, c in sorted(fitted.contention.items())) or "not measured")
            + ")",
            "",
            "| algo | N | load avg | measured s/step | predicted s/step | error |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r, m in zip(rows, measured):
            load = f"{m['load_before'][0]:.1f}" if "load_before" in m else "-"
            md.append(
                f"| {r['algo']} | {r['n']} | {load} | {r['measured_s']:.3f} | {r['predicted_s']:.3f} | "
                + ("(fit) |" if r["fit"] else f"{r['error_pct']:+.1f} % |")
            )
        if errs:
            md += [
                "",
                f"Mean absolute error {sum(errs) / len(errs):.1f} %, max {max(errs):.1f} % "
                f"(over the {len(errs)} runs with N > 1).",
            ]
    a.out_dir.mkdir(parents=True, exist_ok=True)
    write_json(a.out_dir / "scaling.json", out)
    write_text(a.out_dir / "scaling.md", "\n".join(md) + "\n")
    plot(
        table,
        a.out_dir / "scaling.png",
        f"timing model: {proj.link.name}, T_calc {proj.t_calc * 1e3:.1f} ms, "
        f"model {proj.model_bytes / 1e6:.1f} MB, K=tau={proj.period}",
    )
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    run_main(main)
