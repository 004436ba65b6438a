"""The small models the training benchmarks step: one SGD step, and CNNs of two and three convolutions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def sgd_trainer(model: Any) -> Callable[[Any, Any], None]:
    """One SGD step of ``model`` on a batch and its labels (cross-entropy)."""
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x: Any, y: Any) -> None:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def small_cnn() -> Any:
    """Two 3x3 convolutions of stride 2 (16, 32 channels), pooling, a linear layer."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, 2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def heavier_cnn() -> Any:
    """Three 3x3 convolutions of stride 2 (32, 64, 64 channels), pooling, a linear layer."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, 1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, 2, 1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, 2, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
