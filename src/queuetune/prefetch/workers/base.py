"""What an epoch asks of its workers, threads or processes (:class:`Workers`),
and the marker a plain iterable's worker returns once it is exhausted."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Iterable
from typing import Any, Protocol

# Seconds between checks that the worker processes are alive, while the consumer waits.
LIVENESS = 0.5

# What a worker thread takes from its queue: a batch to build (its future and
# indices), something to do before its next build, or None to end.
Job = tuple[cf.Future[Any], Any] | Callable[[], None] | None


class _EndMarker:
    def __repr__(self) -> str:
        return "<end of iterable>"


#: What a plain iterable's worker returns once the iterable is exhausted.
END = _EndMarker()


class Workers(Protocol):
    """What an epoch needs of its workers, whether threads or processes.

    ``count``: batches built at once. ``poll``: seconds between liveness checks
    (:meth:`dead`) while the consumer waits; None when there is nothing to check.
    ``capacity``: the most workers :meth:`resize` can give. ``gate``: the most
    batches submitted and not built at once, or None for no limit: a batch
    submitted long before it starts would be reserved as the batches were then. ``sized_first``: whether the first
    batch waits for its size to be guessed (:meth:`guess`), so that it is built
    where the others are rather than apart and copied.

    >>> from queuetune.prefetch.workers.threads import ThreadWorkers
    >>> workers: Workers = ThreadWorkers(1, str)
    >>> workers.count, workers.poll, workers.gate, workers.sized_first
    (1, None, 1, False)
    """

    count: int
    capacity: int
    poll: float | None
    sized_first: bool

    @property
    def gate(self) -> int | None: ...

    def submit(self, indices: Any, reserve: int = 0) -> cf.Future[Any]:
        """Start building the batch made of ``indices``, ``reserve`` bytes or less as far as known."""
        ...

    def resize(self, count: int) -> None:
        """Build ``count`` batches at once from now on (1 to ``capacity``)."""
        ...

    def defer(self, action: Callable[[], None]) -> bool:
        """Have ``action`` run on a thread of the workers' (a worker thread, before
        it takes its next batch; the worker processes' starter thread), and say
        True; False where these workers cannot (the caller runs it itself)."""
        ...

    def guess(self, index: Any) -> cf.Future[int] | None:
        """Start guessing the bytes of a batch from its sample ``index`` (see
        :func:`.collate.batch_bytes_guess`); None where these workers cannot."""
        ...

    def spent(self, future: cf.Future[Any]) -> tuple[float, float] | None:
        """The CPU seconds and the seconds of the build whose result ``future`` holds, if known
        (told only by elastic workers, whose count is decided from them)."""
        ...

    def size(self, batch: Any) -> int:
        """Bytes of a built batch as it arrives from a worker."""
        ...

    def room(self, reserve: int) -> bool:
        """Whether the workers' own memory (shared memory) has room for a batch
        of ``reserve`` bytes more, once they let go of what they keep spare (a
        reckoning; :meth:`make_room` lets go of it)."""
        ...

    def make_room(self, reserve: int) -> bool:
        """Let go of what the workers keep spare until a batch of ``reserve``
        bytes more has room in their own memory; whether it has."""
        ...

    def rest(self) -> None:
        """Between two epochs, the workers idle: have them give back to the system
        what their allocators keep free (see :mod:`.heap`)."""
        ...

    def finish(self, batch: Any, until: float | None = None) -> str | None:
        """Wait until a built batch's arrays are all in place (a worker process
        may still be copying them): None once they are; else why not, "died" (a
        worker died first) or "late" (``until``, a :func:`~queuetune.record.recorder.clock`
        time, passed first)."""
        ...

    def adopt(self, batch: Any) -> Any:
        """The built batch as the consumer gets it (after :meth:`finish`)."""
        ...

    def discard(self, batch: Any) -> None:
        """Let go of a built batch that will never be handed over."""
        ...

    def dead(self) -> bool:
        """Whether a worker process has exited."""
        ...

    def pool_bytes(self) -> int | None:
        """The bytes of shared memory kept for batches (lent, holding, or spare); None where none is."""
        ...

    def usable(self) -> bool:
        """Whether the workers can build another epoch's batches: not shut down, none dead."""
        ...

    def deaths(self) -> list[str]:
        """The worker processes that died, each as its pid and how it ended."""
        ...

    def unsendable(self, exc: BaseException) -> bool:
        """Whether ``exc`` says a built batch could not be sent back from its worker (not picklable)."""
        ...

    def shutdown(self, wait: bool, unclaimed: Iterable[cf.Future[Any]]) -> None:
        """Stop the workers; then let go of what ``unclaimed`` built (never to be handed over)."""
        ...
