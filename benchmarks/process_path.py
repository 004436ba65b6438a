"""Large batches from worker processes: the Prefetcher's process path against torch's
DataLoader, and both against one plain copy of the same bytes.

Run: .venv/bin/python benchmarks/process_path.py [--rounds 5] [--batches 300] [--json] [--out DIR]

- The data: a map-style dataset of samples 3x224x224 float32 (588 KiB), each a
  slice of one array made at start, so building a sample costs nothing and the
  batch's cost is the path itself: collating 64 samples (38.5 MB) in the worker
  and bringing the batch to the consumer.
- The loaders, both with 2 worker processes (fork) and a fixed depth of 8:
  ``queuetune.Prefetcher(dataset, batch_size=64, mode="process", workers=2,
  adaptive=False, depth=8, max_bytes=16 batches)`` and ``torch.utils.data.DataLoader(
  dataset, batch_size=64, num_workers=2, prefetch_factor=4)``; with numpy
  samples and with torch tensor samples.
- The consumer touches every 4 KiB page of each batch (one float a page), so a
  batch whose pages are not yet mapped in the consumer pays for it here.
- Throughput: batches per second in two spans of each run: the start (batches
  5 to 60, while the Prefetcher's shared-memory segments are used for the first
  time and their pages fault in both processes) and the steady state (batch 60
  to the end); in one process, the configurations interleaved for ``--rounds``
  rounds (each round one run of each, starting one later each round); the
  median over rounds, and GB/s.
- The reference: ``np.copyto`` of the same 38.5 MB into a buffer already written
  once (one copy, no page faults), the median of 20.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from harness.interleave import rotated
from harness.results import machine, package_versions, publish

SAMPLE = (3, 224, 224)
BATCH = 64
WORKERS = 2
DEPTH = 8
WARMUP = 5
STEADY_FROM = 60


class Samples:
    """``n`` samples; sample ``i`` is a row of a shared array (numpy) or its tensor view."""

    def __init__(self, n: int, kind: str) -> None:
        self.kind = kind
        self.rows = np.random.default_rng(0).random((BATCH, *SAMPLE), dtype=np.float32)
        self.n = n
        if kind == "torch":
            import torch

            self.tensors = torch.from_numpy(self.rows)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        if self.kind == "torch":
            return self.tensors[i % BATCH]
        return self.rows[i % BATCH]


def touch(batch: Any) -> float:
    """One float of every 4 KiB page."""
    array = batch.numpy() if hasattr(batch, "numpy") else batch
    return float(array.reshape(-1)[::1024].sum())


def run(loader_name: str, kind: str, batches: int) -> dict[str, float]:
    import torch
    from torch.utils.data import DataLoader

    import queuetune

    data = Samples(batches * BATCH, kind)
    if loader_name == "prefetcher":
        loader: Any = queuetune.Prefetcher(
            data,
            batch_size=BATCH,
            mode="process",
            workers=WORKERS,
            adaptive=False,
            depth=DEPTH,
            max_bytes=16 * BATCH * int(np.prod(SAMPLE)) * 4,
            sample_memory=False,
        )
    else:
        loader = DataLoader(data, batch_size=BATCH, num_workers=WORKERS, prefetch_factor=DEPTH // WORKERS)
    times = []
    with torch.no_grad():
        for batch in loader:
            touch(batch)
            times.append(time.perf_counter())
    if loader_name == "prefetcher":
        loader.close()
    return {"start": rate(times[WARMUP : STEADY_FROM + 1]), "steady": rate(times[STEADY_FROM:])}


def rate(times: list[float]) -> float:
    """Batches per second between the first and the last of ``times``."""
    return (len(times) - 1) / (times[-1] - times[0])


def memcpy_gbps(nbytes: int) -> float:
    src = np.random.default_rng(1).random(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    dst[...] = 0
    spans = []
    for _ in range(20):
        start = time.perf_counter()
        np.copyto(dst, src)
        spans.append(time.perf_counter() - start)
    return nbytes / statistics.median(spans) / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="write process_path.json and .txt into this folder")
    args = parser.parse_args()
    if args.batches < STEADY_FROM + 2:
        parser.error(f"--batches must be at least {STEADY_FROM + 2}: the steady state counts from batch {STEADY_FROM}")

    configs = [(loader, kind) for kind in ("numpy", "torch") for loader in ("prefetcher", "torch")]
    runs: dict[str, list[dict[str, float]]] = {f"{loader}/{kind}": [] for loader, kind in configs}
    for round_ in range(args.rounds):
        for loader, kind in rotated(configs, round_):
            rates = run(loader, kind, args.batches)
            runs[f"{loader}/{kind}"].append(rates)
            print(
                f"round {round_}: {loader}/{kind} start {rates['start']:.1f}, steady {rates['steady']:.1f} batches/s",
                file=sys.stderr,
                flush=True,
            )
    nbytes = BATCH * int(np.prod(SAMPLE)) * 4
    result = {
        "benchmark": "process_path",
        "machine": machine(),
        "versions": package_versions("numpy", "torch", "queuetune"),
        "batch_bytes": nbytes,
        "rounds": args.rounds,
        "batches": args.batches,
        "memcpy_gbps": memcpy_gbps(nbytes),
        "runs": runs,
        "median": {
            k: {span: statistics.median(r[span] for r in v) for span in ("start", "steady")} for k, v in runs.items()
        },
    }
    publish(result, render(result), "process_path", args.json, args.out)
    return 0


def render(result: dict[str, Any]) -> str:
    nbytes = result["batch_bytes"]
    memcpy = result["memcpy_gbps"]
    lines = [
        f"Large batches from worker processes ({nbytes / 1e6:.1f} MB a batch, {WORKERS} workers, depth {DEPTH}), "
        f"{result['rounds']} interleaved rounds of {result['batches']} batches",
        f"machine: {result['machine']}; versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()),
        f"one copy of the batch (np.copyto into a written buffer): {memcpy:.2f} GB/s",
        f"start: batches {WARMUP}-{STEADY_FROM}; steady state: batch {STEADY_FROM} to the end",
        "",
        f"{'samples':<8} {'loader':<12} {'start b/s':>10} {'steady b/s':>11} {'GB/s':>6} {'x torch':>8} "
        f"{'x memcpy':>9}  steady rounds",
    ]
    for kind in ("numpy", "torch"):
        base = result["median"][f"torch/{kind}"]["steady"]
        for loader in ("prefetcher", "torch"):
            key = f"{loader}/{kind}"
            start, steady = result["median"][key]["start"], result["median"][key]["steady"]
            gbps = steady * nbytes / 1e9
            rounds = ", ".join(f"{r['steady']:.1f}" for r in result["runs"][key])
            lines.append(
                f"{kind:<8} {loader:<12} {start:>10.1f} {steady:>11.1f} {gbps:>6.2f} {steady / base:>8.2f} "
                f"{gbps / memcpy:>9.2f}  {rounds}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
