"""What a sample's fingerprint costs: queuetune.record.fingerprint.fingerprint on
samples of several sizes (numpy arrays and torch tensors), against one copy of
the same bytes (numpy's copyto into a reused buffer) on the same machine.

Run: .venv/bin/python benchmarks/fingerprint_cost.py [--repeats 30] [--json] [--out DIR]

- Samples: float32 arrays of 4 KiB, 64 KiB, 1 MiB and 16 MiB; an image sample
  as the ImageNet recipe makes it (a 3x224x224 float32 tensor and an int label,
  588 KiB); a small dict sample (an int id, a 32-byte string, 16 floats).
- Each timing is the median of ``--repeats`` runs of a loop long enough to take
  about 20 ms; MiB/s is the sample's bytes over that median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness.results import machine, package_versions, preamble, publish

sys.path.insert(0, "src")
from queuetune.record.fingerprint import fingerprint


def samples() -> dict[str, tuple[Any, int]]:
    import torch

    found: dict[str, tuple[Any, int]] = {}
    for label, size in (("4 KiB", 2**12), ("64 KiB", 2**16), ("1 MiB", 2**20), ("16 MiB", 2**24)):
        found[f"float32 array, {label}"] = (np.random.default_rng(0).random(size // 4, dtype=np.float32), size)
    image = torch.rand(3, 224, 224)
    found["image sample (3x224x224 float32 tensor, label)"] = ((image, 7), image.numel() * 4)
    found["dict sample (id, 32-byte string, 16 floats)"] = (
        {"id": 12, "name": "x" * 32, "v": np.zeros(16)},
        32 + 128 + 8,
    )
    return found


def seconds_per_call(call: Any, repeats: int) -> float:
    call()  # the first call warms caches and lazy imports
    began = time.perf_counter()
    call()
    once = max(time.perf_counter() - began, 1e-7)
    loops = max(1, int(0.02 / once))
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        for _ in range(loops):
            call()
        times.append((time.perf_counter() - began) / loops)
    return statistics.median(times)


def copy_of(sample: Any) -> Any:
    array = sample[0].numpy() if isinstance(sample, tuple) else sample
    if not isinstance(array, np.ndarray):
        return None
    target = np.empty_like(array)
    return lambda: np.copyto(target, array)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    began = time.perf_counter()
    rows = []
    for name, (sample, nbytes) in samples().items():
        hashing = seconds_per_call(lambda s=sample: fingerprint(s), args.repeats)
        copy = copy_of(sample)
        copying = seconds_per_call(copy, args.repeats) if copy is not None else None
        rows.append({"sample": name, "bytes": nbytes, "fingerprint_s": hashing, "copy_s": copying})
    result = {
        "rows": rows,
        "versions": package_versions("numpy", "torch", "xxhash", "queuetune"),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": time.perf_counter() - began,
    }
    lines = preamble("queuetune.record.fingerprint.fingerprint against one copy of the same bytes", result)
    lines.append(f"{'sample':50} {'fingerprint':>12} {'MiB/s':>8} {'ms per MiB':>10} {'copy':>10} {'x copy':>7}")
    for row in rows:
        mib = row["bytes"] / 2**20
        rate = mib / row["fingerprint_s"]
        copy = "-" if row["copy_s"] is None else f"{row['copy_s'] * 1e6:.1f} µs"
        times = "-" if row["copy_s"] is None else f"{row['fingerprint_s'] / row['copy_s']:.2f}"
        took = f"{row['fingerprint_s'] * 1e6:9.1f} µs"
        lines.append(f"{row['sample']:50} {took} {rate:8.0f} {1e3 / rate:10.3f} {copy:>10} {times:>7}")
    publish(
        result,
        "\n".join(lines),
        "fingerprint_cost",
        args.json,
        None if args.out is None else Path(args.out),
    )


if __name__ == "__main__":
    main()
