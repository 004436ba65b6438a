"""A factory for `queuetune tune examples/tune_torch.py:make`.

The contract: keyword arguments are the DataLoader's queue knobs (num_workers,
prefetch_factor) with your current values as defaults; it returns a fresh
DataLoader and the training step, a function called with each batch.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    """Samples that take a little while to load."""

    def __len__(self):
        return 10_000

    def __getitem__(self, index):
        time.sleep(0.0005)
        return torch.full((3, 32, 32), float(index))


_NET = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())


def step(batch):
    with torch.no_grad():
        _NET(batch)


def make(num_workers=2, prefetch_factor=2):
    return DataLoader(Slow(), batch_size=16, num_workers=num_workers, prefetch_factor=prefetch_factor), step
