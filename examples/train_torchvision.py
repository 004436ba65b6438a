"""Train a ResNet-18 on an ImageFolder of JPEGs with torchvision's ImageNet
transforms, on the CPU, fed by a DataLoader with 2 worker processes.

    python examples/make_images.py images --count 2000
    queuetune run examples/train_torchvision.py images --steps 200

torchvision's ``ImageFolder``, ``RandomResizedCrop(224)``, ``RandomHorizontalFlip``,
``ToTensor``, ``Normalize`` and ``resnet18(weights=None)`` are used where torchvision
loads. Its wheels for torch 2.13.0 are built against torch's CUDA build and fail to
import beside the CPU build; there the same recipe, written with Pillow and torch
(``examples/images.py``), takes its place, and a line on stderr says so.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import images
import torch
from torch.utils.data import DataLoader


def recipe(root: Path) -> tuple[Any, Any, str]:
    """The dataset, the model and whose code builds them."""
    try:
        from torchvision import datasets, models, transforms
    except Exception as error:  # the CUDA-linked wheel raises RuntimeError, not ImportError
        print(
            f"torchvision not usable here ({type(error).__name__}: {error}); "
            "using the same recipe written with Pillow and torch",
            file=sys.stderr,
        )
        dataset = images.ImageFolder(root, images.train_transform())
        return dataset, images.resnet18(len(dataset.classes)), "Pillow and torch"
    transform = transforms.Compose(
        [
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(images.MEAN, images.STD),
        ]
    )
    dataset = datasets.ImageFolder(str(root), transform)
    return dataset, models.resnet18(weights=None, num_classes=len(dataset.classes)), "torchvision"


class Stream(torch.utils.data.IterableDataset):
    """The images as a stream: each worker reads its share (every n-th image of
    one shuffled order, from its id), so batches carry no index."""

    def __init__(self, dataset: Any, seed: int = 0) -> None:
        self.dataset, self.seed = dataset, seed

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        order = torch.randperm(len(self.dataset), generator=torch.Generator().manual_seed(self.seed))
        for i in order[worker::workers].tolist():
            yield self.dataset[i]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="an ImageFolder (examples/make_images.py makes one)")
    parser.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    parser.add_argument("--batch", type=int, default=16, help="images a batch (default 16)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (default 2)")
    parser.add_argument(
        "--stream", action="store_true", help="read the images as an IterableDataset sharded among the workers"
    )
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder: make one with examples/make_images.py")
    torch.manual_seed(0)
    dataset, model, source = recipe(args.folder)
    if args.stream:
        loader = DataLoader(Stream(dataset), batch_size=args.batch, num_workers=args.workers, drop_last=True)
    else:
        loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers, drop_last=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    steps, started = 0, time.perf_counter()
    while steps < args.steps:
        for inputs, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(inputs), labels)
            loss.backward()
            optimizer.step()
            steps += 1
            if steps % 50 == 0 or steps == args.steps:
                print(f"step {steps}: loss {loss.item():.3f}")
            if steps == args.steps:
                break
    took = time.perf_counter() - started
    print(f"{steps} steps of {args.batch} images ({source}) in {took:.1f} s: {steps * args.batch / took:.1f} images/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
