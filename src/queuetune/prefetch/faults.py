"""How an epoch's faults become the errors its consumer gets: a worker process that
died, a batch that could not be sent back, a batch not ready in time, an epoch stopped."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

from .errors import PrefetcherClosed, WorkerDied, WorkerError
from .task import Task
from .workers import Workers


def describe(task: Task) -> str:
    """A batch as its position in the epoch and what it is made of.

    >>> describe(Task(3, [6, 7], reserved=0))
    'batch 3 of the epoch (samples 6, ...)'
    """
    if isinstance(task.indices, int):
        return f"batch {task.position} of the epoch (index {task.indices})"
    if isinstance(task.indices, list) and task.indices:
        return f"batch {task.position} of the epoch (samples {task.indices[0]}, ...)"
    return f"batch {task.position} of the epoch"


def translate(task: Task, exc: BaseException, workers: Workers) -> BaseException | None:
    """Our clearer error for a worker process's fault in building ``task``, or
    None to re-raise ``exc`` (the source's own error) unchanged.

    >>> from queuetune.prefetch.workers import ThreadWorkers
    >>> translate(Task(0, 0, reserved=0), KeyError("corrupt"), ThreadWorkers(1, print)) is None
    True
    """
    if isinstance(exc, BrokenProcessPool):
        return worker_died(task, workers.deaths(), unread=_unread(exc))
    if isinstance(exc, WorkerError):
        return exc.of(describe(task))
    if workers.unsendable(exc):
        return TypeError(
            f"{describe(task)} could not be sent back from its worker process ({type(exc).__name__}: "
            f"{exc}): with mode='process' a batch must be picklable; use mode='thread'"
        )
    return None


def forked(owner: int) -> RuntimeError:
    """The error for a forked child that reads a prefetcher its parent made.

    >>> print(forked(7))  # doctest: +ELLIPSIS
    this Prefetcher belongs to process 7: a process forked from it cannot read it (its workers, ...
    """
    return RuntimeError(
        f"this Prefetcher belongs to process {owner}: a process forked from it cannot read it (its workers, "
        "threads and shared memory are its parent's); make a new Prefetcher in the child"
    )


def worker_died(task: Task, deaths: list[str], unread: str | None = None) -> WorkerDied:
    """The error for a worker process that died while ``task`` was under way;
    ``deaths``: each dead process as its pid and how it ended. ``unread``: why
    the pool broke when no worker died (what a worker sent could not be read here).

    >>> print(worker_died(Task(2, 2, reserved=0), ["pid 7, killed by SIGKILL"]))  # doctest: +ELLIPSIS
    a worker process of the prefetcher died (pid 7, killed by SIGKILL) while batch 2 of the epoch (index 2) was ...
    """
    if not deaths and unread is not None:
        return WorkerDied(
            f"what a worker process sent back, for {describe(task)} or one built beside it, could not be read "
            f"here ({unread}), so the pool of worker processes stopped; the epoch is stopped (the next for loop "
            "starts new workers)"
        )
    who = "; ".join(deaths) if deaths else "its pid and exit code are unknown"
    return WorkerDied(
        f"a worker process of the prefetcher died ({who}) while {describe(task)} was being "
        "built or queued; the epoch is stopped and its workers are gone (the next for loop "
        "starts new ones)"
    )


def _unread(exc: BaseException) -> str | None:
    """The last line of the error the pool met reading a worker's message, if that broke it.

    >>> _unread(BrokenProcessPool("A child process terminated abruptly")) is None
    True
    """
    cause = exc.__cause__
    text = str(cause).strip().strip('"').strip() if cause is not None else ""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else None


def timed_out(pending: list[Task], timeout: float) -> TimeoutError:
    """The error for a consumer that waited ``timeout`` seconds for any of ``pending``.

    >>> print(timed_out([Task(1, 1, reserved=0)], 0.5))
    batch 1 of the epoch (index 1) was not ready within timeout=0.5 s; the epoch is stopped
    """
    if len(pending) == 1:
        what = f"{describe(pending[0])} was"
    else:
        what = "none of batches " + ", ".join(str(t.position) for t in pending) + " was"
    return TimeoutError(f"{what} not ready within timeout={timeout:g} s; the epoch is stopped")


def closed(reason: str, delivered: int) -> PrefetcherClosed:
    """The error for a consumer whose epoch was stopped (for ``reason``) under it.

    >>> print(closed("close() was called", 3))
    the epoch was stopped while its consumer was reading it (close() was called); 3 batches had been delivered
    """
    return PrefetcherClosed(
        f"the epoch was stopped while its consumer was reading it ({reason}); {delivered} batches had been delivered"
    )
