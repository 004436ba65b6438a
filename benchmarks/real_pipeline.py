"""A real input pipeline: JPEGs decoded and augmented in worker processes, a ResNet-18
trained on them; torch's DataLoader against queuetune.Prefetcher against torchdata.nodes.

Run: .venv/bin/python benchmarks/real_pipeline.py [--device cpu|cuda] [--images 600]
         [--batch 16] [--workers 2] [--steps 24] [--rounds 2] [--json] [--out DIR]

- The data: ``--images`` JPEGs of 320x240 (quality 90), made on the spot with
  Pillow from seeded noise and shapes, in a temporary folder.
- A sample: the JPEG decoded with Pillow, then the transforms of torchvision's
  ImageNet recipe written with Pillow and torch (torchvision is not used: its
  builds for torch 2.13.0 do not load against the CPU build of torch):
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
  workers, max_bytes="2GiB")`` with its defaults (adaptive depth, in order);
  torchdata.nodes: ``ParallelMapper(batches of indices, map_fn=load and collate,
  num_workers, in_order=True, method="process")`` -> ``Prefetcher(2)`` -> ``Loader``.
- Throughput: images per second over the steps after the first 4 (the model's
  own warm-up included in those), the loaders interleaved for ``--rounds``
  rounds, the median over rounds; the fraction of the time the step loop waited
  for its next batch.
"""

from __future__ import annotations

import argparse
import math
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from common import machine, publish, rotated, stop_nodes

WARMUP = 4
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)
LOADERS = ("torch", "prefetcher", "torchdata.nodes")


def make_jpegs(folder: Path, count: int) -> list[Path]:
    """``count`` JPEGs of 320x240: noise with a few rectangles and ellipses."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        pixels = rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) // 4 + 96
        image = Image.fromarray(pixels)
        draw = ImageDraw.Draw(image)
        for _ in range(6):
            x0, y0 = int(rng.integers(0, 280)), int(rng.integers(0, 200))
            box = (x0, y0, x0 + int(rng.integers(10, 120)), y0 + int(rng.integers(10, 120)))
            fill = tuple(int(v) for v in rng.integers(0, 256, 3))
            (draw.rectangle if rng.random() < 0.5 else draw.ellipse)(box, fill=fill)
        path = folder / f"{i:05d}.jpg"
        image.save(path, quality=90)
        paths.append(path)
    return paths


class Jpegs:
    """Map-style: sample ``i`` is (the augmented image as a float32 tensor 3x224x224, its label)."""

    def __init__(self, paths: list[Path], size: int = 224) -> None:
        self.paths, self.size = paths, size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        import torch
        from PIL import Image

        with Image.open(self.paths[i]) as image:
            image = random_resized_crop(image.convert("RGB"), self.size)
        if random.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        array = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return torch.from_numpy((array - MEAN) / STD), i % 10


def random_resized_crop(image: Any, size: int) -> Any:
    """torchvision's RandomResizedCrop: a random area of 8-100 % and aspect ratio 3/4-4/3,
    resized to ``size`` x ``size`` (bilinear); a center crop after 10 misses."""
    from PIL import Image

    width, height = image.size
    area = width * height
    for _ in range(10):
        target = area * random.uniform(0.08, 1.0)
        ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            left, top = random.randint(0, width - w), random.randint(0, height - h)
            return image.resize((size, size), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    return image.resize((size, size), Image.Resampling.BILINEAR, box=(left, top, left + side, top + side))


def resnet18(classes: int = 10) -> Any:
    """ResNet-18 in torchvision's layout, built from torch.nn alone."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self, inputs: int, outputs: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(outputs)
            self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(outputs)
            self.down = (
                nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))
                if stride != 1 or inputs != outputs
                else nn.Identity()
            )

        def forward(self, x: Any) -> Any:
            y = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
            return (y + self.down(x)).relu()

    stages, channels = [], 64
    for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        stages += [Block(channels, width, stride), Block(width, width, 1)]
        channels = width
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        *stages,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(512, classes),
    )


class Collated:
    """torchdata.nodes' map function: the batch of samples at a list of indices, collated."""

    def __init__(self, data: Jpegs) -> None:
        self.data = data

    def __call__(self, indices: list[int]) -> Any:
        from torch.utils.data import default_collate

        return default_collate([self.data[i] for i in indices])


def loader_for(name: str, data: Jpegs, args: argparse.Namespace, steps: int) -> tuple[Any, Any]:
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
    from torchdata.nodes import IterableWrapper, Loader, ParallelMapper
    from torchdata.nodes import Prefetcher as NodesPrefetcher

    order = torch.randperm(len(data)).tolist()
    batches = [order[i : i + args.batch] for i in range(0, steps * args.batch, args.batch)]
    mapper = ParallelMapper(
        IterableWrapper(batches),
        map_fn=Collated(data),
        num_workers=args.workers,
        in_order=True,
        method="process",
        multiprocessing_context="fork",
    )
    prefetcher = NodesPrefetcher(mapper, prefetch_factor=2)

    return Loader(prefetcher), lambda: stop_nodes(prefetcher, mapper)


def run(name: str, data: Jpegs, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = resnet18().to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    steps = min(args.steps, len(data) // args.batch)
    loader, close = loader_for(name, data, args, steps)
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
        del iterator
    finally:
        close()
    counted = arrived[WARMUP:]
    span = counted[-1] - counted[0]
    return {
        "images_per_s": (len(counted) - 1) * args.batch / span,
        "input_wait_fraction": sum(waited[WARMUP + 1 :]) / span,
    }


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

    import queuetune

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in LOADERS}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="queuetune-jpegs-") as folder:
        data = Jpegs(make_jpegs(Path(folder), args.images))
        for round_ in range(args.rounds):
            for name in rotated(list(LOADERS), round_):
                row = run(name, data, args)
                runs[name].append(row)
                print(
                    f"round {round_ + 1} {name}: {row['images_per_s']:.1f} images/s, "
                    f"input wait {row['input_wait_fraction']:.1%}",
                    file=sys.stderr,
                    flush=True,
                )
    from importlib.metadata import version

    summary = {
        name: {
            "images_per_s": statistics.median(r["images_per_s"] for r in rs),
            "rounds": [round(r["images_per_s"], 1) for r in rs],
            "input_wait_fraction": statistics.median(r["input_wait_fraction"] for r in rs),
        }
        for name, rs in runs.items()
    }
    best = max(s["images_per_s"] for s in summary.values())
    for s in summary.values():
        s["x_best"] = s["images_per_s"] / best
    device = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    result = {
        "benchmark": "real_pipeline",
        "machine": machine(),
        "device": device,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchdata": version("torchdata"),
            "pillow": version("pillow"),
            "queuetune": queuetune.__version__,
        },
        "settings": {k: getattr(args, k) for k in ("images", "batch", "workers", "steps", "rounds")},
        "seconds": time.monotonic() - started,
        "loaders": summary,
    }
    lines = [
        f"JPEG 320x240 -> RandomResizedCrop(224), flip, ToTensor, Normalize -> ResNet-18 training on {device}",
        f"machine: {result['machine']}; versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()),
        f"batch {args.batch}, {args.workers} worker processes, {args.steps} steps (first {WARMUP} not counted), "
        f"{args.rounds} interleaved rounds; wall {result['seconds']:.0f} s",
        "",
        f"{'loader':<16} {'images/s':>9} {'x best':>7} {'input wait':>11}  rounds",
    ]
    for name, s in summary.items():
        lines.append(
            f"{name:<16} {s['images_per_s']:>9.1f} {s['x_best']:>7.3f} {s['input_wait_fraction']:>10.1%}  "
            + ", ".join(map(str, s["rounds"]))
        )
    stem = "real_pipeline" if args.device == "cpu" else f"real_pipeline_{args.device}"
    publish(result, "\n".join(lines), stem, args.json, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
