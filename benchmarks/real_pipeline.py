"""A real input pipeline: JPEGs decoded and augmented in worker processes, a ResNet-18
trained on them; torch's DataLoader against queuetune.Prefetcher against torchdata.nodes.

Run: .venv/bin/python benchmarks/real_pipeline.py [--device cpu|cuda] [--images 600]
         [--batch 16] [--workers 2] [--steps 24] [--rounds 2] [--json] [--out DIR]

- The data: ``--images`` JPEGs of 320x240 (quality 90), made on the spot with
  Pillow from seeded noise and shapes, in a temporary folder.
- A sample: the JPEG decoded with Pillow, then the transforms of torchvision's
  ImageNet recipe written with Pillow and torch in ``examples/images.py``
  (torchvision is not used: its builds for torch 2.13.0 do not load against
  the CPU build of torch):
  ``RandomResizedCrop(224)`` (scale 0.08-1, ratio 3/4-4/3, bilinear),
  a horizontal flip with p=0.5, ``ToTensor`` (uint8 HWC to float CHW in [0, 1]),
  ``Normalize`` with ImageNet's mean and std. Batches are collated in the workers.
- The model: ResNet-18 (torchvision's layout: 7x7 stem, four stages of two basic
  blocks, 64-512 channels, 10 classes here), SGD with momentum, cross-entropy,
  trained one step per batch; bf16 autocast on CUDA, float32 on the CPU.
- The loaders, each with ``--workers`` worker processes (fork):
  ``torch.utils.data.DataLoader(dataset, batch_size, shuffle=True, num_workers,
  pin_memory=cuda, persistent_workers=False)`` (prefetch_factor 2);
  ``queuetune.Prefetcher(dataset, batch_size, shuffle=True, mode="process",
  workers, max_bytes="2GiB", sample_memory=False)`` with its other defaults
  (adaptive depth, in order; no memory sampling, which the other two lack);
  torchdata.nodes: ``ParallelMapper(batches of indices, map_fn=load and collate,
  num_workers, in_order=True, method="process")`` -> ``Prefetcher(2)`` -> ``Loader``.
- Throughput: images per second over the steps after the first 4 (the model's
  own warm-up included in those), the loaders interleaved for ``--rounds``
  rounds, the median over rounds; the fraction of the time the step loop waited
  for its next batch.
- Memory: the most samples started (counted as each sample's load begins, in
  the worker) and not yet released (the step loop releases a batch's samples
  once its step is done), the same way for all three loaders; shown as batches
  (samples / batch) and as the bytes of those decoded samples, the highest over
  rounds.
- Targets (issue 15): the Prefetcher's images/s >= 0.99 x the best loader's,
  and its peak no more than the smallest peak among the loaders that reach
  >= 0.98 x the best.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import Counted, machine, mib, nodes_loader, package_versions, publish, rotated, target_lines

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from images import ImageFolder, make_images, resnet18, train_transform

WARMUP = 4
LOADERS = ("torch", "prefetcher", "torchdata.nodes")


class CountedImages:
    """The images, each sample's load counted as it begins (in whichever process
    loads it: the counter is shared with forked workers)."""

    def __init__(self, data: ImageFolder, counted: Counted) -> None:
        self.data, self.counted = data, counted

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        self.counted.start()
        return self.data[i]


class Collated:
    """torchdata.nodes' map function: the batch of samples at a list of indices, collated."""

    def __init__(self, data: CountedImages) -> None:
        self.data = data

    def __call__(self, indices: list[int]) -> Any:
        from torch.utils.data import default_collate

        return default_collate([self.data[i] for i in indices])


def loader_for(name: str, data: CountedImages, args: argparse.Namespace, steps: int) -> tuple[Any, Any]:
    """The loader, and what closes it."""
    import torch

    if name == "torch":
        from torch.utils.data import DataLoader

        loader = DataLoader(
            data,
            batch_size=args.batch,
            shuffle=True,
            num_workers=args.workers,
            pin_memory=args.device == "cuda",
            drop_last=True,
        )
        return loader, lambda: None
    if name == "prefetcher":
        import queuetune

        prefetcher = queuetune.Prefetcher(
            data,
            batch_size=args.batch,
            shuffle=True,
            mode="process",
            workers=args.workers,
            max_bytes="2GiB",
            sample_memory=False,
        )
        return prefetcher, prefetcher.close
    from torchdata.nodes import IterableWrapper

    order = torch.randperm(len(data)).tolist()
    batches = [order[i : i + args.batch] for i in range(0, steps * args.batch, args.batch)]
    return nodes_loader(IterableWrapper(batches), Collated(data), args.workers)


def run(name: str, data: ImageFolder, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = resnet18().to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    steps = min(args.steps, len(data) // args.batch)
    counted = Counted()
    loader, close = loader_for(name, CountedImages(data, counted), args, steps)
    arrived, waited = [], []
    try:
        iterator = iter(loader)
        for _ in range(steps):
            asked = time.perf_counter()
            x, y = next(iterator)
            got = time.perf_counter()
            x, y = torch.as_tensor(x).to(device, non_blocking=True), torch.as_tensor(y).to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            arrived.append(got)
            waited.append(got - asked)
            del x, y
            counted.release(args.batch)
        del iterator
    finally:
        close()
    timed = arrived[WARMUP:]
    span = timed[-1] - timed[0]
    return {
        "images_per_s": (len(timed) - 1) * args.batch / span,
        "input_wait_fraction": sum(waited[WARMUP + 1 :]) / span,
        "peak_started_samples": counted.peak,
    }


def targets(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 15's two checks of the Prefetcher: its throughput against the best
    loader's, and its peak against the leanest loader within 0.98 x the best."""
    ours = summary["prefetcher"]
    best = max(s["images_per_s"] for s in summary.values())
    close = [s["peak_started_samples"] for s in summary.values() if s["images_per_s"] >= 0.98 * best]
    leanest = min(close)
    return [
        {
            "target": "prefetcher images/s >= 0.99 x the best loader's",
            "value": ours["images_per_s"] / best,
            "met": ours["images_per_s"] >= 0.99 * best,
        },
        {
            "target": "prefetcher peak started samples <= the least of the loaders at >= 0.98 x the best",
            "value": f"{ours['peak_started_samples']} vs {leanest}",
            "met": ours["peak_started_samples"] <= leanest,
        },
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="write real_pipeline[_DEVICE].json and .txt here")
    args = parser.parse_args()
    import torch

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in LOADERS}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="queuetune-jpegs-") as folder:
        make_images(Path(folder), args.images)
        data = ImageFolder(folder, train_transform())
        sample_bytes = int(data[0][0].nbytes) + 8  # the image tensor and its label, collated as int64
        for round_ in range(args.rounds):
            for name in rotated(list(LOADERS), round_):
                row = run(name, data, args)
                # The loader's objects, now, here: not in a worker process forked from this one later.
                gc.collect()
                runs[name].append(row)
                print(
                    f"round {round_ + 1} {name}: {row['images_per_s']:.1f} images/s, "
                    f"input wait {row['input_wait_fraction']:.1%}",
                    file=sys.stderr,
                    flush=True,
                )
    summary = {
        name: {
            "images_per_s": statistics.median(r["images_per_s"] for r in rs),
            "rounds": [round(r["images_per_s"], 1) for r in rs],
            "input_wait_fraction": statistics.median(r["input_wait_fraction"] for r in rs),
            "peak_started_samples": max(r["peak_started_samples"] for r in rs),
        }
        for name, rs in runs.items()
    }
    best = max(s["images_per_s"] for s in summary.values())
    for s in summary.values():
        s["x_best"] = s["images_per_s"] / best
        s["peak_started_batches"] = s["peak_started_samples"] / args.batch
        s["peak_started_bytes"] = s["peak_started_samples"] * sample_bytes
    device = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    result = {
        "benchmark": "real_pipeline",
        "machine": machine(),
        "device": device,
        "versions": package_versions("torch", "torchdata", "pillow", "queuetune"),
        "settings": {k: getattr(args, k) for k in ("images", "batch", "workers", "steps", "rounds")},
        "seconds": time.monotonic() - started,
        "loaders": summary,
        "sample_bytes": sample_bytes,
        "targets": targets(summary),
    }
    lines = [
        f"JPEG 320x240 -> RandomResizedCrop(224), flip, ToTensor, Normalize -> ResNet-18 training on {device}",
        f"machine: {result['machine']}; versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()),
        f"batch {args.batch}, {args.workers} worker processes, {args.steps} steps (first {WARMUP} not counted), "
        f"{args.rounds} interleaved rounds; wall {result['seconds']:.0f} s",
        "",
        f"{'loader':<16} {'images/s':>9} {'x best':>7} {'input wait':>11} {'peak started':>22}  rounds",
    ]
    for name, s in summary.items():
        peak = f"{s['peak_started_batches']:.2f} b, {mib(s['peak_started_bytes'])}"
        lines.append(
            f"{name:<16} {s['images_per_s']:>9.1f} {s['x_best']:>7.3f} {s['input_wait_fraction']:>10.1%} {peak:>22}  "
            + ", ".join(map(str, s["rounds"]))
        )
    lines += ["", *target_lines(result["targets"])]
    stem = "real_pipeline" if args.device == "cpu" else f"real_pipeline_{args.device}"
    publish(result, "\n".join(lines), stem, args.json, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
