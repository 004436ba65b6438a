"""Soak: thousands of batches over many epochs through queuetune.Prefetcher in
process mode; memory, exactly-once delivery and the byte bound over a long run.

Run (not part of CI; takes the benchmark lock, a few minutes on 2 cores):
    flock /tmp/queuetune-bench.lock .venv/bin/python benchmarks/soak.py --out benchmarks/results
        [--epochs 40] [--batches 250] [--batch-mib 1.0] [--workers 2] [--budget-batches 8]
        [--step-ms 2] [--stall-every 20] [--stall-ms 100] [--seed 0]

What is measured, and how:

- The data: a map-style dataset whose batch ``i`` is an int64 array of
  ``--batch-mib`` MiB filled with ``i``: the consumer reads the index from the
  data (first, middle and last element, which must agree), not from the
  prefetcher's bookkeeping.
- The prefetcher: ``Prefetcher(data, max_bytes=budget_batches x batch bytes,
  workers, mode="process", shuffle=True, seed)`` (adaptive depth), one ``for``
  loop per epoch, each consumer step a ``time.sleep`` of ``--step-ms``; every
  ``--stall-every``-th batch index takes ``--stall-ms`` more to build (a stall:
  the controller deepens, so the byte budget is what bounds memory). So a
  new pool of worker processes each epoch, and every batch through shared
  memory.
- Exactly once: per epoch, how many times each index arrived; an epoch passes
  when every index arrived once.
- The byte bound, from the prefetcher's trace: batches matched by key, each
  epoch's batch to its own hand-over (the first hand-over of that key after it
  was built); the peak bytes of batches built and not yet handed over, and of
  batches started (being built or built) and not yet handed over, against
  ``max_bytes``.
- Memory (psutil): resident memory of this process, and of its worker
  processes (RSS summed, and USS: the pages they alone hold), before the
  prefetcher is made and in the middle of every epoch (a new pool of workers
  each epoch: at its end they are gone), after close, and the peak
  of the prefetcher's own sampler (every 50 ms: process RSS + children USS).
  Growth is the last epoch's process RSS minus the one in epoch ``--settle``
  - 1. The prefetcher's trace keeps its latest 16 epochs (``trace_epochs``),
  so its records grow until then and no further; the table gives the size of
  the records added after settling, measured with tracemalloc on the same
  number of records. The byte peaks and depth decisions are read from the
  trace at the end of every epoch.
- After ``close()``: shared-memory files left for this process, child
  processes left, prefetcher threads left.
- The depth the adaptive controller settled at: its last decision, its
  deepest, and the depth the budget allows.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import psutil

import queuetune
from harness.results import machine, mib, publish
from harness.soaking import Indexed, MiB, last_epoch, memory, peaks, record_bytes
from queuetune import Prefetcher
from queuetune.prefetch import shm


def run(args: argparse.Namespace) -> dict[str, Any]:
    batch_bytes = int(args.batch_mib * MiB) // 8 * 8
    max_bytes = args.budget_batches * batch_bytes
    data = Indexed(args.batches, batch_bytes, args.stall_every, args.stall_ms / 1000)
    samples = {"start": memory()}
    started = time.monotonic()
    p = Prefetcher(data, max_bytes=max_bytes, workers=args.workers, mode=args.mode, shuffle=True, seed=args.seed)
    epochs = []
    bytes_peaks = {"built": 0, "started": 0, "unmatched": 0, "max_bytes": max_bytes}
    depths: list[int] = []
    errors: list[str] = []
    for epoch in range(args.epochs):
        counts: Counter[int] = Counter()
        bad = 0
        middle: dict[str, int] = {}
        t0 = time.monotonic()
        for n, batch in enumerate(p):
            if n == args.batches // 2:  # mid-epoch: the workers are alive (a new pool each epoch)
                middle = memory()
            i = int(batch[0])
            if batch.shape != (data.count,) or int(batch[-1]) != i or int(batch[data.count // 2]) != i:
                bad += 1
            counts[i] += 1
            del batch
            if args.step_ms:
                time.sleep(args.step_ms / 1000)
        seconds = time.monotonic() - t0
        once = all(counts[i] == 1 for i in range(args.batches)) and sum(counts.values()) == args.batches
        # The prefetcher's trace keeps its latest epochs only: each epoch is read as it ends.
        window = last_epoch(p.trace())
        found = peaks(window, max_bytes)
        bytes_peaks["built"] = max(bytes_peaks["built"], found["built"])
        bytes_peaks["started"] = max(bytes_peaks["started"], found["started"])
        bytes_peaks["unmatched"] += found["unmatched"]
        depths += [m.value for m in window.marks if m.kind == "depth"]
        errors += [m.value for m in window.marks if m.kind == "error"]
        epochs.append(
            {
                "epoch": epoch,
                "seconds": seconds,
                "delivered": sum(counts.values()),
                "distinct": len(counts),
                "exactly_once": once,
                "bad_batches": bad,
                "memory": middle or memory(),
            }
        )
        if epoch + 1 == args.settle:
            samples["settled"] = epochs[-1]["memory"]
        print(
            f"epoch {epoch}: {sum(counts.values())} batches, exactly once: {once}, "
            f"{seconds:.1f} s, RSS {epochs[-1]['memory']['rss'] / MiB:.1f} MiB",
            file=sys.stderr,
            flush=True,
        )
    trace = p.trace()
    kept = p.recorder.keep_runs or args.epochs
    p.close()
    time.sleep(0.5)
    samples["end"] = epochs[-1]["memory"] if epochs else memory()
    samples["after_close"] = memory()
    peak_total = max((m.rss + m.children for m in trace.memory), default=0)
    peak_rss = max((m.rss for m in trace.memory), default=0)
    left = {
        "shm_files": len(list(shm.files.ROOT.glob(f"queuetune-{os.getpid()}-*"))),
        "children": len([c for c in psutil.Process().children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]),
        "threads": len([t for t in threading.enumerate() if t.name.startswith("queuetune")]),
    }
    settled = samples.get("settled", samples["start"])
    total_batches = args.epochs * args.batches
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "queuetune": queuetune.__version__,
            "psutil": psutil.__version__,
        },
        "command": " ".join(["benchmarks/soak.py", *sys.argv[1:]]),
        "workload": {
            "epochs": args.epochs,
            "batches_per_epoch": args.batches,
            "batch_bytes": batch_bytes,
            "workers": args.workers,
            "mode": args.mode,
            "shuffle": True,
            "seed": args.seed,
            "budget_batches": args.budget_batches,
            "max_bytes": max_bytes,
            "step_ms": args.step_ms,
            "stall_every": args.stall_every,
            "stall_ms": args.stall_ms,
            "settle_epochs": args.settle,
        },
        "seconds": time.monotonic() - started,
        "batches": total_batches,
        "epochs_exactly_once": sum(e["exactly_once"] for e in epochs),
        "bad_batches": sum(e["bad_batches"] for e in epochs),
        "errors": errors,
        "bytes": bytes_peaks,
        "memory": {
            "samples": samples,
            "peak_rss": peak_rss,
            "peak_rss_plus_children_uss": peak_total,
            "growth_after_settle": samples["end"]["rss"] - settled["rss"],
            "trace_records": len(trace.produced) + len(trace.consumed),
            "trace_epochs_kept": kept,
            "trace_records_bytes": record_bytes((min(args.epochs, kept) - min(args.settle, kept)) * args.batches),
        },
        "depth": {
            "last": depths[-1] if depths else None,
            "deepest": max(depths, default=None),
            "decisions": len(depths),
            "budget_allows": max_bytes // batch_bytes,
        },
        "left_after_close": left,
        "epochs": epochs,
    }


def table(r: dict[str, Any]) -> str:
    w, m, b, s = r["workload"], r["memory"], r["bytes"], r["memory"]["samples"]

    growth_ok = m["growth_after_settle"] <= m["trace_records_bytes"] + 16 * MiB
    rows = [
        (
            "workload",
            f"{w['epochs']} epochs x {w['batches_per_epoch']} batches of {mib(w['batch_bytes'])}, "
            f"shuffled, mode={w['mode']}, workers={w['workers']}, max_bytes={w['budget_batches']} "
            f"batches = {mib(w['max_bytes'])}, consumer step {w['step_ms']} ms, every {w['stall_every']}th "
            f"batch {w['stall_ms']} ms slower to build",
        ),
        ("wall", f"{r['seconds']:.0f} s"),
        ("batches delivered", f"{sum(e['delivered'] for e in r['epochs'])} of {r['batches']}"),
        (
            "epochs exactly once",
            f"{r['epochs_exactly_once']} of {w['epochs']} (batches with wrong data: {r['bad_batches']})",
        ),
        ("errors", ", ".join(r["errors"]) or "none"),
        (
            "peak built, not handed over",
            f"{mib(b['built'])} vs max_bytes {mib(b['max_bytes'])}: "
            f"{'within' if b['built'] <= b['max_bytes'] else 'OVER'}",
        ),
        (
            "peak started, not handed over",
            f"{mib(b['started'])}: {'within' if b['started'] <= b['max_bytes'] else 'OVER'}"
            f" (batches unmatched: {b['unmatched']})",
        ),
        ("RSS at start", mib(s["start"]["rss"])),
        (
            f"RSS in epoch {w['settle_epochs'] - 1}",
            f"{mib(s['settled']['rss'])}; workers: RSS {mib(s['settled']['children_rss'])}, "
            f"USS {mib(s['settled']['children_uss'])}",
        ),
        (
            "RSS in the last epoch",
            f"{mib(s['end']['rss'])}; workers: RSS {mib(s['end']['children_rss'])}, "
            f"USS {mib(s['end']['children_uss'])}",
        ),
        ("RSS after close", f"{mib(s['after_close']['rss'])}; children {s['after_close']['children']}"),
        ("peak RSS (sampler)", f"{mib(m['peak_rss'])}; with workers' USS {mib(m['peak_rss_plus_children_uss'])}"),
        (
            "growth after settling",
            f"{m['growth_after_settle'] / MiB:+.1f} MiB; the trace's records added since "
            f"(it keeps {m.get('trace_epochs_kept', w['epochs'])} epochs): "
            f"{mib(m['trace_records_bytes'])} ({'noise' if growth_ok else 'GROWTH'})",
        ),
        ("left after close", ", ".join(f"{k} {v}" for k, v in r["left_after_close"].items())),
        (
            "depth",
            f"settled at {r['depth']['last']} (deepest {r['depth']['deepest']}, {r['depth']['decisions']} "
            f"decisions; the budget allows {r['depth']['budget_allows']})",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [
        "queuetune.Prefetcher soak",
        f"date: {r['date']}   machine: {r['machine']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in r["versions"].items()),
        f"command: {r['command']}",
        "",
        *(f"{k:<{width}}  {v}" for k, v in rows),
        "",
        "per epoch (mid-epoch memory): seconds, RSS (MiB), workers' RSS (MiB), workers' USS (MiB)",
        *(
            f"  {e['epoch']:>3}  {e['seconds']:6.1f}  {e['memory']['rss'] / MiB:7.1f}  "
            f"{e['memory']['children_rss'] / MiB:7.1f}  {e['memory']['children_uss'] / MiB:6.1f}"
            for e in r["epochs"]
        ),
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batches", type=int, default=250, help="batches per epoch")
    parser.add_argument("--batch-mib", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mode", choices=["process", "thread"], default="process")
    parser.add_argument("--budget-batches", type=int, default=8, help="max_bytes, in batches")
    parser.add_argument("--step-ms", type=float, default=2.0, help="the consumer's step (a sleep)")
    parser.add_argument("--stall-every", type=int, default=20, help="every n-th batch index builds slowly (0: none)")
    parser.add_argument("--stall-ms", type=float, default=100.0, help="how much slower")
    parser.add_argument("--settle", type=int, default=2, help="epochs before memory is taken as settled")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--out", type=Path, help="write soak.json and soak.txt here")
    args = parser.parse_args()
    if args.epochs < 1 or args.batches < 1 or not 0 < args.settle <= args.epochs:
        parser.error("--epochs and --batches must be at least 1, --settle between 1 and --epochs")
    result = run(args)
    publish(result, table(result), "soak", args.json, args.out)
    ok = (
        result["epochs_exactly_once"] == args.epochs
        and result["bytes"]["built"] <= result["bytes"]["max_bytes"]
        and not any(result["left_after_close"].values())
        and not result["errors"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
