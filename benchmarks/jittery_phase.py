"""The jittery workload at torchdata.nodes' bytes, with the consumer's step equal
to the load's sleep and a little off it: where the Prefetcher's shortfall there
comes from.

Run: .venv/bin/python benchmarks/jittery_phase.py [--rounds 3] [--out benchmarks/results]

The workload of ``benchmarks/prefetcher.py`` (load: a 3 ms sleep, a 100 ms stall
with p=0.04, then a 2 MiB numpy pass; 600 steps, 30 of warm-up), with the
step at 3.0 ms (the benchmark's), 3.5 ms and 2.5 ms. At each step, interleaved
for ``--rounds`` rounds: ``queuetune.Prefetcher(max_bytes=10 batches)`` (what
torchdata.nodes holds besides the batch in the step) against torchdata.nodes
(``ParallelMapper(in_order=True)`` -> ``Prefetcher(2)``), peaks counted as in
that benchmark. With a step equal to the load, every build the Prefetcher
starts at a request ends its sleep as the consumer's step ends, so its numpy
pass lands as the consumer wakes; a step off the load breaks that phase.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import prefetcher as pf
from common import machine, package_versions, publish, rotated

STEPS = (0.003, 0.0035, 0.0025)
# The Prefetcher at torchdata.nodes' bytes, and nodes: prefetcher.py's runners.
LOADERS = [pf.LEAN, pf.NODES]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--out", type=Path, help="write jittery_phase.json and jittery_phase.txt here")
    args = parser.parse_args()
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for step in STEPS:
        w = pf.Workload("jittery", 0.003, step, 600, 30, stall=0.100, p=0.04)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in LOADERS}
        for r in range(args.rounds):
            for name in rotated(LOADERS, r):
                runs[name].append(pf.RUNNERS[name](w))
        medians = {name: statistics.median(x["throughput"] for x in rs) for name, rs in runs.items()}
        rows.append(
            {
                "step": step,
                "medians": medians,
                "rounds": {name: [x["throughput"] for x in rs] for name, rs in runs.items()},
                "peaks": {name: max(x["peak_started_batches"] for x in rs) for name, rs in runs.items()},
                "ratio": medians[pf.LEAN] / medians[pf.NODES],
            }
        )
    data = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": package_versions("numpy", "torchdata"),
        "rounds": args.rounds,
        "seconds": time.monotonic() - started,
        "steps": rows,
    }
    lines = [
        "The jittery workload at torchdata.nodes' bytes, step on and off the load (benchmarks/jittery_phase.py)",
        f"machine: {data['machine']}; date: {data['date']}; versions: {data['versions']}; "
        f"rounds: {args.rounds} (interleaved); took {data['seconds']:.0f} s",
        "",
        f"{'step':>7} {'prefetcher (10 b)':>30} {'torchdata.nodes':>30} {'ratio':>6}",
    ]
    for row in rows:
        cells = [
            f"{row['medians'][n]:.1f} ({', '.join(f'{t:.1f}' for t in row['rounds'][n])}) {row['peaks'][n]} b"
            for n in LOADERS
        ]
        lines.append(f"{row['step'] * 1000:5.1f} ms {cells[0]:>30} {cells[1]:>30} {row['ratio']:6.3f}")
    publish(data, "\n".join(lines), "jittery_phase", args.json, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
