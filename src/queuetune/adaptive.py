"""The prefetcher's depth controller: deepen while the consumer waits, shallow
again when the queue stays full and the consumer never waits, with hysteresis."""
from __future__ import annotations

from dataclasses import dataclass, field

from .units import positive_int


@dataclass
class DepthController:
    """Decides the depth (batches being built or ready) from what each request saw.

    - ``grow_after`` requests in a row that found the next batch not ready: one deeper.
    - ``shrink_after`` requests in a row that found it ready with the queue full:
      one shallower. A wait soon after shrinking makes the depth it left a floor,
      so the controller does not swing between two depths.

    >>> c = DepthController()
    >>> [c.observe(waited=True, full=False) for _ in range(4)]
    [None, 2, None, 3]
    >>> c.depth
    3
    """

    depth: int = 1
    max_depth: int = 64
    grow_after: int = 2
    shrink_after: int = 32
    floor: int = 1
    _waits: int = field(default=0, repr=False)
    _calm: int = field(default=0, repr=False)
    _since_shrink: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.depth = positive_int(self.depth, "depth")
        self.max_depth = positive_int(self.max_depth, "max depth")
        self.grow_after = positive_int(self.grow_after, "grow_after")
        self.shrink_after = positive_int(self.shrink_after, "shrink_after")
        if self.depth > self.max_depth:
            raise ValueError(f"depth {self.depth} is above max depth {self.max_depth}")

    def observe(self, waited: bool, full: bool, can_grow: bool = True) -> int | None:
        """Note one request; return the new depth if it changes, else None.

        ``waited``: the next batch was not ready; ``full``: as many batches as the
        depth allows were built and waiting; ``can_grow``: the byte budget has
        room for one more batch.
        """
        if self._since_shrink is not None:
            self._since_shrink += 1
            if waited and self._since_shrink <= self.shrink_after:
                self.floor = max(self.floor, self.depth + 1)
                self._since_shrink = None
        if waited:
            self._calm = 0
            self._waits += 1
            if self._waits >= self.grow_after and can_grow and self.depth < self.max_depth:
                return self._set(self.depth + 1)
            return None
        self._waits = 0
        self._calm = self._calm + 1 if full else 0
        if self._calm >= self.shrink_after and self.depth > self.floor:
            self._since_shrink = 0
            return self._set(self.depth - 1)
        return None

    def _set(self, depth: int) -> int:
        self.depth = depth
        self._waits = self._calm = 0
        return depth
