"""Ray Data default against tuned, on a two-node Ray cluster on this machine.

Run: .venv/bin/python benchmarks/ray_tune.py [--rounds 5] [--tune-rounds 2]
         [--only NAME ...] [--json] [--out benchmarks/results] [--render ray_tune.json]

What is measured, and how (Ray 2.60; the driver is this process):

- A cluster of two nodes started with ``ray start`` (a head, then a second node
  joining its address), one CPU and 2 GiB of object store each, so Ray Data's
  default budget is 2 GiB (half the cluster's store). It is stopped at the end,
  also on failure.
- Four workloads, each a factory ``make(concurrency=None)`` returning a fresh
  dataset and the training step (``queuetune.tune.Job``, read with
  ``iter_batches(batch_size=None)``: one batch per block):

  * compute-bound: blocks of 16 random float32 images 128x128x3 (3 MiB) made
    with numpy; the step is a training step on an accelerator, 60 ms in which
    the host's CPUs are free (a sleep: on this 2-CPU machine a model trained on
    the CPU would take the CPUs the cluster builds blocks with, and the
    pipeline would be input-bound; measured with a small CNN in torch: 48 %
    input wait): the model is the slow side.
  * input-bound: 128x128 RGB PNG files written with Pillow to a temporary
    folder, decoded and normalised to float32 in the map step, 16 per block
    (3 MiB); the step takes the mean: decoding is the slow side.
  * pause: 12 MiB blocks built in 10 ms (a busy loop), a 2 ms step, and a 3 s
    pause of the trainer after its 20th batch (a validation, a checkpoint).
    Between pauses the cluster is the slow side, so the blocks built during
    the pause are taken faster than they are built afterwards.
  * pause-training: the same blocks and pause with a 25 ms step.

- The default: ``prefetch_batches=1``, Ray's budget and concurrency.
  ``queuetune.tune.tune(make, ...)`` runs a traced baseline of it, predicts
  throughput against depth with the queue model, measures the candidates it
  ranks best in interleaved rounds and picks the least peak memory within 2 %
  of the best measured throughput.
- Then default and tuned, interleaved (default then tuned, then tuned then default, ...)
  with ``queuetune.tune.run_trial``: median throughput after the warm-up
  batches (the pause included), and the peak of blocks held: built by the
  remote tasks and not yet taken by the trainer, with their bytes, counted by
  ``queuetune.watch`` (blocks live in the object store until the trainer takes
  them).
- Targets: tuned throughput >= 0.98 x default (ratio of medians and median of
  paired rounds), and in the pause workloads no more blocks held than the
  tuned depth plus one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ray_cluster import DRIVER_ENV, LocalCluster

os.environ.update(DRIVER_ENV)

import numpy as np
import ray

from harness.interleave import interleaved_comparison, throughput_ratios, throughput_target
from harness.results import machine, mib, package_versions, preamble, target_lines
from queuetune.render.explain import explain
from queuetune.tune import Job, run_trial, tune

SIZE = 128
PER_BLOCK = 16
NODE_STORE = 2 * 2**30
PAUSE_AT, PAUSE = 20, 3.0
DEFAULT = {"prefetch_batches": 1, "object_store_memory": None, "concurrency": None}


@dataclass
class Workload:
    name: str
    description: str
    make: Callable[..., Any]
    steps: int
    warmup: int


# -- compute-bound ----------------------------------------------------------------------


def random_images(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(int(batch["id"][0]))
    images = rng.random((len(batch["id"]), SIZE, SIZE, 3), dtype=np.float32)
    return {"image": images, "label": (batch["id"] % 10).astype(np.int64)}


def accelerator_step(batch: dict[str, np.ndarray]) -> None:
    """A training step on an accelerator: 60 ms in which the host's CPUs are free."""
    time.sleep(0.060)


def compute_bound(steps: int) -> Callable[..., Any]:
    def make(concurrency: int | None = None) -> Job:
        rows = (steps + 8) * PER_BLOCK
        ds = ray.data.range(rows, override_num_blocks=rows // PER_BLOCK).map_batches(
            random_images, batch_size=PER_BLOCK, compute=ray.data.TaskPoolStrategy(size=concurrency)
        )
        return Job(ds, step=accelerator_step, kwargs={"batch_size": None})

    return make


# -- input-bound ------------------------------------------------------------------------


def write_pngs(folder: Path, count: int) -> list[str]:
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"{i:05d}.png"
        Image.fromarray(rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    return paths


def decode(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from PIL import Image

    images = np.stack([np.asarray(Image.open(p).convert("RGB"), np.float32) / 255.0 for p in batch["path"]])
    return {"image": images}


def mean_step(batch: dict[str, np.ndarray]) -> None:
    float(batch["image"].mean())


def input_bound(paths: list[str], steps: int) -> Callable[..., Any]:
    def make(concurrency: int | None = None) -> Job:
        rows = (steps + 8) * PER_BLOCK
        items = [{"path": paths[i % len(paths)]} for i in range(rows)]
        ds = ray.data.from_items(items, override_num_blocks=rows // PER_BLOCK).map_batches(
            decode, batch_size=PER_BLOCK, compute=ray.data.TaskPoolStrategy(size=concurrency)
        )
        return Job(ds, step=mean_step, kwargs={"batch_size": None})

    return make


# -- pause ------------------------------------------------------------------------------

PAUSE_BLOCK = 12 * 2**20


def busy_block(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    started = time.perf_counter()
    block = np.ones((1, PAUSE_BLOCK // 4), np.float32)
    while time.perf_counter() - started < 0.010:
        pass
    return {"x": block}


class PausingStep:
    """A step of ``seconds``, and a pause of ``PAUSE`` seconds after the 20th batch of each run."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.seen = 0

    def __call__(self, batch: dict[str, np.ndarray]) -> None:
        self.seen += 1
        time.sleep(PAUSE if self.seen == PAUSE_AT else self.seconds)


def pause(steps: int, step_seconds: float) -> Callable[..., Any]:
    def make(concurrency: int | None = None) -> Job:
        ds = ray.data.range(steps + 8, override_num_blocks=steps + 8).map_batches(
            busy_block, batch_size=1, compute=ray.data.TaskPoolStrategy(size=concurrency)
        )
        return Job(ds, step=PausingStep(step_seconds), kwargs={"batch_size": None})

    return make


def workloads(folder: Path, scale: float) -> list[Workload]:
    compute_steps, input_steps, pause_steps = int(60 * scale), int(200 * scale), max(int(80 * scale), PAUSE_AT + 10)
    return [
        Workload(
            "compute-bound",
            "16 random 128x128x3 float32 images per block; a 60 ms accelerator step",
            compute_bound(compute_steps),
            compute_steps,
            10,
        ),
        Workload(
            "input-bound",
            "16 PNG files of 128x128 decoded per block (Pillow); the step takes a mean",
            input_bound(write_pngs(folder, 256), input_steps),
            input_steps,
            10,
        ),
        Workload(
            "pause",
            f"12 MiB blocks built in 10 ms, a 2 ms step, a {PAUSE:.0f} s pause after batch {PAUSE_AT}",
            pause(pause_steps, 0.002),
            pause_steps,
            5,
        ),
        Workload(
            "pause-training",
            f"the same blocks, a 25 ms step, a {PAUSE:.0f} s pause after batch {PAUSE_AT}",
            pause(pause_steps, 0.025),
            pause_steps,
            5,
        ),
    ]


# -- runs -------------------------------------------------------------------------------


def compare(
    workload: Workload, tuned: dict[str, Any], depths: dict[str, int | None], rounds: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """Default and tuned settings, interleaved A B, B A, A B ..., with the nodes that built blocks."""

    def run(settings: dict[str, Any]) -> dict[str, Any]:
        _, report, rate = run_trial(workload.make, settings, "ray", workload.steps, workload.warmup)
        return {
            "throughput": rate,
            "peak_in_flight_batches": report.peak_in_flight_batches,
            "peak_in_flight_bytes": report.peak_in_flight_bytes,
            "input_bound_fraction": report.input_bound_fraction,
            "nodes": len(report.nodes),
        }

    summary = interleaved_comparison(
        {"default": DEFAULT, "tuned": tuned},
        rounds,
        run,
        lambda done: log(f"  {workload.name}: comparison round {done}/{rounds}"),
    )
    for name in ("default", "tuned"):
        summary[name].update(depth=depths[name], nodes=max(r["nodes"] for r in summary["runs"][name]))
    return summary


def run_workload(workload: Workload, tune_rounds: int, rounds: int, log: Callable[[str], None]) -> dict[str, Any]:
    started = time.perf_counter()

    def progress(done: int, total: int, label: str) -> None:
        log(f"  {workload.name}: tune trial {done}/{total} ({label})")

    result = tune(workload.make, steps=workload.steps, warmup=workload.warmup, rounds=tune_rounds, progress=progress)
    tuned = {**DEFAULT, **result.kwargs()}
    default = result.default
    depths = {"default": default.depth if default else None, "tuned": result.chosen.depth if result.chosen else None}
    comparison = compare(workload, tuned, depths, rounds, log)
    return {
        "workload": workload.name,
        "description": workload.description,
        "steps": workload.steps,
        "warmup": workload.warmup,
        "recommended": result.kwargs(),
        "recommended_depth": result.chosen.depth if result.chosen else None,
        "tune": {**result.to_dict(), "explanation": explain(result)},
        "comparison": comparison,
        "seconds": time.perf_counter() - started,
    }


def targets(entries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    checks = [throughput_target(name, entry["comparison"]) for name, entry in entries.items()]
    for name in ("pause", "pause-training"):
        if name not in entries:
            continue
        c = entries[name]["comparison"]
        held, depth = c["tuned"]["peak_in_flight_batches"], c["tuned"]["depth"]
        checks.append(
            {
                "target": f"{name}: blocks held at most the tuned depth + 1",
                "value": f"tuned {held} (depth {depth}), default {c['default']['peak_in_flight_batches']}",
                "met": depth is not None and held <= depth + 1,
            }
        )
    return checks


# -- output -----------------------------------------------------------------------------


def _settings(settings: dict[str, Any]) -> str:
    budget = settings["object_store_memory"]
    return (
        f"prefetch {settings['prefetch_batches']}, budget {'default' if budget is None else mib(budget)}, "
        f"concurrency {settings['concurrency'] or 'default'}"
    )


def table(result: dict[str, Any]) -> str:
    lines = preamble(
        f"queuetune tune on Ray Data workloads against Ray's defaults, on a {result['cluster']}; "
        f"{result['rounds']} interleaved comparison rounds, tuner rounds {result['tune_rounds']}",
        result,
    )
    header = (
        f"{'workload':<14} {'setting':<8} {'knobs':<50} {'depth':>5} {'batches/s':>9} "
        f"{'peak held':>20} {'input wait':>10}"
    )
    lines += [header, "-" * len(header)]
    for entry in result["workloads"].values():
        c = entry["comparison"]
        for name in ("default", "tuned"):
            row = c[name]
            held = f"{row['peak_in_flight_batches']} / {mib(row['peak_in_flight_bytes'])}"
            wait = row["input_bound_fraction"]
            lines.append(
                f"{entry['workload']:<14} {name:<8} {_settings(row['settings']):<50} {row['depth']:>5} "
                f"{row['throughput']:>9.1f} {held:>20} {'n/a' if wait is None else f'{wait:.0%}':>10}"
            )
        lines.append(
            f"{'':<14} tuned/default: {throughput_ratios(c)}, peak bytes held {c['peak_bytes_ratio']:.3f} "
            f"(paired median {c['paired_peak_bytes_ratio']:.3f}); "
            f"runs of {entry['steps']} steps (throughput after {entry['warmup']})"
        )
        for line in entry["tune"]["explanation"]:
            lines.append(f"{'':<14}   {line}")
        lines.append("")
    lines.append(
        "batches/s = median of the comparison rounds; peak held = highest of the rounds (blocks built and "
        "not yet taken by the trainer / their bytes); input wait = median input-bound fraction"
    )
    lines.append("")
    lines += target_lines(result["targets"])
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved default/tuned rounds (default 5)")
    parser.add_argument("--tune-rounds", type=int, default=3, help="the tuner's rounds (default 3)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every run's steps (default 1.0)")
    parser.add_argument("--only", nargs="+", choices=["compute-bound", "input-bound", "pause", "pause-training"])
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--out", type=Path, help="write ray_tune.json and .txt into this folder")
    parser.add_argument("--render", type=Path, help="print the table of a saved ray_tune.json and exit")
    args = parser.parse_args()
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        saved["targets"] = targets(saved["workloads"])
        print(table(saved))
        return 0
    if args.rounds < 1 or args.tune_rounds < 1 or args.scale <= 0:
        parser.error("--rounds and --tune-rounds must be at least 1, --scale positive")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="queuetune_pngs_"))
    entries: dict[str, dict[str, Any]] = {}
    # Ray's own worker priority (nice 15), as a user's cluster has it.
    cluster = LocalCluster(nodes=2, cpus=1, object_store=NODE_STORE, worker_niceness=None)
    try:
        cluster.connect(logging_level="ERROR", log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        for workload in workloads(folder, args.scale):
            if args.only and workload.name not in args.only:
                continue
            log(f"{workload.name}: tuning ({time.perf_counter() - started:.0f} s)")
            entries[workload.name] = run_workload(workload, args.tune_rounds, args.rounds, log)
    finally:
        cluster.disconnect()
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
    result = {
        "benchmark": "ray_tune",
        "cluster": f"2-node Ray cluster (ray start), 1 CPU and {NODE_STORE // 2**30} GiB of object store per node",
        "default": DEFAULT,
        "rounds": args.rounds,
        "tune_rounds": args.tune_rounds,
        "scale": args.scale,
        "versions": package_versions("ray", "pyarrow", "numpy", "pillow", "queuetune"),
        "machine": machine(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - started,
        "workloads": entries,
    }
    result["targets"] = targets(entries)
    text = table(result)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ray_tune.json").write_text(json.dumps(result, indent=2, default=str))
        (args.out / "ray_tune.txt").write_text(text + "\n")
    print(json.dumps(result, indent=2, default=str) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
