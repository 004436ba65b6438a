"""The copy to a CUDA device with torch (:class:`CudaTransfer`): pinned staging
buffers, copies on a side stream, an event the consumer's stream waits on.
torch is imported here alone, and only when a Prefetcher asks for a device or
for pinned memory.

>>> from queuetune.prefetch.device.settings import DeviceOptions
>>> try:  # where CUDA serves device="cuda", nothing is raised
...     check_cuda(DeviceOptions("cuda", True, 2, None, 1 << 20))
... except RuntimeError as error:
...     assert "device='cuda' needs CUDA" in str(error)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .settings import DeviceOptions
from .transfer import MOVABLE_DTYPES, HostCopy


def _torch() -> Any:
    try:
        import torch
    except ImportError as error:
        raise RuntimeError("device= and pin_memory=True need torch: pip install 'queuetune[torch]'") from error
    return torch


def check_cuda(options: DeviceOptions) -> None:
    """Raise a ``RuntimeError`` naming ``options.device`` where CUDA cannot serve it
    (torch absent, a CPU build, no GPU, an index past the GPUs)."""
    torch = _torch()
    if not torch.cuda.is_available():
        asked = f"device={options.device!r}" if options.device else "pin_memory=True"
        raise RuntimeError(
            f"{asked} needs CUDA, and torch {torch.__version__} sees none here "
            "(torch.cuda.is_available() is False): leave device=None and pin_memory=False"
        )
    if options.device is not None:
        index = torch.device(options.device).index
        if index is not None and index >= torch.cuda.device_count():
            raise RuntimeError(f"device={options.device!r}: torch sees {torch.cuda.device_count()} CUDA devices")


class CudaTransfer:
    """Copies to ``options.device`` on a stream of its own (with no device,
    ``pin_memory`` alone: the pinned leaves are handed over themselves)."""

    def __init__(self, options: DeviceOptions) -> None:
        check_cuda(options)
        self.torch = torch = _torch()
        self.device = None if options.device is None else torch.device(options.device)
        self.lends = self.device is None
        self.stream = None if self.device is None else torch.cuda.Stream(device=self.device)

    def nbytes(self, leaf: Any) -> int | None:
        torch = self.torch
        if isinstance(leaf, np.ndarray):
            return int(leaf.nbytes) if leaf.dtype in MOVABLE_DTYPES and leaf.dtype.isnative else None
        if isinstance(leaf, torch.Tensor) and leaf.device.type == "cpu" and leaf.layout == torch.strided:
            return int(leaf.numel() * leaf.element_size())
        return None

    def allocate(self, nbytes: int) -> Any:
        # torch's caching host allocator: a buffer given back is kept pinned, not pinned again
        return self.torch.empty(nbytes, dtype=self.torch.uint8, pin_memory=True)

    def stage(self, leaf: Any, buffer: Any) -> Any:
        torch = self.torch
        if isinstance(leaf, np.ndarray):
            dtype, size = torch.from_numpy(np.empty(0, leaf.dtype)).dtype, leaf.nbytes
            if size == 0:  # no bytes to view as another dtype, nothing to pin
                return torch.empty(leaf.shape, dtype=dtype)
            # numpy copies into the buffer: any strides, and a read-only array (a segment's view) as well
            np.copyto(buffer.numpy()[:size].view(leaf.dtype).reshape(leaf.shape), leaf, casting="no")
            return buffer[:size].view(dtype).view(leaf.shape)
        size = leaf.numel() * leaf.element_size()
        if size == 0:
            return torch.empty(leaf.shape, dtype=leaf.dtype)
        staged = buffer[:size].view(leaf.dtype).view(leaf.shape)
        with torch.no_grad():  # the data, not a step of the graph of a tensor that requires grad
            staged.copy_(leaf)
        return staged

    def start(self, staged: list[Any]) -> Any:
        if self.device is None:
            return HostCopy(staged)  # pinned leaves handed over as they are
        torch = self.torch
        with torch.cuda.stream(self.stream):
            begun = torch.cuda.Event(enable_timing=True)
            begun.record(self.stream)
            leaves = [leaf.to(self.device, non_blocking=True) for leaf in staged]
            event = torch.cuda.Event(enable_timing=True)
            event.record(self.stream)
        return _CudaCopy(torch, self.device, leaves, event, begun)


class _CudaCopy:
    """One batch's copies on the side stream, between the events recorded
    before them (``begun``) and after them (``event``), which time them."""

    timed = True

    def __init__(self, torch: Any, device: Any, leaves: list[Any], event: Any, begun: Any) -> None:
        self.torch, self.device, self.leaves, self.event, self.begun = torch, device, leaves, event, begun

    def ready(self) -> list[Any]:
        stream = self.torch.cuda.current_stream(self.device)
        stream.wait_event(self.event)
        for leaf in self.leaves:
            # allocated on the side stream: freed on the consumer's only once its work on it is done
            leaf.record_stream(stream)
        leaves, self.leaves = self.leaves, []
        return leaves

    def finished(self) -> None:
        self.event.synchronize()

    def elapsed(self, wait: bool) -> float | None:
        if not wait and not self.event.query():
            return None
        self.event.synchronize()
        return float(self.begun.elapsed_time(self.event)) / 1000.0
