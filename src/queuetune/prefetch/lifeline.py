"""Worker processes that end with the process they build for.

A worker process is started by its owner (the consumer's process) or, under
``forkserver``, by Python's fork server. When the owner is killed (``kill -9``,
Slurm's or ``docker stop``'s SIGTERM, ``os._exit``) nothing tells its workers:
they would wait for their next job for ever, keep their memory and the owner's
stdout, and keep the fork server and the resource tracker alive. So each worker
watches its owner from a thread of its own (:func:`watch`) and, once the owner
is gone, removes the owner's shared-memory files and exits.

That thread needs the GIL to act, and a build that holds it (a regular
expression that backtracks for minutes, a C extension that never lets go of
it) keeps it from running: the worker would live on, with the pool's files,
until the build ends. The owner's warden (:mod:`.warden`), a process of its own
that runs no user code and waits for the owner's death without a thread that
needs anyone's GIL, kills such workers (SIGKILL) and removes the files; this
thread is the first to act where it can.

Linux's ``PR_SET_PDEATHSIG`` is not used (here nor in the warden): it fires
when the *thread* that started the worker ends, not its process (so a worker
started from a consumer thread that later ends would be killed under a live
owner), and under ``forkserver`` the worker's parent is the fork server, which
lives as long as any worker does.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable

import psutil

# Seconds between looks at the owner where the system cannot wake us at its death.
POLL = 0.25


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead and not yet reaped, does not).

    >>> alive(os.getpid()), alive(2**22 + 1)
    (True, False)
    """
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_for_death(pid: int) -> None:
    """Return once process ``pid`` has ended: woken by the kernel where it can
    (a pidfd, Linux 5.3 and later), else by looking every :data:`POLL` seconds.

    >>> wait_for_death(2**22 + 1)  # no such process: at once
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd here
        while alive(pid):
            time.sleep(POLL)
        return
    try:
        # Readable once the process has exited, reaped or not (poll: a forked
        # worker may hold more than select's 1024 descriptors).
        watcher = select.poll()
        watcher.register(fd, select.POLLIN)
        while not watcher.poll():
            pass
    finally:
        os.close(fd)


def watch(owner: int, on_death: Callable[[], object]) -> threading.Thread:
    """In a worker process: a daemon thread that, once ``owner`` ends, calls
    ``on_death`` and ends this process (exit code 1).

    >>> import subprocess, sys
    >>> code = "import os, time; from queuetune.prefetch import lifeline; "
    >>> code += "lifeline.watch(2**22 + 1, lambda: print('owner gone', flush=True)); time.sleep(30)"
    >>> subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    'owner gone\\n'
    """

    def run() -> None:
        wait_for_death(owner)
        try:
            on_death()
        finally:
            os._exit(1)

    thread = threading.Thread(target=run, name="queuetune-lifeline", daemon=True)
    thread.start()
    return thread
