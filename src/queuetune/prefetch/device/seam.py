"""The seam where a transfer of one's own stands in for the copy to the device:
the test suite's, on machines without CUDA (delays, failures). Not public API:
a Prefetcher made while :func:`substituted` is in force reads its batches
through the given transfer instead of CUDA's, and checks no device.

>>> from queuetune.prefetch import Prefetcher
>>> from queuetune.prefetch.device.transfer import HostTransfer
>>> import numpy as np
>>> with substituted(HostTransfer):
...     with Prefetcher([np.arange(3)] * 2, max_bytes="1MiB", device="cuda") as p:
...         [b.tolist() for b in p]
[[0, 1, 2], [0, 1, 2]]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .settings import DeviceOptions
    from .transfer import Transfer

#: The transfer made in place of CUDA's while :func:`substituted` is in force.
_substitute: Callable[[], Transfer] | None = None


@contextlib.contextmanager
def substituted(factory: Callable[[], Transfer]) -> Iterator[None]:
    """Within the block, Prefetchers made copy with ``factory()``, not with CUDA."""
    global _substitute
    before, _substitute = _substitute, factory
    try:
        yield
    finally:
        _substitute = before


def checked(options: DeviceOptions | None) -> DeviceOptions | None:
    """``options``, where this machine can serve them (a ``RuntimeError`` naming what
    it lacks: CUDA, or torch itself), or a substitute is in force."""
    if options is not None and _substitute is None:
        from .cuda import check_cuda

        check_cuda(options)
    return options


def transfer_factory(options: DeviceOptions) -> Callable[[], Transfer]:
    """What makes the transfer a Prefetcher of ``options`` copies with: the substitute
    in force now, or CUDA's."""
    if _substitute is not None:
        return _substitute

    def cuda() -> Transfer:
        from .cuda import CudaTransfer

        return CudaTransfer(options)

    return cuda
