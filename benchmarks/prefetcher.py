"""queuetune.Prefetcher against Keras, PyTorch, tf.data, torchdata.nodes and SPDL on seven synthetic workloads.

Run: KERAS_BACKEND=torch .venv/bin/python benchmarks/prefetcher.py
         [--rounds 3] [--scale 1.0] [--workers 4] [--only NAME ...] [--json] [--out benchmarks/results]

What is measured, and how (all loaders in one process, run interleaved:
prefetcher, keras, torch, tf.data, torchdata.nodes, spdl, prefetcher, keras, ...
for ``--rounds`` rounds of each workload):

- The data: a map-style dataset ``Batches`` whose item ``i`` is a tuple
  ``(x, y)``: ``x`` a float32 array 512x1024 (2 MiB) made as ``template + i``
  (a numpy pass over 2 MiB, ~0.5 ms of CPU), ``y`` an int64 label a row, built
  after a ``time.sleep`` of the workload's load time (and, for the jittery
  workload, of a stall for the batch indices a seeded draw marks). The class
  is written here rather than reused from tune_workloads.py so that one class
  serves all four loaders with the same per-batch cost.
- The consumer: a step function that sleeps the workload's step time
  (``time.sleep``; it releases the GIL like a compiled training step). The
  pause workload sleeps 2 s more once, at the middle step.
- Workers: ``--workers N`` (default 4) is the worker count of every loader
  that has one, the same for all: the Prefetcher's ``workers=``, Keras's
  ``PyDataset(workers=)``, DataLoader's ``num_workers=``, torchdata.nodes'
  ``ParallelMapper(num_workers=)`` and SPDL's ``concurrency=`` (and its
  ``num_threads=``). tf.data has none: it stays at ``AUTOTUNE``, whatever N.
  The cpu-bound workload (process mode, a pure-Python load that holds a core)
  runs its loaders with ``min(N, 2)`` worker processes: 2 at the default, as
  before, and never more processes than the 2-core hosts these runs are made on.
  With N other than 4, ``--out`` writes ``prefetcher.workers-N.json`` and
  ``.txt`` (``prefetcher.json`` stays the 4-worker run); the JSON's
  ``settings`` and the table's header give N.
- The loaders (N: ``--workers``):
  * prefetcher: ``queuetune.Prefetcher(Batches, max_bytes=16 batches,
    workers=N, mode="thread")`` (adaptive depth), consumed by a ``for`` loop
    calling the step; measured by its own ``.report()``/``.trace()``.
  * keras: the same batches as a ``keras.utils.PyDataset(workers=N,
    max_queue_size=10)`` (threads), watched with ``queuetune.watch`` and read
    by ``model.fit(steps_per_epoch=N, epochs=1)`` on a tiny Keras model (one
    Dense layer, never run) whose ``train_step`` is overridden to sleep the
    step time and return no metrics; consumption recorded by
    ``probe_of(ds).keras_callback()``. So Keras's own enqueuer and its
    fit loop are in the path; the model costs the same sleep.
  * torch: ``DataLoader(Batches, batch_size=None, num_workers=N,
    prefetch_factor=2)`` (worker processes, forked), watched with
    ``queuetune.watch``, consumed by a ``for`` loop calling the step.
  * tf.data: ``Dataset.range(n).map(tf.numpy_function(load), num_parallel_calls
    =AUTOTUNE).prefetch(AUTOTUNE)`` (no worker count: AUTOTUNE at any N),
    consumed by a ``for`` loop calling the step and counted in the load
    function, like torchdata.nodes and SPDL (TensorFlow's own buffers are not
    visible to the probe; the count of batches started and not yet released is).
  * torchdata.nodes: ``ParallelMapper(num_workers=N, in_order=True)`` ->
    ``Prefetcher(prefetch_factor=2)`` -> ``Loader`` (threads; processes on
    the cpu-bound workload). It holds up to 2 x N batches in its mapper and 2
    in its prefetcher: 11 started with the one in the step at N = 4.
  * spdl: ``pipe(load, concurrency=N, output_order="input")`` ->
    ``add_sink(3)``, built with ``num_threads=N`` (a process pool of N on the
    cpu-bound workload).
- Per run: throughput after the first ``warmup`` consumed batches (batches
  per second the consumer took, including the pause for the pause workload),
  "peak started": the most batches (and bytes) started, being built or built,
  and not yet released by the consumer, from the trace (``Produced.start`` to
  the consumer's next request, batches matched with
  ``queuetune.analysis.report.match``); "peak built": the probe's peak of batches
  built and not yet released, and its time mean; peak resident
  memory of the process plus its worker processes, and its rise within the
  run (peak minus the first sample: the process carries the earlier runs'
  allocations; a rise far above the peak in-flight bytes means batches
  outlive their release).
  Per workload: the median throughput over rounds and the highest peaks
  (and highest mean in flight). "step ms": the mean time the consumer's step
  (a sleep) took after the warm-up, median over rounds, where the steps are
  all the same: a sleep takes longer than asked when a build's CPU work lands
  as it ends, which bounds the throughput (see ``ideal_in_order.py``).
- Targets (from the issue), per workload: the prefetcher's throughput >=
  0.99 x the best of the others; its peak started bytes <= the smallest
  such peak among the others that reach >= 0.98 x that best ("n/a" when no
  other loader with an observable peak reaches it), and its peak started batches at
  most one above the issue's physical minimum: the batches the needed workers
  are building plus the one being consumed, needed workers = ceil(mean load /
  step) capped at the N workers (the workload's; ``min(N, 2)`` for
  cpu-bound); for the pause workload, its peak started
  bytes within ``max_bytes`` plus the batch in the step, and its peak started
  batches within the deepest depth it reached plus that batch.
- The in-order ceiling, on the jittery workload (stalls): the batches/s an
  ideal in-order loader held to the prefetcher's budget (depth 16) reads at
  the best other loader's measured step, simulated as ``ideal_in_order.py``
  does, and its ratio to that loader: where it is below the target, no
  in-order loader within the budget meets it (the best other held more).
- Extra rows: on the jittery workload, the prefetcher with ``ordered=False``,
  with a budget of 40 batches, and "at nodes' bytes": a budget of 2 x N + 2
  batches, what torchdata.nodes holds besides the batch in the step (read at
  2, 4 and 8 workers: 6, 10 and 18), so the prefetcher's throughput at
  nodes' bytes; on the bursty workload, the budget at nodes' bytes; checked
  against the same targets, shown apart from the default.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "torch")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


from harness.budget import summarize
from harness.peers import RUNNERS, versions
from harness.results import machine, publish
from harness.synthetic import (
    BUDGET_BATCHES,
    CPU_BOUND_WORKERS,
    LOADERS,
    PROCESS_LOADERS,
    WORKERS,
    MiB,
    positive,
    result_stem,
    workloads,
)


def fmt_bytes(value: int | None) -> str:
    return "not observable" if value is None else f"{value / MiB:.1f} MiB"


def table(data: dict[str, Any]) -> str:
    workers = data["settings"]["workers"]
    lines = [
        "queuetune.Prefetcher vs Keras / PyTorch / tf.data / torchdata.nodes / SPDL",
        f"date: {data['date']}   machine: {data['machine']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in data["versions"].items()),
        f"workers: {workers} for every loader that has a count (tf.data: AUTOTUNE; cpu-bound: "
        f"{data['settings']['cpu_bound_workers']} processes, at most {CPU_BOUND_WORKERS})",
        f"prefetcher max_bytes = {BUDGET_BATCHES} batches; peers measured in the load function; "
        f"rounds: {data['rounds']} (interleaved); wall {data['seconds']:.0f} s",
        "",
    ]
    for s in data["workloads"]:
        lines.append(f"== {s['workload']}: {s['description']}")
        lines.append(f"   physical minimum: {s['physical_minimum_batches']} batches = {s['physical_minimum']}")
        if s.get("note"):
            lines.append(f"   note: {s['note']}")
        width = max(len(name) for name in s["loaders"])
        lines.append(
            f"{'loader':<{width}} {'batches/s (median; per round)':<36} {'peak started':>20} {'peak built':>19} "
            f"{'mean':>5} {'peak RSS+children':>18} {'RSS rise':>10} {'input-bound':>11} {'step ms':>8}"
        )
        order = [*LOADERS, *PROCESS_LOADERS]
        for name in [*dict.fromkeys(order), *(k for k in s["loaders"] if k not in order)]:
            r = s["loaders"].get(name)
            if r is None:
                continue
            tp = f"{r['throughput']:.1f} ({', '.join(f'{t:.1f}' for t in r['throughputs'])})"
            started = (
                "not observable"
                if r["peak_started_bytes"] is None
                else f"{r['peak_started_batches']} b / {fmt_bytes(r['peak_started_bytes'])}"
            )
            built = (
                "not observable"
                if r["peak_in_flight_bytes"] is None
                else f"{r['peak_in_flight_batches']} b / {fmt_bytes(r['peak_in_flight_bytes'])}"
            )
            mean = "" if r["mean_in_flight_batches"] is None else f"{r['mean_in_flight_batches']:.1f}"
            ib = "" if r["input_bound_fraction"] is None else f"{r['input_bound_fraction']:.2f}"
            took = "" if r.get("mean_step_ms") is None else f"{r['mean_step_ms']:.2f}"
            lines.append(
                f"{name:<{width}} {tp:<36} {started:>20} {built:>19} {mean:>5} "
                f"{fmt_bytes(r['peak_total_bytes']):>18} {fmt_bytes(r['rss_rise_bytes']):>10} {ib:>11} {took:>8}"
            )
        for name, r in s["loaders"].items():
            marks = r.get("depth_marks")
            if marks:
                lines.append(f"{name} depth marks per round: " + " | ".join(",".join(map(str, m)) for m in marks))
        top = s.get("in_order_ceiling")
        if top:
            lines.append(
                f"  in order within max_bytes (depth {top['depth']}), an ideal loader at the best other's step "
                f"({top['step_ms']:.2f} ms) reads {top['throughput']:.1f}/s: {top['ratio']:.3f} x the best other "
                "(a simulation: ideal_in_order.py)"
            )
        for title, checks in [("prefetcher", s["checks"]), *s.get("extra_checks", {}).items()]:
            if title != "prefetcher":
                lines.append(f"  {title} (extra row, not the default):")
            for key, c in checks.items():
                verdict = {True: "MET", False: "MISSED", None: "n/a"}[c["met"]]
                lines.append(f"  [{verdict:>6}] {key}: {c['detail']}")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument(
        "--workers",
        type=positive,
        default=WORKERS,
        help=f"workers of every loader that has a count (default {WORKERS}; tf.data stays AUTOTUNE; "
        f"cpu-bound: at most {CPU_BOUND_WORKERS} processes)",
    )
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument(
        "--out",
        type=Path,
        help=f"write prefetcher.json and prefetcher.txt here (prefetcher.workers-N.* with --workers N other than "
        f"{WORKERS})",
    )
    args = parser.parse_args()

    started = time.monotonic()
    selected = [w for w in workloads(args.scale, args.workers) if not args.only or w.name in args.only]
    import keras  # noqa: F401
    import tensorflow  # noqa: F401  (imported up front, not inside the first timed tf run)
    import torch  # noqa: F401

    summaries = []
    for w in selected:
        names = [*w.loaders, *w.extras]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names:
                row = RUNNERS[name](w)
                runs[name].append(row)
                print(
                    f"{w.name} round {r + 1} {name}: {row['throughput']:.1f}/s, "
                    f"peak started {row['peak_started_batches']} b, built {row['peak_in_flight_batches']} b",
                    file=sys.stderr,
                    flush=True,
                )
        summaries.append(summarize(w, runs))
    data = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "rounds": args.rounds,
        "budget_batches": BUDGET_BATCHES,
        "settings": {
            "workers": args.workers,
            "cpu_bound_workers": min(args.workers, CPU_BOUND_WORKERS),
            "tf_data_parallelism": "AUTOTUNE",
            "scale": args.scale,
            "only": args.only,
        },
        "seconds": time.monotonic() - started,
        "workloads": summaries,
    }
    publish(data, table(data), result_stem("prefetcher", args.workers), args.json, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
