"""How many spare segments a pool keeps (:class:`Spares`), learned from its
workers: more while they miss one, fewer while they do not."""

from __future__ import annotations

# Spare segments a pool keeps at most for the next batches; more are removed.
SPARE = 2
# It keeps one fewer while its workers do not miss it: a worker that makes a segment within
# MISSED builds of one removed for the shelf being full counts a miss, and CALM builds without
# one take the count back down.
MISSED, CALM = 16, 256


class Spares:
    """The spare segments wanted now (:attr:`wanted`), from ``least`` to ``most``:
    one more for each miss (a worker made a segment within :data:`MISSED` builds
    of one removed for the shelf being full), one fewer after :data:`CALM`
    builds with no change.

    >>> spares = Spares(most=2, least=1)
    >>> spares.overflowed(); spares.settled(missed=True); spares.wanted
    2
    >>> for _ in range(CALM): spares.settled(missed=False)
    >>> spares.wanted
    1
    """

    def __init__(self, most: int = SPARE, least: int = 1) -> None:
        self.most = most
        self.wanted = self.least = min(least, most)
        # Builds settled, and the count of them when a segment was last removed
        # for the shelf being full, and when the wanted count last changed.
        self._settled = 0
        self._overflowed: int | None = None
        self._changed = 0

    def overflowed(self) -> None:
        """A segment was removed for the shelf being full."""
        self._overflowed = self._settled

    def settled(self, missed: bool) -> None:
        """One more build settled; ``missed``: its worker made a segment."""
        self._settled += 1
        recent = self._overflowed is not None and self._settled - self._overflowed <= MISSED
        if missed and recent:
            self.wanted = min(self.most, self.wanted + 1)
            self._changed = self._settled
        elif self.wanted > self.least and self._settled - self._changed >= CALM:
            self.wanted -= 1
            self._changed = self._settled
