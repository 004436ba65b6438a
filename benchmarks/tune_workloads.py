"""The tuner on three Keras workloads, each against the default queue.

Run: KERAS_BACKEND=torch .venv/bin/python benchmarks/tune_workloads.py
         [--rounds 5] [--tune-rounds 3] [--scale 1.0] [--only NAME ...]
         [--json] [--plot DIR] [--out benchmarks/results]
         [--render tune_workloads.json]

What is measured, and how (Keras 3 on the torch backend, all in one process):

- Three workloads, each a factory ``make(workers=4, max_queue_size=10)``
  returning a fresh ``keras.utils.PyDataset`` (worker threads) and a freshly
  compiled model that ``fit`` trains:

  * compute-bound: random float32 images 128x128x3 in batches of 16, built
    with numpy in ``__getitem__``, training a small CNN (two 3x3
    convolutions, global average pooling, a dense softmax): the model is the
    slow side.
  * input-bound: 128x128 RGB PNG files written with Pillow to a temporary
    folder at start-up, decoded and normalised to float32 in ``__getitem__``
    (batches of 32), training a light model (global average pooling and a
    dense softmax): decoding is the slow side.
  * jittery: a batch of 16 float32 images 128x128x3 after a ``time.sleep`` of
    3 ms, or of 150 ms with probability 0.04 (a seeded draw per batch index,
    as from a network disk), the same light model.

- The default is the brief's Keras setting ``workers=4, max_queue_size=10``
  (depth 11: Keras keeps up to max_queue_size + 1 batches started and not
  taken). ``queuetune.tune.tune(make, ...)`` runs a traced baseline of it,
  predicts the throughput-versus-depth curve with the queue model, measures
  the candidates it ranks best in interleaved rounds, and picks the least
  peak in-flight memory within its tolerance (2 %) of the best measured
  throughput.
- Then a final comparison of default and tuned settings, interleaved
  (default then tuned, then tuned then default, ...) with ``queuetune.tune.run_trial``:
  median throughput after the warm-up batches, highest peak in-flight bytes
  (batches built and not yet released by the step, counted by the probe),
  highest peak resident memory of the process and its largest rise within a
  run (peak minus the first sample: the process's RSS carries the earlier
  runs' allocations), median input-bound fraction.
- The predicted curve of each workload, and where it stops rising: the
  shallowest depth whose predicted throughput is at least 98 % of the
  curve's best.
- Ratios are given two ways: of the medians (peaks: of the highest), and the
  median of the paired per-round ratios (each tuned run against the default
  run just before it), which drift over the rounds does not bias.
- Targets checked: on each workload, tuned throughput >= 0.98 x default by
  the median of the paired rounds (issue 16's measure; n/a where the tuner
  kept the default, as the comparison then runs one setting twice and
  measures only its own noise); compute-bound tuned peak in-flight bytes <=
  0.3 x default (both estimates); the jittery workload's recommended depth
  deeper than the input-bound one's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np

import queuetune
from harness.interleave import add_paired, interleaved_comparison, throughput_ratios, throughput_target
from harness.results import machine, mib, preamble, target_lines
from queuetune.frameworks import KERAS
from queuetune.render.explain import explain
from queuetune.tune import TuneResult, run_trial, tune

SIZE = 128
DEFAULT = {"workers": 4, "max_queue_size": 10}
KNEE = 0.98
LENGTH = 100_000  # batches per epoch: more than any run reads


# -- workloads ----------------------------------------------------------------------------------


def light_model() -> keras.Model:
    """Global average pooling and a dense softmax: a training step of a few ms."""
    inputs = keras.Input((SIZE, SIZE, 3))
    x = keras.layers.GlobalAveragePooling2D()(inputs)
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


def cnn_model() -> keras.Model:
    """Two 3x3 convolutions, pooling and a dense softmax: the slow side on a CPU."""
    inputs = keras.Input((SIZE, SIZE, 3))
    x = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
    x = keras.layers.Conv2D(32, 3, strides=2, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


class RandomImages(keras.utils.PyDataset):
    """Random float32 images, generated in ``__getitem__`` (quick)."""

    def __init__(self, batch: int = 16, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batch = batch

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(index)
        x = rng.random((self.batch, SIZE, SIZE, 3), dtype=np.float32)
        return x, rng.integers(0, 10, self.batch)


class PngImages(keras.utils.PyDataset):
    """PNG files decoded with Pillow and normalised to float32 in ``__getitem__``."""

    def __init__(self, paths: list[Path], labels: np.ndarray, batch: int = 32, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.paths, self.labels, self.batch = paths, labels, batch

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        from PIL import Image

        picks = [(index * self.batch + j) % len(self.paths) for j in range(self.batch)]
        x = np.empty((self.batch, SIZE, SIZE, 3), dtype=np.float32)
        for row, k in enumerate(picks):
            with Image.open(self.paths[k]) as image:
                x[row] = np.asarray(image.convert("RGB"), dtype=np.float32)
        x *= 1.0 / 255.0
        return x, self.labels[picks]


class JitteryImages(keras.utils.PyDataset):
    """A copy of a fixed batch after a sleep of ``base`` s, or ``stall`` s for the
    batch indices a seeded draw marks (probability ``p``)."""

    def __init__(
        self, base: float = 0.003, stall: float = 0.150, p: float = 0.04, batch: int = 16, seed: int = 0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        rng = np.random.default_rng(seed)
        self.sleeps = np.where(rng.random(LENGTH) < p, stall, base)
        self.template = rng.random((batch, SIZE, SIZE, 3), dtype=np.float32)
        self.labels = rng.integers(0, 10, batch)

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(float(self.sleeps[index]))
        return self.template.copy(), self.labels.copy()


@dataclass
class Workload:
    name: str
    description: str
    make: Callable[..., tuple[Any, Any]]
    steps: int
    warmup: int


def write_pngs(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` 128x128 RGB PNG files: smooth gradients with noise, so that they
    neither compress to nothing nor decode trivially."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 255, SIZE, dtype=np.float32)
    paths = []
    for i in range(count):
        across = ramp[None, :, None] * rng.random(3, dtype=np.float32)
        down = ramp[:, None, None] * rng.random(3, dtype=np.float32)
        base = across + down
        pixels = np.clip(base / 2 + rng.normal(0, 24, (SIZE, SIZE, 3)), 0, 255).astype(np.uint8)
        path = folder / f"image_{i:04d}.png"
        Image.fromarray(pixels, "RGB").save(path)
        paths.append(path)
    return paths


def workloads(folder: Path, scale: float) -> list[Workload]:
    paths = write_pngs(folder, 256)
    labels = np.random.default_rng(1).integers(0, 10, len(paths))

    def compute_bound(workers: int = 4, max_queue_size: int = 10) -> tuple[Any, Any]:
        return RandomImages(workers=workers, max_queue_size=max_queue_size), cnn_model()

    def input_bound(workers: int = 4, max_queue_size: int = 10) -> tuple[Any, Any]:
        return PngImages(paths, labels, workers=workers, max_queue_size=max_queue_size), light_model()

    def jittery(workers: int = 4, max_queue_size: int = 10) -> tuple[Any, Any]:
        return JitteryImages(workers=workers, max_queue_size=max_queue_size), light_model()

    def steps(n: int) -> int:
        return max(20, int(n * scale))

    return [
        Workload(
            "compute-bound",
            "random float32 128x128x3 images, batch 16 (3 MiB), built with numpy; CNN: Conv2D(16, 3) + "
            "Conv2D(32, 3, strides 2) + global average pooling + Dense(10)",
            compute_bound,
            steps(150),
            10,
        ),
        Workload(
            "input-bound",
            "256 PNG files 128x128 RGB decoded with Pillow and normalised to float32, batch 32 (6 MiB); "
            "light model: global average pooling + Dense(10)",
            input_bound,
            steps(300),
            30,
        ),
        Workload(
            "jittery",
            "sleep 3 ms, or 150 ms with probability 0.04 (seeded per batch index), then a copy of a "
            "float32 batch 16x128x128x3 (3 MiB); light model",
            jittery,
            steps(400),
            40,
        ),
    ]


# -- measuring ----------------------------------------------------------------------------------


def rss_rise(trace: Any) -> int | None:
    """Peak resident memory of the process during a run minus its first sample."""
    samples = trace.memory
    if not samples:
        return None
    return max(s.rss for s in samples) - samples[0].rss


def knee(curve: list[dict[str, Any]]) -> int | None:
    """The shallowest predicted depth within ``KNEE`` of the curve's best throughput:
    where the predicted throughput stops rising."""
    if not curve:
        return None
    best = max(p["throughput"] for p in curve)
    return min(p["depth"] for p in curve if p["throughput"] >= KNEE * best)


def compare(workload: Workload, tuned: dict[str, Any], rounds: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Default and tuned settings, interleaved A B, B A, A B ..., with the process's resident memory."""

    def run(settings: dict[str, Any]) -> dict[str, Any]:
        trace, report, rate = run_trial(workload.make, settings, "keras", workload.steps, workload.warmup)
        return {
            "throughput": rate,
            "peak_in_flight_batches": report.peak_in_flight_batches,
            "peak_in_flight_bytes": report.peak_in_flight_bytes,
            "peak_rss_bytes": report.peak_rss_bytes,
            "rss_rise_bytes": rss_rise(trace),
            "input_bound_fraction": report.input_bound_fraction,
        }

    summary = interleaved_comparison(
        {"default": DEFAULT, "tuned": tuned},
        rounds,
        run,
        lambda done: log(f"  {workload.name}: comparison round {done}/{rounds}"),
    )
    for name in ("default", "tuned"):
        rows, row = summary["runs"][name], summary[name]
        rss = [r["peak_rss_bytes"] for r in rows if r["peak_rss_bytes"] is not None]
        rises = [r["rss_rise_bytes"] for r in rows if r["rss_rise_bytes"] is not None]
        row.update(
            depth=KERAS.depth(row["settings"]),
            median_peak_in_flight_bytes=statistics.median(r["peak_in_flight_bytes"] for r in rows),
            peak_rss_bytes=max(rss) if rss else None,
            rss_rise_bytes=max(rises) if rises else None,
        )
    d, t = summary["default"], summary["tuned"]
    summary["peak_rss_ratio"] = t["peak_rss_bytes"] / d["peak_rss_bytes"] if d["peak_rss_bytes"] else None
    return summary


def run_workload(
    workload: Workload, tune_rounds: int, rounds: int, log: Callable[[str], None]
) -> tuple[dict[str, Any], TuneResult]:
    started = time.perf_counter()

    def progress(done: int, total: int, label: str) -> None:
        log(f"  {workload.name}: tune trial {done}/{total} ({label})")

    result = tune(workload.make, steps=workload.steps, warmup=workload.warmup, rounds=tune_rounds, progress=progress)
    tuned_seconds = time.perf_counter() - started
    tuned = {**DEFAULT, **result.kwargs()}
    tuned = {k: tuned[k] for k in DEFAULT}
    comparison = compare(workload, tuned, rounds, log)
    curve = [
        {
            "depth": p.depth,
            "throughput": p.throughput,
            "input_wait_fraction": p.input_wait_fraction,
            "peak_built_batches": p.peak_built_batches,
            "peak_built_bytes": p.peak_built_bytes,
        }
        for p in sorted(result.predictions, key=lambda p: p.depth)
    ]
    chosen = result.chosen
    entry = {
        "workload": workload.name,
        "description": workload.description,
        "steps": workload.steps,
        "warmup": workload.warmup,
        "recommended": result.kwargs(),
        "recommended_depth": chosen.depth if chosen else None,
        "predicted_knee_depth": knee(curve),
        "predicted_curve": curve,
        "tune": {**result.to_dict(), "explanation": explain(result)},
        "tune_seconds": tuned_seconds,
        "comparison": comparison,
        "seconds": time.perf_counter() - started,
    }
    return entry, result


def versions() -> dict[str, str]:
    import PIL
    import torch

    return {
        "python": platform.python_version(),
        "keras": f"{keras.__version__} ({keras.backend.backend()} backend)",
        "torch": torch.__version__,
        "numpy": np.__version__,
        "pillow": PIL.__version__,
        "queuetune": queuetune.__version__,
    }


def targets(entries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    checks = [throughput_target(name, entry["comparison"]) for name, entry in entries.items()]
    compute = entries.get("compute-bound")
    if compute:
        c = compute["comparison"]
        a, b = c["peak_bytes_ratio"], c["paired_peak_bytes_ratio"]
        checks.append(
            {
                "target": "compute-bound: tuned peak in-flight bytes <= 0.3 x default (both estimates)",
                "value": f"ratio of the highest peaks {a:.3f}, median of paired rounds {b:.3f}",
                "met": a is not None and b is not None and a <= 0.3 and b <= 0.3,
            }
        )
    jittery, inputs = entries.get("jittery"), entries.get("input-bound")
    if jittery and inputs:
        a, b = jittery["recommended_depth"], inputs["recommended_depth"]
        checks.append(
            {
                "target": "jittery: recommended depth deeper than input-bound",
                "value": f"{a} vs {b} (predicted curve stops rising at {jittery['predicted_knee_depth']} vs "
                f"{inputs['predicted_knee_depth']})",
                "met": a is not None and b is not None and a > b,
            }
        )
    return checks


# -- output -------------------------------------------------------------------------------------


def _settings(settings: dict[str, Any]) -> str:
    return f"workers={settings['workers']}, max_queue_size={settings['max_queue_size']}"


CURVE_DEPTHS = [2, 3, 4, 5, 6, 8, 10, 11, 12, 16, 20, 24, 28, 32]


def table(result: dict[str, Any]) -> str:
    lines = preamble(
        f"queuetune tune on three Keras workloads against workers=4, max_queue_size=10 "
        f"(Keras's own PyDataset default is workers=1, no queue); {result['rounds']} interleaved comparison "
        f"rounds, tuner rounds {result['tune_rounds']}",
        result,
    )
    header = (
        f"{'workload':<14} {'setting':<8} {'queue':<30} {'depth':>5} {'batches/s':>9} {'peak in flight':>19} "
        f"{'peak RSS':>10} {'RSS rise':>10} {'input wait':>10}"
    )
    lines += [header, "-" * len(header)]
    for entry in result["workloads"].values():
        c = entry["comparison"]
        for name in ("default", "tuned"):
            row = c[name]
            flight = f"{row['peak_in_flight_batches']} / {mib(row['peak_in_flight_bytes'])}"
            wait = row["input_bound_fraction"]
            lines.append(
                f"{entry['workload']:<14} {name:<8} {_settings(row['settings']):<30} {row['depth']:>5} "
                f"{row['throughput']:>9.1f} {flight:>19} {mib(row['peak_rss_bytes']):>10} "
                f"{mib(row['rss_rise_bytes']):>10} {'n/a' if wait is None else f'{wait:.0%}':>10}"
            )
        lines.append(
            f"{'':<14} tuned/default: {throughput_ratios(c)}, peak in-flight bytes {c['peak_bytes_ratio']:.3f} "
            f"(paired median {c['paired_peak_bytes_ratio']:.3f}), "
            f"peak RSS {c['peak_rss_ratio']:.3f}; recommended "
            f"{entry['recommended']} (depth {entry['recommended_depth']}); predicted curve stops rising at depth "
            f"{entry['predicted_knee_depth']}; runs of {entry['steps']} steps (throughput after {entry['warmup']})"
        )
        for line in entry["tune"]["explanation"]:
            lines.append(f"{'':<14}   {line}")
        lines.append("")
    lines.append(
        "batches/s = median of the comparison rounds; peak in flight = highest of the rounds (batches / bytes "
        "built and not yet released); peak RSS = highest resident memory of the process; RSS rise = largest "
        "peak-minus-start within one run; input wait = median input-bound fraction"
    )
    lines.append("")
    names = list(result["workloads"])
    lines.append("Predicted throughput (batches/s) by depth, and its share of the workload's best prediction:")
    header = f"{'depth':>5} " + " ".join(f"{n:>22}" for n in names)
    lines += [header, "-" * len(header)]
    curves = {n: {p["depth"]: p for p in result["workloads"][n]["predicted_curve"]} for n in names}
    bests = {n: max((p["throughput"] for p in curves[n].values()), default=0.0) for n in names}
    for depth in CURVE_DEPTHS:
        cells = []
        for n in names:
            p = curves[n].get(depth)
            if p is None:
                cells.append(f"{'':>22}")
                continue
            mark = "*" if depth == result["workloads"][n]["recommended_depth"] else " "
            cells.append(f"{p['throughput']:>12.1f} ({p['throughput'] / bests[n]:>5.1%}){mark}")
        lines.append(f"{depth:>5} " + " ".join(cells))
    lines.append("* = the recommended depth")
    lines.append("")
    lines += target_lines(result["targets"])
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved default/tuned rounds (default 5)")
    parser.add_argument("--tune-rounds", type=int, default=3, help="the tuner's rounds (default 3)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every run's steps (default 1.0)")
    parser.add_argument("--only", nargs="+", choices=["compute-bound", "input-bound", "jittery"])
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--plot", type=Path, help="write tune_<workload>.png into this folder")
    parser.add_argument("--out", type=Path, help="write tune_workloads.json, .txt and the PNGs into this folder")
    parser.add_argument("--render", type=Path, help="print the table of a saved tune_workloads.json and exit")
    args = parser.parse_args()
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        for entry in saved["workloads"].values():
            if "paired_throughput_ratio" not in entry["comparison"]:
                add_paired(entry["comparison"])
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
    results: dict[str, TuneResult] = {}
    try:
        for workload in workloads(folder, args.scale):
            if args.only and workload.name not in args.only:
                continue
            log(f"{workload.name}: tuning ({time.perf_counter() - started:.0f} s)")
            entries[workload.name], results[workload.name] = run_workload(workload, args.tune_rounds, args.rounds, log)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result = {
        "benchmark": "tune_workloads",
        "default": DEFAULT,
        "rounds": args.rounds,
        "tune_rounds": args.tune_rounds,
        "scale": args.scale,
        "versions": versions(),
        "machine": machine(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - started,
        "workloads": entries,
    }
    result["targets"] = targets(entries)
    text = table(result)
    folders = [f for f in (args.plot, args.out) if f is not None]
    for out in folders:
        out.mkdir(parents=True, exist_ok=True)
        from queuetune.render.plot import plot_tune

        for name, tuned in results.items():
            plot_tune(tuned).savefig(out / f"tune_{name}.png")
    if args.out is not None:
        (args.out / "tune_workloads.json").write_text(json.dumps(result, indent=2, default=str))
        (args.out / "tune_workloads.txt").write_text(text + "\n")
    print(json.dumps(result, indent=2, default=str) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
