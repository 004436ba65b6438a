"""The GPU case of issue 15 without a GPU: batches that take hundreds of
milliseconds to build against steps of 14 ms, 12 worker processes; the
Prefetcher with its defaults against torch's DataLoader.

Run: .venv/bin/python benchmarks/slow_builds.py [--rounds 3] [--steps 300]
         [--workers 12] [--build 0.3] [--step 0.014] [--json] [--out DIR]

- The data: 38.5 MB batches (64 samples of 3x224x224 float32 and their
  labels) that take ``--build`` seconds to build, spent in ``time.sleep`` (an
  I/O-like wait: twelve workers need not twelve cores, so a 2-core machine can
  run what a GPU machine's decoding workers do). Two shapes:
  * ``samples``: a map-style dataset of samples, each sleeping ``build / 64``,
    batched and collated in the worker (``batch_size=64``): the JPEG folder's
    shape.
  * ``batches``: a dataset whose item is a whole batch, one sleep of
    ``build``, a new array made each time (``batch_size=None``): a reader of
    pre-batched records.
- The consumer: ``time.sleep(--step)`` per batch (it holds no CPU, like a step
  on a GPU), after the first 30 batches not counted.
- The loaders, ``--workers`` worker processes each (fork):
  ``DataLoader(dataset, batch_size, num_workers, prefetch_factor=2)`` and
  ``queuetune.Prefetcher(dataset, batch_size, mode="process", workers,
  max_bytes="2GiB")`` with its defaults (adaptive depth, in order, its
  memory sampled for the report). The
  newest peers are left out: torchdata.nodes' and SPDL's process variants
  pickle each batch through a pipe, 9.0 and 11.0 batches/s against torch's
  39.4 in one trial of the ``batches`` shape on this machine.
- Per run: batches per second, the fraction of the time the consumer waited,
  and the most samples (in batches) started and not yet released, counted in
  the load function the same way for both loaders; the Prefetcher's depth
  decisions. The configurations interleaved for ``--rounds`` rounds (each
  round starting one later), the median over rounds.
- The ceiling: ``workers`` batches per build time, which no loader passes.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from harness.interleave import rotated
from harness.memory import Counted
from harness.results import machine, package_versions, publish, target_lines

SAMPLE = (3, 224, 224)
BATCH = 64
WARMUP = 30
LENGTH = 100_000
SHAPES = ("samples", "batches")
LOADERS = ("torch", "prefetcher")


class Samples:
    """Sample ``i``: ``(image, label)`` after a sleep of ``seconds``; counted as it starts."""

    def __init__(self, seconds: float, counted: Counted) -> None:
        self.seconds, self.counted = seconds, counted
        self.image = np.random.default_rng(0).random(SAMPLE, dtype=np.float32)

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        self.counted.start()
        time.sleep(self.seconds)
        return self.image + np.float32(i % 7), i % 10


class Batches:
    """Item ``i``: a whole batch ``(images, labels)``, a new array, after a sleep of ``seconds``."""

    def __init__(self, seconds: float, counted: Counted) -> None:
        self.seconds, self.counted = seconds, counted
        self.images = np.random.default_rng(0).random((BATCH, *SAMPLE), dtype=np.float32)
        self.labels = np.arange(BATCH) % 10

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        self.counted.start(BATCH)
        time.sleep(self.seconds)
        return self.images + np.float32(i % 7), self.labels.copy()


def run(loader_name: str, shape: str, args: argparse.Namespace) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    import queuetune

    counted = Counted()
    if shape == "samples":
        data: Any = Samples(args.build / BATCH, counted)
        batch_size: int | None = BATCH
    else:
        data, batch_size = Batches(args.build, counted), None
    if loader_name == "prefetcher":
        loader: Any = queuetune.Prefetcher(
            data, batch_size=batch_size, mode="process", workers=args.workers, max_bytes="2GiB"
        )
    else:
        loader = DataLoader(data, batch_size=batch_size, num_workers=args.workers, prefetch_factor=2)
    arrived, waited = [], []
    iterator = iter(loader)
    try:
        for _ in range(args.steps):
            asked = time.perf_counter()
            batch = next(iterator)
            got = time.perf_counter()
            arrived.append(got)
            waited.append(got - asked)
            time.sleep(args.step)
            del batch
            counted.release(BATCH)
    finally:
        del iterator
        depths = []
        if loader_name == "prefetcher":
            depths = [m.value for m in loader.trace().marks if m.kind == "depth"]
            loader.close()
        gc.collect()
    timed = arrived[WARMUP:]
    span = timed[-1] - timed[0]
    return {
        "batches_per_s": (len(timed) - 1) / span,
        "input_wait_fraction": sum(waited[WARMUP + 1 :]) / span,
        "peak_started_batches": counted.peak / BATCH,
        "depth_marks": depths,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--build", type=float, default=0.300, help="seconds to build a batch")
    parser.add_argument("--step", type=float, default=0.014, help="seconds of the consumer's step")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="write slow_builds.json and .txt into this folder")
    args = parser.parse_args()
    if args.steps < WARMUP + 2:
        parser.error(f"--steps must be at least {WARMUP + 2}: the first {WARMUP} are not counted")
    if args.workers < 1 or args.rounds < 1 or args.build <= 0 or args.step < 0:
        parser.error("--workers and --rounds must be at least 1, --build above 0 and --step not below 0")

    configs = [(loader, shape) for shape in SHAPES for loader in LOADERS]
    runs: dict[str, list[dict[str, Any]]] = {f"{loader}/{shape}": [] for loader, shape in configs}
    started = time.monotonic()
    for round_ in range(args.rounds):
        for loader, shape in rotated(configs, round_):
            row = run(loader, shape, args)
            runs[f"{loader}/{shape}"].append(row)
            print(
                f"round {round_ + 1} {loader}/{shape}: {row['batches_per_s']:.1f} batches/s, "
                f"wait {row['input_wait_fraction']:.1%}, peak {row['peak_started_batches']:.2f} b, "
                f"depths {row['depth_marks']}",
                file=sys.stderr,
                flush=True,
            )
    summary = {
        key: {
            "batches_per_s": statistics.median(r["batches_per_s"] for r in rs),
            "rounds": [round(r["batches_per_s"], 2) for r in rs],
            "input_wait_fraction": statistics.median(r["input_wait_fraction"] for r in rs),
            "peak_started_batches": max(r["peak_started_batches"] for r in rs),
            "depth_marks": [r["depth_marks"] for r in rs],
        }
        for key, rs in runs.items()
    }
    result = {
        "benchmark": "slow_builds",
        "machine": machine(),
        "versions": package_versions("numpy", "torch", "queuetune"),
        "settings": {k: getattr(args, k) for k in ("rounds", "steps", "workers", "build", "step")},
        "batch_bytes": BATCH * (int(np.prod(SAMPLE)) * 4 + 8),
        "ceiling_batches_per_s": args.workers / args.build,
        "seconds": time.monotonic() - started,
        "loaders": summary,
        "targets": targets(summary),
    }
    publish(result, render(result), "slow_builds", args.json, args.out)
    return 0


def targets(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per shape, issue 15's two checks of the Prefetcher against torch's DataLoader."""
    checks = []
    for shape in SHAPES:
        ours, theirs = summary[f"prefetcher/{shape}"], summary[f"torch/{shape}"]
        ratio = ours["batches_per_s"] / theirs["batches_per_s"]
        checks.append(
            {"target": f"{shape}: prefetcher >= 0.99 x torch's batches/s", "value": ratio, "met": ratio >= 0.99}
        )
        # torch sets the bytes to match only where it reaches 0.98 x the faster of the two.
        counts = theirs["batches_per_s"] >= 0.98 * max(ours["batches_per_s"], theirs["batches_per_s"])
        checks.append(
            {
                "target": f"{shape}: prefetcher peak started <= torch's (n/a where torch is below 0.98 x the faster)",
                "value": f"{ours['peak_started_batches']:.2f} vs {theirs['peak_started_batches']:.2f} batches",
                "met": ours["peak_started_batches"] <= theirs["peak_started_batches"] if counts else None,
            }
        )
    return checks


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        f"Slow builds: {result['batch_bytes'] / 1e6:.1f} MB batches that take {s['build'] * 1e3:.0f} ms to build "
        f"(sleeps), {s['workers']} worker processes, steps of {s['step'] * 1e3:.0f} ms (sleeps); "
        f"ceiling {result['ceiling_batches_per_s']:.1f} batches/s",
        f"machine: {result['machine']}; versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()),
        f"{s['rounds']} interleaved rounds of {s['steps']} steps (first {WARMUP} not counted); "
        f"wall {result['seconds']:.0f} s",
        "",
        f"{'shape':<8} {'loader':<11} {'batches/s':>10} {'x torch':>8} {'x ceiling':>10} {'input wait':>11} "
        f"{'peak started':>13}  rounds",
    ]
    for shape in SHAPES:
        base = result["loaders"][f"torch/{shape}"]["batches_per_s"]
        for loader in LOADERS:
            r = result["loaders"][f"{loader}/{shape}"]
            lines.append(
                f"{shape:<8} {loader:<11} {r['batches_per_s']:>10.2f} {r['batches_per_s'] / base:>8.3f} "
                f"{r['batches_per_s'] / result['ceiling_batches_per_s']:>10.3f} {r['input_wait_fraction']:>10.1%} "
                f"{r['peak_started_batches']:>11.2f} b  " + ", ".join(map(str, r["rounds"]))
            )
    for shape in SHAPES:
        marks = result["loaders"][f"prefetcher/{shape}"]["depth_marks"]
        lines.append(f"prefetcher/{shape} depth marks per round: " + " | ".join(",".join(map(str, m)) for m in marks))
    lines += ["", *target_lines(result["targets"])]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
