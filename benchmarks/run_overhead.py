"""The cost of ``queuetune run``: examples/train_torchvision.py (JPEGs decoded and
augmented by a 2-worker DataLoader, a ResNet-18 trained on the CPU) run plainly
and under ``queuetune run``, interleaved.

Run: .venv/bin/python benchmarks/run_overhead.py [--images 2000] [--steps 100]
         [--rounds 3] [--json] [--out DIR]

- Both run as a new Python process each: ``python examples/train_torchvision.py
  IMAGES --steps N`` and ``python -m queuetune run --out TMP --no-live
  examples/train_torchvision.py IMAGES --steps N`` (the report, the trace and the
  HTML page written at the end).
- Training throughput: the images/s the script prints for its own step loop;
  wall time: the process from start to exit (the report and the page included).
- Each round runs both, the order alternating; ratios are queuetune run / plain,
  each round's and their median.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.interleave import rotated
from harness.results import machine, package_versions, preamble, publish

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_torchvision.py"
VARIANTS = ("plain", "queuetune run")


def command(variant: str, images: Path, steps: int, out: Path, stream: bool) -> list[str]:
    script = [str(EXAMPLE), str(images), "--steps", str(steps), *(["--stream"] if stream else [])]
    if variant == "plain":
        return [sys.executable, *script]
    return [sys.executable, "-m", "queuetune", "run", "--out", str(out), "--no-live", *script]


def measure(variant: str, images: Path, steps: int, out: Path, stream: bool) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(command(variant, images, steps, out, stream), capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed ({done.returncode}): {done.stderr[-2000:]}")
    found = re.search(r"in ([\d.]+) s: ([\d.]+) images/s", done.stdout)
    assert found, done.stdout
    return {"wall_s": wall, "loop_s": float(found.group(1)), "images_per_s": float(found.group(2))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--stream", action="store_true", help="the example's --stream: an IterableDataset, its samples fingerprinted"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(EXAMPLE.parent))
    from images import make_images

    began = time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "images"
        make_images(folder, args.images)
        for round_ in range(args.rounds):
            for variant in rotated(list(VARIANTS), round_):
                runs[variant].append(measure(variant, folder, args.steps, Path(scratch) / f"run-{round_}", args.stream))
                print(f"round {round_ + 1} {variant}: {runs[variant][-1]}", file=sys.stderr)
    pairs = list(zip(runs["plain"], runs["queuetune run"]))
    ratios = {key: [q[key] / p[key] for p, q in pairs] for key in ("images_per_s", "wall_s")}
    result = {
        "workload": f"examples/train_torchvision.py{' --stream' if args.stream else ''}: {args.images} JPEGs, "
        f"batch 16, 2 workers, {args.steps} steps",
        "rounds": args.rounds,
        "runs": runs,
        "ratios": ratios,
        "median_ratios": {k: statistics.median(v) for k, v in ratios.items()},
        "versions": package_versions("torch", "numpy", "pillow", "queuetune"),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": time.perf_counter() - began,
    }
    lines = preamble(
        f"queuetune run against a plain run, {result['workload']}; {args.rounds} interleaved rounds", result
    )
    lines.append(f"{'variant':15} {'images/s (median)':>18} {'wall s (median)':>16}")
    for variant in VARIANTS:
        images = statistics.median(r["images_per_s"] for r in runs[variant])
        wall = statistics.median(r["wall_s"] for r in runs[variant])
        lines.append(f"{variant:15} {images:18.2f} {wall:16.1f}")
    lines.append("")
    for key, label in (("images_per_s", "training images/s"), ("wall_s", "wall time")):
        each = ", ".join(f"{x:.3f}" for x in ratios[key])
        lines.append(f"queuetune run / plain, {label}: median {result['median_ratios'][key]:.3f} (rounds {each})")
    publish(result, "\n".join(lines), "run_overhead.stream" if args.stream else "run_overhead", args.json, args.out)


if __name__ == "__main__":
    main()
