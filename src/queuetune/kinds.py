"""What kind of loader an object is, told without importing its framework."""

from __future__ import annotations

from typing import Any


def has_base(obj: Any, name: str, module: str) -> bool:
    """Whether a class named ``name`` from a module under ``module`` is in ``obj``'s MRO.

    >>> has_base([], "list", "builtins")
    True
    """
    return any(cls.__name__ == name and cls.__module__.startswith(module) for cls in type(obj).__mro__)


def is_pydataset(obj: Any) -> bool:
    """A Keras ``PyDataset``."""
    return has_base(obj, "PyDataset", "keras")


def is_dataloader(obj: Any) -> bool:
    """A torch ``DataLoader``."""
    return has_base(obj, "DataLoader", "torch.utils.data")


def is_tf_dataset(obj: Any) -> bool:
    """A ``tf.data.Dataset``."""
    return has_base(obj, "DatasetV2", "tensorflow")


def is_ray_dataset(obj: Any) -> bool:
    """A Ray Data ``Dataset``."""
    return has_base(obj, "Dataset", "ray.data")


def is_keras_model(obj: Any) -> bool:
    """A Keras model or layer."""
    return has_base(obj, "Model", "keras") or has_base(obj, "Layer", "keras")
