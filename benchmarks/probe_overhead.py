"""Per-batch cost of the probe: a plain generator against the same generator watched.

Run: .venv/bin/python benchmarks/probe_overhead.py [--batches 200000] [--rounds 7]

Both loops consume the same pre-built batches (a tuple of two small numpy
arrays); rounds alternate plain, watched, plain, watched ... in one process, and
the overhead per batch is the difference of the medians. A second part times the
record a worker process writes to the probe's pipe (Keras use_multiprocessing,
torch DataLoader workers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import queuetune
from queuetune.record.recorder import Recorder, clock


def consume(iterable) -> int:
    n = 0
    for _ in iterable:
        n += 1
    return n


def plain_round(batches: list) -> float:
    start = time.perf_counter()
    consume(b for b in batches)
    return time.perf_counter() - start


def watched_round(batches: list) -> float:
    watched = queuetune.watch(b for b in batches)
    start = time.perf_counter()
    consume(watched)
    elapsed = time.perf_counter() - start
    queuetune.probe_of(watched).close()
    return elapsed


def pipe_emit_cost(records: int) -> float:
    """Seconds per record written by a forked child to the recorder's pipe."""
    recorder = Recorder({}, processes=True, sample_memory=False)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        start = time.perf_counter()
        t = clock()
        for i in range(records):
            recorder.produced(t, t, 1024, i, i)
        elapsed = time.perf_counter() - start
        os.write(write, repr(elapsed).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    elapsed = float(os.read(read, 64))
    deadline = time.monotonic() + 10
    while recorder.produced_count() < records and time.monotonic() < deadline:
        time.sleep(0.01)
    received = recorder.produced_count()
    recorder.close()
    if received != records:
        raise SystemExit(f"pipe lost records: {received} of {records}")
    return elapsed / records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    batches = [(np.zeros((4, 4), "float32"), np.zeros(4, "int64")) for _ in range(args.batches)]
    plain, watched = [], []
    for _ in range(args.rounds):
        plain.append(plain_round(batches))
        watched.append(watched_round(batches))
    per_plain = statistics.median(plain) / args.batches
    per_watched = statistics.median(watched) / args.batches
    result = {
        "workload": f"{args.batches} pre-built batches (float32 4x4 + int64 4), {args.rounds} interleaved rounds",
        "plain_us_per_batch": round(per_plain * 1e6, 3),
        "watched_us_per_batch": round(per_watched * 1e6, 3),
        "overhead_us_per_batch": round((per_watched - per_plain) * 1e6, 3),
        "ratio_watched_to_plain": round(per_watched / per_plain, 2),
        "pipe_record_us": round(pipe_emit_cost(50_000) * 1e6, 3),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "queuetune": queuetune.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        print(f"{key:>24}: {value}")


if __name__ == "__main__":
    sys.exit(main())
