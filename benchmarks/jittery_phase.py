"""The jittery workload with the consumer's step equal to the load's sleep and a
little off it, and with the loaders' threads kept off the consumer's core:
where the Prefetcher's shortfall there comes from.

Run: .venv/bin/python benchmarks/jittery_phase.py [--rounds 3] [--workers 4] [--out benchmarks/results]

The workload of ``benchmarks/prefetcher.py`` (load: a 3 ms sleep, a 100 ms stall
with p=0.04, then a 2 MiB numpy pass; 600 steps, 30 of warm-up), with the
step at 3.0 ms (the benchmark's), 3.5 ms and 2.5 ms. At each step, interleaved
for ``--rounds`` rounds: ``queuetune.Prefetcher`` with the benchmark's budget
(16 batches) and with torchdata.nodes' bytes (10 batches at 4 workers: 2 per
worker and 2 more, ``prefetcher.lean_budget_batches``), torchdata.nodes
(``ParallelMapper(in_order=True)`` -> ``Prefetcher(2)``) and tf.data
(``map(AUTOTUNE)`` -> ``prefetch(AUTOTUNE)``), peaks counted as in that
benchmark; at 3.0 ms the two Prefetchers and nodes once more with the cores
apart: the consumer's thread on the first core this process may use, every
thread that runs the load on the others. With a step equal to the load, a
build started just before the consumer's step ends its sleep just before the
step ends, and its numpy pass runs as the consumer wakes; when the consumer's
timer fires on the core that runs that pass, the consumer waits for the pass
to end although the other core is free. Builds the Prefetcher started in the
consumer's ``next()`` did (0.976 x nodes at nodes' bytes). Started by the
worker that builds them, after the consumer's step began, they did not on an
AMD EPYC host, and still did on an Intel Xeon host, where they began some
50 us after the step. A step off the load breaks that phase too; cores apart
take the collision away. ``--workers N`` (default 4) is every loader's worker
count but tf.data's (AUTOTUNE); with N other than 4, ``--out`` writes
``jittery_phase.workers-N.json`` and ``.txt``.

At 3.0 ms, on Linux, the 10-batch Prefetcher and nodes also run with the
consumer's timer slack at 1 ns (``prctl(PR_SET_TIMERSLACK)`` on its thread;
the default is 50 us). The kernel may end a sleep up to its slack late, and
the interrupt that ends one sleep ends every other whose time has come: a
build whose sleep ends within the consumer's slack after the consumer's own
wakes with the consumer. The threads that run the load keep the process's
slack there, though a thread inherits the slack of the thread that starts it.
On the Intel Xeon host the consumer's exact timer brought the 10-batch
Prefetcher level with nodes (0.995 and 0.996 x, against 0.985 and 0.984).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.interleave import rotated
from harness.peers import RUNNERS, versions
from harness.results import machine, publish
from harness.synthetic import LEAN, NODES, WORKERS, Batches, Workload, positive, result_stem

STEPS = (0.003, 0.0035, 0.0025)
DEFAULT = "prefetcher"
LOADERS = [DEFAULT, LEAN, NODES, "tf.data"]
ANY, APART, SLACK = "", "cores apart", "consumer's timer slack 1 ns"
# Kept apart at the benchmark's step only. tf.data is not: its pool of threads,
# moved onto fewer cores, is tuned for them (4 batches and 161/s in a trial).
KEPT_APART = [DEFAULT, LEAN, NODES]
SLACKLESS = [LEAN, NODES]
# The pairs the table compares: at nodes' bytes, and the default against the loader
# that beat it in prefetcher.py (tf.data, with three times its bytes, on any core).
PAIRS = (
    ((LEAN, ANY), (NODES, ANY)),
    ((DEFAULT, ANY), ("tf.data", ANY)),
    ((LEAN, APART), (NODES, APART)),
    ((DEFAULT, APART), ("tf.data", ANY)),
    ((LEAN, SLACK), (NODES, SLACK)),
)
PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30


def label(name: str, how: str) -> str:
    return f"{name}, {how}" if how else name


# Linux's prctl, or None where there is none.
PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def set_timer_slack(nanoseconds: int) -> None:
    """The calling thread's timer slack (a thread it starts later inherits it)."""
    assert PRCTL is not None
    if PRCTL(PR_SET_TIMERSLACK, ctypes.c_ulong(nanoseconds), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_TIMERSLACK) failed")


# The timer slack of the loaders' threads: the process's own, whatever the consumer's.
LOADERS_SLACK = PRCTL(PR_GET_TIMERSLACK, 0, 0, 0, 0) if PRCTL is not None else None
_placed = threading.local()


@contextmanager
def placement(how: str) -> Iterator[None]:
    """With ``APART``, the calling thread on one core and each thread that runs
    ``Batches.__getitem__`` on the rest; else every thread on every core (a
    thread pool kept from an earlier run is moved back too). With ``SLACK``, the
    calling thread's timer slack at 1 ns; each thread that runs the load keeps
    the process's slack (``LOADERS_SLACK``), though started under 1 ns."""
    cores = os.sched_getaffinity(0)
    first = min(cores)
    loaders = cores - {first} if how == APART else cores
    original = Batches.__getitem__

    def getitem(batches: Batches, index: int) -> Any:
        if getattr(_placed, "cores", None) != loaders:
            os.sched_setaffinity(0, loaders)
            _placed.cores = loaders
        if LOADERS_SLACK is not None and not getattr(_placed, "slack", False):
            set_timer_slack(LOADERS_SLACK)
            _placed.slack = True
        return original(batches, index)

    Batches.__getitem__ = getitem  # type: ignore[method-assign]
    if how == APART:
        os.sched_setaffinity(0, {first})
    if how == SLACK:
        set_timer_slack(1)
    try:
        yield
    finally:
        Batches.__getitem__ = original  # type: ignore[method-assign]
        os.sched_setaffinity(0, cores)
        if how == SLACK and LOADERS_SLACK is not None:
            set_timer_slack(LOADERS_SLACK)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=positive, default=WORKERS, help="every loader's workers (default 4)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--out", type=Path, help="write jittery_phase[.workers-N].json and .txt here")
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("needs at least 2 cores to keep the consumer apart")
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for step in STEPS:
        w = Workload("jittery", 0.003, step, 600, 30, stall=0.100, p=0.04, workers=args.workers)
        entries = [(name, ANY) for name in LOADERS]
        if step == STEPS[0]:
            entries += [(name, APART) for name in KEPT_APART]
            entries += [(name, SLACK) for name in SLACKLESS if PRCTL is not None]
        runs: dict[str, list[dict[str, Any]]] = {label(*e): [] for e in entries}
        for r in range(args.rounds):
            for name, how in rotated(entries, r):
                with placement(how):
                    runs[label(name, how)].append(RUNNERS[name](w))
        medians = {name: statistics.median(x["throughput"] for x in rs) for name, rs in runs.items()}
        pairs = [(label(*a), label(*b)) for a, b in PAIRS]
        rows.append(
            {
                "step": step,
                "medians": medians,
                "rounds": {name: [x["throughput"] for x in rs] for name, rs in runs.items()},
                "peaks": {name: max(x["peak_started_batches"] for x in rs) for name, rs in runs.items()},
                "step_ms": {name: statistics.median(x["mean_step_ms"] for x in rs) for name, rs in runs.items()},
                "ratios": {f"{a} / {b}": medians[a] / medians[b] for a, b in pairs if a in medians and b in medians},
            }
        )
    data = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "rounds": args.rounds,
        "workers": args.workers,
        "seconds": time.monotonic() - started,
        "settings": rows,
    }
    publish(data, table(data), result_stem("jittery_phase", args.workers), args.json, args.out)
    return 0


def table(data: dict[str, Any]) -> str:
    lines = [
        "The jittery workload: step on and off the load, and the loaders' threads off the consumer's core "
        "(benchmarks/jittery_phase.py)",
        f"machine: {data['machine']}; date: {data['date']}; versions: {data['versions']}; "
        f"workers: {data.get('workers', WORKERS)} for every loader but tf.data (AUTOTUNE); "
        f"rounds: {data['rounds']} (interleaved); took {data['seconds']:.0f} s",
        "cells: batches/s, median of the rounds (the rounds), peak batches started and not released, "
        "the consumer's mean step in ms",
        "",
    ]
    for row in data["settings"]:
        lines.append(f"step {row['step'] * 1000:.1f} ms:")
        for name in row["medians"]:
            rounds = ", ".join(f"{t:.1f}" for t in row["rounds"][name])
            lines.append(
                f"  {name:<55} {row['medians'][name]:6.1f} ({rounds})  {row['peaks'][name]:3d} b  "
                f"step {row['step_ms'][name]:.2f} ms"
            )
        lines.extend(f"  {pair}: {ratio:.3f}" for pair, ratio in row["ratios"].items())
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
