"""The worker processes' own thread (:class:`Starter`), where what the
consumer's thread defers runs while it steps."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from . import threads
from .base import Job


class Starter:
    """A thread, started at the first :meth:`defer` (after the fork of every
    worker process, so that no thread of it is copied there), that runs what the
    consumer's thread defers (the next batch's start) and, while it serves, the
    return of the segments of batches let go of (:meth:`later`, the pool's
    :attr:`.shm.Pool.later`); until :meth:`stop`, after which nothing starts.

    >>> starter = Starter()
    >>> ran = threading.Event()
    >>> starter.defer(ran.set), ran.wait(5)
    (True, True)
    >>> starter.stop(), starter.stop(), starter.defer(ran.set), starter.stopped
    (True, False, False, True)
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # Set while the thread serves: a batch let go of returns its segment there too.
        self._serving = threading.Event()
        self._lock = threading.Lock()
        #: Whether :meth:`stop` was called: the workers are shut down.
        self.stopped = False

    def defer(self, action: Callable[[], None]) -> bool:
        """Run ``action`` on the thread (started now if it is not yet); False once stopped."""
        with self._lock:  # no thread started, nor action queued, once stop has stopped it
            if self.stopped:
                return False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=threads.serve,
                    args=(self._jobs, threads.no_build, False),
                    name="queuetune-starter",
                    daemon=True,
                )
                self._thread.start()
                self._serving.set()
            self._jobs.put(action)
        return True

    def later(self, action: Callable[[], None]) -> bool:
        """Queue ``action`` for the thread while it serves (a put, safe in a finalizer); False where it does not."""
        return threads.later(self._jobs, self._serving, action)

    def stop(self) -> bool:
        """Drop what the thread was asked and has not begun, and wait for it to
        end (unless this is that thread); False where it was stopped already."""
        with self._lock:
            if self.stopped:
                return False
            self.stopped = True
            thread = self._thread
            if thread is not None:
                self._serving.clear()
                threads.drain(self._jobs)
                self._jobs.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        return True
