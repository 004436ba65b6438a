"""The device stage's settings (:class:`DeviceOptions`): a Prefetcher's ``device``,
``pin_memory``, ``device_depth``, ``device_bytes`` and ``pinned_bytes`` checked,
each bad one a ``ValueError`` or ``TypeError`` naming it.

>>> device_options(None, False, 2, None, None, max_bytes=1000) is None
True
>>> device_options(None, True, 3, None, "1KiB", max_bytes=1000)
DeviceOptions(device=None, pin_memory=True, depth=3, device_bytes=None, pinned_bytes=1024)
>>> device_options(None, False, 2, "1GiB", None, max_bytes=1000)
Traceback (most recent call last):
...
ValueError: device_bytes needs device= (the batches on the device are what it holds)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...common.units import _shown, parse_bytes, positive_int


@dataclass(frozen=True)
class DeviceOptions:
    """Where batches go after they are built: ``device`` (a CUDA device's name,
    or None: pinned host memory only), through pinned staging buffers (always
    with a device; alone with ``pin_memory``), ``depth`` batches ahead of the
    consumer, the copies ahead within ``device_bytes`` (None: by depth alone)
    and the pinned buffers within ``pinned_bytes``."""

    device: str | None
    pin_memory: bool
    depth: int
    device_bytes: int | None
    pinned_bytes: int


def device_options(
    device: Any, pin_memory: Any, device_depth: Any, device_bytes: Any, pinned_bytes: Any, *, max_bytes: int
) -> DeviceOptions | None:
    """The device stage's options, or None where it is off (no ``device``, no ``pin_memory``).
    ``pinned_bytes`` is by default ``max_bytes``. Whether this machine can serve
    them is :func:`.seam.checked`'s to say."""
    if not isinstance(pin_memory, bool):
        raise TypeError(f"pin_memory must be True or False, got {_shown(pin_memory)} ({type(pin_memory).__name__})")
    name = _device_name(device)
    if name is None and device_bytes is not None:
        raise ValueError("device_bytes needs device= (the batches on the device are what it holds)")
    if name is None and not pin_memory:
        if pinned_bytes is not None:
            raise ValueError("pinned_bytes needs device= or pin_memory=True (the pinned buffers are what it holds)")
        return None
    depth = positive_int(device_depth, "device_depth")
    budget = None if device_bytes is None else parse_bytes(device_bytes, "device_bytes")
    pinned = max_bytes if pinned_bytes is None else parse_bytes(pinned_bytes, "pinned_bytes")
    return DeviceOptions(name, pin_memory or name is not None, depth, budget, pinned)


def _device_name(device: Any) -> str | None:
    """``device`` as a name (``"cuda"``, ``"cuda:1"``), from a string or a ``torch.device``."""
    if device is None:
        return None
    if isinstance(device, str):
        name = device
    elif type(device).__name__ == "device" and hasattr(device, "type"):  # a torch.device, torch not imported here
        name = str(device)
    else:
        raise TypeError(f"device must be a device's name ('cuda', 'cuda:1') or None, got {type(device).__name__}")
    kind, _, index = name.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ValueError(f"device must be a CUDA device ('cuda' or 'cuda:N'), got {name!r}")
    return name
