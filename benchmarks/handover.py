"""The hand-over: what the consumer pays to take a batch that is already built,
for torch's DataLoader, a Keras PyDataset, tf.data and queuetune's Prefetcher,
on one workload where the model is the bottleneck (so every batch is built
before it is asked for, and every wait is a hand-over).

Run: .venv/bin/python benchmarks/handover.py [--batches 60] [--rounds 3] [--json] [--out DIR]

- The workload: batches of 16 samples of 64x256 float32 (1 MiB a batch) and
  an int label, each sample built by a 0.125 ms sleep (2 ms a batch, an
  I/O-like build), 2 workers; the consumer steps 20 ms (a sleep) a batch, so
  the queues stay full. ``--batches`` batches a run; rounds interleaved, each
  loader once a round, in a rotated order.
- The loaders: ``torch``: ``DataLoader(num_workers=2)`` (prefetch_factor 2,
  fork); ``keras``: a ``PyDataset(workers=2)`` (threads, max_queue_size 10)
  read by ``model.predict`` on a one-layer model, the step a callback before
  the probe's; ``tfdata``: ``Dataset.range().map(py_function build,
  num_parallel_calls=2).batch(16).prefetch(2)``, iterated; ``prefetcher``:
  ``queuetune.Prefetcher(mode="process", workers=2, max_bytes="64MiB")``.
- The figure: the median of the steady state's hand-over per batch
  (``Report.handover``: the wait of each batch built before it was asked for).
  tf.data builds inside TensorFlow, out of the probe's sight, so there its
  whole wait per batch is the figure: with the queue full it is the hand-over
  (``Report.handover_seen`` is False for it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "torch")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np

import queuetune
from harness.interleave import rotated
from harness.results import machine, package_versions, preamble, publish

BATCH, WORKERS, SAMPLE_SLEEP, STEP = 16, 2, 0.000125, 0.020
SHAPE = (64, 256)


def sample(index: int) -> tuple[np.ndarray, int]:
    time.sleep(SAMPLE_SLEEP)
    return np.full(SHAPE, index % 251, dtype=np.float32), index


class Samples:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        return sample(index)


def run_torch(batches: int) -> queuetune.Report:
    from torch.utils.data import DataLoader

    watched = queuetune.watch(DataLoader(Samples(batches * BATCH), batch_size=BATCH, num_workers=WORKERS))
    for _ in watched:
        time.sleep(STEP)
    report = queuetune.report(watched)
    queuetune.probe_of(watched).close()
    return report


def run_prefetcher(batches: int) -> queuetune.Report:
    loader = queuetune.Prefetcher(
        Samples(batches * BATCH), max_bytes="64MiB", workers=WORKERS, mode="process", batch_size=BATCH
    )
    with loader:
        for _ in loader:
            time.sleep(STEP)
        report: queuetune.Report = loader.report()
    return report


def run_keras(batches: int) -> queuetune.Report:
    import keras

    class Data(keras.utils.PyDataset):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(workers=WORKERS)

        def __len__(self) -> int:
            return batches

        def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
            parts = [sample(index * BATCH + i) for i in range(BATCH)]
            return np.stack([x for x, _ in parts]).reshape(BATCH, -1), np.array([y for _, y in parts], "float32")

    class Step(keras.callbacks.Callback):  # type: ignore[misc]
        def on_predict_batch_end(self, batch: int, logs: Any = None) -> None:
            time.sleep(STEP)

    inputs = keras.Input((SHAPE[0] * SHAPE[1],))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    data = queuetune.watch(Data())
    probe = queuetune.probe_of(data)
    model.predict(data, verbose=0, callbacks=[Step(), probe.keras_callback(print_report=False)])
    report = probe.report()
    probe.close()
    return report


def run_tfdata(batches: int) -> queuetune.Report:
    import tensorflow as tf

    def build(index: Any) -> tuple[Any, Any]:
        return sample(int(index))

    def mapped(index: Any) -> tuple[Any, Any]:
        x, y = tf.py_function(build, [index], (tf.float32, tf.int64))
        return x, y

    dataset = tf.data.Dataset.range(batches * BATCH).map(mapped, num_parallel_calls=WORKERS).batch(BATCH).prefetch(2)
    watched = queuetune.watch(dataset)
    for _ in watched:
        time.sleep(STEP)
    report = queuetune.report(watched)
    queuetune.probe_of(watched).close()
    return report


LOADERS = {"torch": run_torch, "keras": run_keras, "tfdata": run_tfdata, "prefetcher": run_prefetcher}


def per_batch(report: queuetune.Report) -> tuple[float | None, float | None]:
    """The hand-over per batch (median, seconds) and its share of the steady state."""
    if report.handover_seen:
        share = (report.steady_handover_seconds or 0.0) / report.steady_seconds if report.steady_seconds else None
        return report.handover.median, share
    share = (report.steady_wait_seconds or 0.0) / report.steady_seconds if report.steady_seconds else None
    return report.handover.median if report.handover.n else _median_wait(report), share


def _median_wait(report: queuetune.Report) -> float | None:
    waits = report.steady_wait_seconds
    count = (report.consumed_batches or 0) - (report.start.runs if report.start else 0)
    return None if waits is None or count <= 0 else waits / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    names = [n for n in args.loaders.split(",") if n]
    began = time.monotonic()
    seen: dict[str, list[tuple[float | None, float | None]]] = {n: [] for n in names}
    for round_ in range(args.rounds):
        for name in rotated(names, round_):
            seen[name].append(per_batch(LOADERS[name](args.batches)))
    rows = {}
    for name, values in seen.items():
        each = [v for v, _ in values if v is not None]
        shares = [s for _, s in values if s is not None]
        rows[name] = {
            "handover_ms": round(1000 * statistics.median(each), 3) if each else None,
            "handover_ms_runs": [round(1000 * v, 3) for v in each],
            "share_of_steady_state": round(statistics.median(shares), 4) if shares else None,
        }
    result = {
        "benchmark": "handover",
        "versions": package_versions("torch", "keras", "tensorflow-cpu", "numpy"),
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "seconds": time.monotonic() - began,
        "workload": {
            "batch": BATCH,
            "sample": "64x256 float32 + int label (1 MiB a batch)",
            "build_ms": SAMPLE_SLEEP * BATCH * 1000,
            "step_ms": STEP * 1000,
            "workers": WORKERS,
            "batches": args.batches,
            "rounds": args.rounds,
        },
        "loaders": rows,
    }
    lines = preamble("The hand-over per batch (model-bound: every batch built before it is asked for)", result)
    lines.append(f"{'loader':<12} {'hand-over per batch':>20} {'share of the steady state':>26}  runs (ms)")
    for name, row in rows.items():
        ms = "-" if row["handover_ms"] is None else f"{row['handover_ms']:.3f} ms"
        share = "-" if row["share_of_steady_state"] is None else f"{row['share_of_steady_state']:.1%}"
        lines.append(f"{name:<12} {ms:>20} {share:>26}  {row['handover_ms_runs']}")
    publish(result, "\n".join(lines), "handover", args.json, args.out)


if __name__ == "__main__":
    main()
