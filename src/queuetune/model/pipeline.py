"""PipelineModel: what the simulation needs to know about a pipeline, validated."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..common.units import positive_int
from .distribution import Distribution, _duration
from .rules import ASSIGNMENTS, RELEASES, Assignment, Release

__all__ = ["PipelineModel"]


@dataclass(frozen=True)
class PipelineModel:
    """What the simulation needs to know about a pipeline.

    ``producer``: time to build one batch (one worker); ``consumer``: the
    training step's time per batch, from receiving a batch to asking for the
    next; ``workers``: batches built concurrently; ``batch_bytes``: bytes of one
    batch; ``ordered``: whether batches are delivered in submission order.

    The loader's rules (see :class:`queuetune.frameworks.LoaderRules`):
    ``assignment`` (``"shared"`` or ``"round_robin"``), ``release`` (a place
    under the bound frees at the ``"take"`` or at the ``"request"``) and
    ``transit``: seconds from a batch's end in its worker until a consumer can
    take it, beyond the hand-over already in the step (a worker process's pipe).
    ``handover``: the first part of each step, taking the batch from the loader
    (already in ``consumer``); with release at the take, the place frees when
    it is over (torch sends the next index after unpickling the batch).
    ``dispatch``: seconds from the moment a batch could start (a free place
    and an idle worker) until its build starts.

    >>> build, step = Distribution.constant(0.02), Distribution.constant(0.002)
    >>> m = PipelineModel(build, step, workers=4, batch_bytes=2**20)
    >>> m.workers, m.ordered, m.assignment, m.release, m.transit, m.handover, m.dispatch
    (4, True, 'shared', 'take', 0.0, 0.0, 0.0)
    """

    producer: Distribution
    consumer: Distribution
    workers: int
    batch_bytes: float
    ordered: bool = True
    assignment: Assignment = "shared"
    release: Release = "take"
    transit: float = 0.0
    handover: float = 0.0
    dispatch: float = 0.0

    def __post_init__(self) -> None:
        for name in ("producer", "consumer"):
            if not isinstance(getattr(self, name), Distribution):
                raise TypeError(f"{name} must be a Distribution, got {getattr(self, name)!r}")
        object.__setattr__(self, "workers", positive_int(self.workers, "workers"))
        object.__setattr__(self, "batch_bytes", _duration(self.batch_bytes, "batch_bytes", "bytes"))
        if not isinstance(self.ordered, (bool, np.bool_)):
            raise TypeError(f"ordered must be True or False, got {self.ordered!r}")
        if self.assignment not in ASSIGNMENTS:
            raise ValueError(f"assignment must be one of {', '.join(ASSIGNMENTS)}, got {self.assignment!r}")
        if self.release not in RELEASES:
            raise ValueError(f"release must be one of {', '.join(RELEASES)}, got {self.release!r}")
        object.__setattr__(self, "transit", _duration(self.transit, "transit"))
        object.__setattr__(self, "handover", _duration(self.handover, "handover"))
        object.__setattr__(self, "dispatch", _duration(self.dispatch, "dispatch"))
        if self.handover > self.consumer.minimum:
            raise ValueError(
                f"handover ({self.handover} s) is part of every step, so it cannot exceed the shortest "
                f"step ({self.consumer.minimum} s)"
            )
