"""What an ideal in-order loader could reach on a workload of ``benchmarks/prefetcher.py``:
the ceiling that a depth allows, against which the loaders' figures are read.

Run: .venv/bin/python benchmarks/ideal_in_order.py [--workload jittery] [--workers 4] [--depths 10 16 49]
         [--steps-ms 3.0 3.09 3.26] [--extra-ms 0.8] [--json] [--out benchmarks/results]

A simulation, not a measurement. The workload's own loads (its seeded stalls
included, as ``prefetcher.Batches`` draws them) and its consumer's steps (the
bursts included), with nothing lost to hand-offs: ``workers`` workers take
batches in order; batch ``i`` starts when a worker is free and fewer than
``depth`` batches are started and not yet taken, that is once batch
``i - depth`` is taken (so ``depth`` + 1 are started and not released, with
the one in the step); it takes its load's sleep plus ``--extra-ms`` (the numpy
pass over the batch); the consumer takes batch ``i`` when it is built and its
step on batch ``i - 1`` has ended. Throughput counts from the workload's
warm-up on, as the benchmark does. ``--steps-ms`` replaces a constant step
(the consumer's sleep takes longer than asked on a busy machine; measure it to
read a loader's ceiling at its own steps).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.ideal import ceiling
from harness.results import publish
from harness.synthetic import NUMPY_PASS_S, WORKERS, Workload, positive, result_stem, simulated_loads, workloads


def simulate(w: Workload, depths: list[int], steps_ms: list[float] | None, extra: float) -> dict[str, Any]:
    loads = simulated_loads(w, extra)
    if steps_ms:
        cases = {f"step {ms:g} ms": [ms / 1000] * w.steps for ms in steps_ms}
    else:
        cases = {"the workload's steps": [w.step_at(n + 1) for n in range(w.steps)]}
    return {
        "workload": w.name,
        "description": w.describe(),
        "extra_ms": extra * 1000,
        "ceilings": {
            case: {str(d): ceiling(loads, steps, d, w.workers, w.warmup) for d in depths}
            for case, steps in cases.items()
        },
    }


def table(result: dict[str, Any]) -> str:
    depths = list(next(iter(result["ceilings"].values())))
    lines = [
        f"Ideal in-order loader (a simulation): {result['workload']}: {result['description']}",
        f"build = the load's sleep + {result['extra_ms']:g} ms; batches/s from the warm-up on; "
        "depth d holds d + 1 batches started and not released",
        "",
        f"{'consumer':<22}" + "".join(f"{'depth ' + d:>11}" for d in depths),
    ]
    for case, row in result["ceilings"].items():
        lines.append(f"{case:<22}" + "".join(f"{row[d]:>11.1f}" for d in depths))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="jittery")
    parser.add_argument("--workers", type=positive, default=WORKERS, help=f"the workload's workers (default {WORKERS})")
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 12, 16, 20, 33, 49])
    parser.add_argument("--steps-ms", type=float, nargs="*", default=None)
    parser.add_argument("--extra-ms", type=float, default=NUMPY_PASS_S * 1000)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--out", type=Path, help="write ideal_in_order_<workload>.json and .txt here")
    args = parser.parse_args()
    found = [w for w in workloads(1.0, args.workers) if w.name == args.workload]
    if not found:
        names = ", ".join(w.name for w in workloads(1.0))
        print(f"ideal_in_order.py: no workload {args.workload!r} (one of: {names})", file=sys.stderr)
        return 2
    if any(d < 1 for d in args.depths):
        print("ideal_in_order.py: depths must be 1 or more", file=sys.stderr)
        return 2
    if found[0].cpu:
        print(f"ideal_in_order.py: {args.workload} has a pure-Python load, not a sleep to simulate", file=sys.stderr)
        return 2
    result = simulate(found[0], args.depths, args.steps_ms, args.extra_ms / 1000)
    stem = result_stem(f"ideal_in_order_{args.workload}", args.workers)
    publish(result, table(result), stem, args.json, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
