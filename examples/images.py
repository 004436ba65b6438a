"""JPEG files in torchvision's ImageFolder layout, and torchvision's ImageNet
training recipe written with Pillow and torch alone, for a machine where
torchvision does not load (its wheels for torch 2.13.0 are linked against the
CUDA build of torch, so they fail to import beside the CPU build).

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> paths = make_images(folder, 4, classes=2)
>>> sorted(p.parent.name for p in paths)
['class_0', 'class_0', 'class_1', 'class_1']
>>> image, label = ImageFolder(folder, train_transform())[0]
>>> tuple(image.shape), label
((3, 224, 224), 0)
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SUFFIXES = (".jpg", ".jpeg", ".png")


def make_images(folder: Path, count: int, classes: int = 10, size: tuple[int, int] = (320, 240)) -> list[Path]:
    """``count`` JPEGs of ``size`` (quality 90) in ``folder/class_<k>/``, image ``i``
    in class ``i % classes``: seeded noise with a few rectangles and ellipses."""
    from PIL import Image, ImageDraw

    width, height = size
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8) // 4 + 96
        image = Image.fromarray(pixels)
        draw = ImageDraw.Draw(image)
        for _ in range(6):
            x0, y0 = int(rng.integers(0, width - 40)), int(rng.integers(0, height - 40))
            box = (x0, y0, x0 + int(rng.integers(10, 120)), y0 + int(rng.integers(10, 120)))
            fill = tuple(int(v) for v in rng.integers(0, 256, 3))
            (draw.rectangle if rng.random() < 0.5 else draw.ellipse)(box, fill=fill)
        path = folder / f"class_{i % classes}" / f"{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        image.save(path, quality=90)
        paths.append(path)
    return paths


class ImageFolder:
    """torchvision's ``ImageFolder``: one class per subfolder (sorted), sample ``i``
    is ``(transform(the image as RGB), its class index)``."""

    def __init__(self, root: Path | str, transform: Callable[[Any], Any]) -> None:
        root = Path(root)
        self.classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.samples = [
            (path, label)
            for label, name in enumerate(self.classes)
            for path in sorted((root / name).iterdir())
            if path.suffix.lower() in SUFFIXES
        ]
        if not self.samples:
            raise ValueError(f"no images under {root} (expected {root}/<class>/<image>.jpg)")
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        from PIL import Image

        path, label = self.samples[i]
        with Image.open(path) as image:
            return self.transform(image.convert("RGB")), label


def random_resized_crop(image: Any, size: int) -> Any:
    """torchvision's ``RandomResizedCrop(size)``: a random area of 8-100 % and aspect
    ratio 3/4-4/3, resized to ``size`` x ``size`` (bilinear); a center crop after 10 misses."""
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


class train_transform:
    """``Compose([RandomResizedCrop(size), RandomHorizontalFlip(), ToTensor(),
    Normalize(MEAN, STD)])``: a PIL image in, a float32 tensor 3 x size x size out
    (a class, so that worker processes started by spawn can unpickle it)."""

    def __init__(self, size: int = 224) -> None:
        self.size = size
        self.mean = np.array(MEAN, dtype=np.float32).reshape(3, 1, 1)
        self.std = np.array(STD, dtype=np.float32).reshape(3, 1, 1)

    def __call__(self, image: Any) -> Any:
        import torch
        from PIL import Image

        image = random_resized_crop(image, self.size)
        if random.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        array = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return torch.from_numpy((array - self.mean) / self.std)


def resnet18(classes: int = 10) -> Any:
    """``torchvision.models.resnet18(weights=None, num_classes=classes)``'s layout,
    built from torch.nn alone."""
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
