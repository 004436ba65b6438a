"""The bursty workload at fixed depths: what each batch of depth buys, and where
the adaptive depth and torchdata.nodes stand on that curve.

Run: KERAS_BACKEND=torch .venv/bin/python benchmarks/bursty_depths.py [--rounds 5] [--out benchmarks/results]

The bursty workload of ``benchmarks/prefetcher.py`` (load: an 8 ms sleep and a
2 MiB numpy pass, 4 thread workers; the consumer's steps 16 of 1 ms, then 4 of
20 ms, in turn; 600 steps, 40 of warm-up). Interleaved for ``--rounds`` rounds:
``queuetune.Prefetcher`` with its defaults (adaptive, the benchmark's budget
of 16 batches), the Prefetcher at each fixed depth of ``DEPTHS``
(``adaptive=False``), and torchdata.nodes (``ParallelMapper(in_order=True)``
-> ``Prefetcher(2)``), peaks counted as in that benchmark. Per loader: the
median throughput, the peak of batches started and not released, the share of
the time the consumer waited for its batch after its first (the Prefetcher's
own record), and the gain per batch of depth from one fixed depth to the next.

Why: on this workload the adaptive depth settles at 11 or 12 where nodes
holds 10 besides the batch in the step. Each batch deeper still cuts the
consumer's waits, so the depth to stop at is a choice of how much waiting a
batch of memory is worth, not a point where the waits end.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import queuetune
from harness.consume import measured, result
from harness.interleave import rotated
from harness.peers import run_nodes, run_prefetcher, versions
from harness.results import machine, publish
from harness.synthetic import NODES, Batches, Workload, workloads

DEPTHS = (9, 10, 11, 12, 13)
DEFAULT = "prefetcher"


def fixed(depth: int) -> str:
    return f"prefetcher depth={depth}"


def run_fixed(w: Workload, depth: int) -> dict[str, Any]:
    """The Prefetcher held at ``depth`` (budget room for it and the batch in the step)."""
    p = queuetune.Prefetcher(
        Batches(w),
        max_bytes=(depth + 1) * w.batch_bytes,
        workers=w.workers,
        mode=w.mode,
        adaptive=False,
        depth=depth,
    )
    return result(fixed(depth), *measured(p, w), w)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--out", type=Path, help="write bursty_depths.json and bursty_depths.txt here")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    (w,) = [x for x in workloads(1.0) if x.name == "bursty"]
    runners: dict[str, Any] = {DEFAULT: run_prefetcher, NODES: run_nodes}
    runners.update({fixed(d): lambda w, d=d: run_fixed(w, d) for d in DEPTHS})
    started = time.monotonic()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in runners}
    for r in range(args.rounds):
        for name in rotated(list(runners), r):
            row = runners[name](w)
            runs[name].append(row)
            print(f"round {r + 1} {name}: {row['throughput']:.1f}/s", file=sys.stderr, flush=True)
    medians = {name: statistics.median(x["throughput"] for x in rs) for name, rs in runs.items()}
    waits = {
        name: statistics.median(x["input_bound_fraction"] for x in rs)
        for name, rs in runs.items()
        if all(x["input_bound_fraction"] is not None for x in rs)
    }
    gains = {f"{a} -> {b}": medians[fixed(b)] / medians[fixed(a)] - 1 for a, b in itertools.pairwise(DEPTHS)}
    data = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "workload": w.describe(),
        "rounds": args.rounds,
        "seconds": time.monotonic() - started,
        "medians": medians,
        "rounds_throughput": {name: [x["throughput"] for x in rs] for name, rs in runs.items()},
        "peaks": {name: max(x["peak_started_batches"] for x in rs) for name, rs in runs.items()},
        "waited": waits,
        "depth_marks": [x.get("depth_marks", []) for x in runs[DEFAULT]],
        "gain_per_batch": gains,
        "vs_nodes": {name: medians[name] / medians[NODES] for name in medians},
    }
    publish(data, table(data), "bursty_depths", args.json, args.out)
    return 0


def table(data: dict[str, Any]) -> str:
    lines = [
        "The bursty workload at fixed depths (benchmarks/bursty_depths.py)",
        f"workload: {data['workload']}",
        f"machine: {data['machine']}; date: {data['date']}; versions: {data['versions']}; "
        f"rounds: {data['rounds']} (interleaved); took {data['seconds']:.0f} s",
        "",
        f"{'loader':<24} {'batches/s (median; per round)':<52} {'peak started':>12} {'waited':>7} {'x nodes':>8}",
    ]
    for name, median in data["medians"].items():
        rounds = ", ".join(f"{t:.1f}" for t in data["rounds_throughput"][name])
        waited = data["waited"].get(name)
        lines.append(
            f"{name:<24} {f'{median:.1f} ({rounds})':<52} {data['peaks'][name]:>10} b "
            f"{'' if waited is None else f'{100 * waited:.1f} %':>7} {data['vs_nodes'][name]:>8.3f}"
        )
    lines.append("")
    lines.append(
        "gain in throughput per batch of depth: "
        + ", ".join(f"{pair}: {100 * gain:+.1f} %" for pair, gain in data["gain_per_batch"].items())
    )
    lines.append(f"{DEFAULT} depth marks per round: " + " | ".join(",".join(map(str, m)) for m in data["depth_marks"]))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
