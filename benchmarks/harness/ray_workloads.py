"""ray_tune.py's Ray Data workloads (random images for an accelerator's step, PNGs decoded,
large blocks and a pause), each tuned by ``queuetune.tune`` and then compared with the
default in interleaved rounds."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import ray

from harness.interleave import Tunable, interleaved_comparison, tune_logged
from queuetune.render.explain import explain
from queuetune.tune import Job, run_trial

SIZE = 128


PER_BLOCK = 16


PAUSE_AT, PAUSE = 20, 3.0


DEFAULT = {"prefetch_batches": 1, "object_store_memory": None, "concurrency": None}


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


def workloads(folder: Path, scale: float) -> list[Tunable]:
    compute_steps, input_steps, pause_steps = int(60 * scale), int(200 * scale), max(int(80 * scale), PAUSE_AT + 10)
    return [
        Tunable(
            "compute-bound",
            "16 random 128x128x3 float32 images per block; a 60 ms accelerator step",
            compute_bound(compute_steps),
            compute_steps,
            10,
        ),
        Tunable(
            "input-bound",
            "16 PNG files of 128x128 decoded per block (Pillow); the step takes a mean",
            input_bound(write_pngs(folder, 256), input_steps),
            input_steps,
            10,
        ),
        Tunable(
            "pause",
            f"12 MiB blocks built in 10 ms, a 2 ms step, a {PAUSE:.0f} s pause after batch {PAUSE_AT}",
            pause(pause_steps, 0.002),
            pause_steps,
            5,
        ),
        Tunable(
            "pause-training",
            f"the same blocks, a 25 ms step, a {PAUSE:.0f} s pause after batch {PAUSE_AT}",
            pause(pause_steps, 0.025),
            pause_steps,
            5,
        ),
    ]


def compare(
    workload: Tunable, tuned: dict[str, Any], depths: dict[str, int | None], rounds: int, log: Callable[[str], None]
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


def run_workload(workload: Tunable, tune_rounds: int, rounds: int, log: Callable[[str], None]) -> dict[str, Any]:
    started = time.perf_counter()

    result = tune_logged(workload, tune_rounds, log)
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
