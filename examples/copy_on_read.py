"""Where did my RAM go? A dataset of a million Python strings in a list, read
shuffled by two forked DataLoader workers: each worker slowly copies the
pages of the strings it reads (reading an object writes its reference count),
so its memory grows with every sample, though the batches in flight do not.

Run it under queuetune, which names the workers that copy and where they are
heading::

    queuetune run examples/copy_on_read.py            # a list of str: copy-on-read
    queuetune run examples/copy_on_read.py --numpy    # the same in a numpy array: flat

Options: ``--samples`` (1,000,000), ``--batches`` (100 batches of ``--batch``
500, shuffled), ``--step`` (seconds a step, 0.03), ``--workers`` (2).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler


class Names(Dataset[Any]):
    """``samples`` strings, as a Python list (``numpy=False``) or one numpy array of bytes."""

    def __init__(self, samples: int, numpy: bool = False) -> None:
        names = [f"sample-{i:07d}" for i in range(samples)]
        self.names: Any = np.array(names, dtype="S14") if numpy else names

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> int:
        return len(self.names[index])


def loader(samples: int, batches: int, batch: int, workers: int, numpy: bool) -> DataLoader[Any]:
    """The DataLoader of ``batches`` shuffled batches of the dataset."""
    dataset = Names(samples, numpy)
    sampler = RandomSampler(dataset, num_samples=batches * batch, generator=torch.Generator().manual_seed(0))
    return DataLoader(dataset, batch_size=batch, sampler=sampler, num_workers=workers, multiprocessing_context="fork")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--step", type=float, default=0.03)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--numpy", action="store_true", help="hold the strings in a numpy array")
    args = parser.parse_args()
    seen = 0
    for batch in loader(args.samples, args.batches, args.batch, args.workers, args.numpy):
        seen += len(batch)
        time.sleep(args.step)
    print(f"read {seen:,} samples")


if __name__ == "__main__":
    main()
