"""The ways a program under ``queuetune run`` ends without returning to it, made
to write the report all the same.

- ``os._exit(n)``: the run's own process writes its report, then exits with
  ``n``. A process forked from it (``os.fork``, multiprocessing's ``fork``, a
  ``DataLoader``'s workers) ends with ``os._exit`` too: it saves the loaders it
  iterated itself, if any, and nothing else.
- SIGTERM (Slurm, ``docker stop``): where the signal's disposition is the
  default, the program's main thread gets :class:`Terminated`, a ``SystemExit``
  of 143, so that it unwinds; then the report is written. A program's own handler
  is left alone, and forked processes get the default back.

Ctrl-C needs nothing here: Python raises ``KeyboardInterrupt``, which the
runner turns into exit code 130.
"""

from __future__ import annotations

import operator
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

#: The exit status of a process SIGTERM ended, as a shell gives it.
TERMINATED = 128 + signal.SIGTERM


class Terminated(SystemExit):
    """SIGTERM, raised in the program's main thread under ``queuetune run``: it
    unwinds as ``sys.exit(143)`` would, so that the report is written after it.

    >>> Terminated().code
    143
    """

    def __init__(self) -> None:
        super().__init__(TERMINATED)


class Endings:
    """Watches how a run's process ends, from :meth:`install` to :meth:`remove`.

    ``finish(code)`` writes and prints the run's report in the process that
    installed it; ``child_finish()`` saves what a forked process watched of its
    own. Each is called at most once in a process, before ``os._exit`` exits it.

    >>> ended = []
    >>> with Endings(ended.append, lambda: None) as endings:
    ...     endings.finish_once(3)
    >>> ended
    [3]
    """

    def __init__(self, finish: Callable[[int], Any], child_finish: Callable[[], Any]) -> None:
        self.owner = os.getpid()
        self._finish, self._child_finish = finish, child_finish
        self._real_exit: Callable[[int], Any] | None = None
        self._lock = threading.RLock()
        self._finished = False
        #: A SIGTERM came: the process ends with :data:`TERMINATED` once the report is written.
        self.terminated = False
        self._running = False
        self._handler_installed = False

    def __enter__(self) -> Endings:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def install(self) -> Endings:
        """Hook ``os._exit``, and SIGTERM where its disposition is the default and
        this is the main thread (only the main thread may set a handler)."""
        global _INSTALLED
        self._real_exit = os._exit
        os._exit = self._exit  # type: ignore[assignment]
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._on_sigterm)
            self._handler_installed = True
        _INSTALLED = self
        return self

    def remove(self) -> None:
        """Put back what :meth:`install` replaced, where nothing replaced it since."""
        global _INSTALLED
        if _INSTALLED is self:
            _INSTALLED = None
        if self._real_exit is not None and os._exit == self._exit:
            os._exit = self._real_exit  # type: ignore[assignment]
        if self._handler_installed and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self._handler_installed = False

    @contextmanager
    def program_running(self) -> Iterator[None]:
        """While the block runs, SIGTERM unwinds it with :class:`Terminated`; after
        it, a SIGTERM waits for the report (see :attr:`terminated`)."""
        self._running = True
        try:
            yield
        finally:
            self._running = False

    def finish_once(self, code: int) -> None:
        """``finish(code)``, unless it ran (or runs, in this thread) already."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            self._finish(code)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self.owner:  # a forked process the reset at fork missed: as without queuetune
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        first = not self.terminated
        self.terminated = True
        if first and self._running:
            raise Terminated

    def _exit(self, code: int) -> None:
        real = self._real_exit
        assert real is not None
        try:
            status = operator.index(code)
        except TypeError:
            real(code)  # raises as os._exit does
            return
        owner = os.getpid() == self.owner
        try:
            if owner:
                self.finish_once(status & 0xFF)
            else:
                self._child_finish()
        except BaseException as exc:  # the process ends as it asked, whatever the report met
            print(f"queuetune: error: the report was not written: {exc or type(exc).__name__}", file=sys.stderr)
        finally:
            if owner:  # the report printed; a child prints nothing, and what it holds unflushed is its parent's
                _flush()
            real(status)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


#: The Endings installed in this process, if any.
_INSTALLED: Endings | None = None


def _after_fork_in_child() -> None:
    # A forked process ends by SIGTERM as it would without queuetune: its report is its parent's.
    endings = _INSTALLED
    if endings is not None and endings._handler_installed:
        if signal.getsignal(signal.SIGTERM) == endings._on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        endings._handler_installed = False


os.register_at_fork(after_in_child=_after_fork_in_child)
