"""A process that ends a dead consumer's worker processes, whatever they are doing.

A worker process watches its owner (the consumer's process) from a thread of its
own (:mod:`.lifeline`), and that thread needs the GIL to act: a build that holds
the GIL for minutes (a regular expression that backtracks, a C extension that
never lets go of it) keeps a worker alive for minutes after its owner was
killed, with its shared-memory files and its pool's lock file. So each owner
process that runs worker processes also starts a warden: a small Python process
of its own (``python -I -S`` running this file, importing no more of the
standard library than ``os``, ``select`` and a few built-in modules, and no
code of the user's), whose GIL is always free.

The owner tells it, one line on a pipe each, every pool's file prefix and
folder (:func:`guard`), every worker process of a pool as it appears, with its start
time (:func:`watch`), and every pool closed normally (:func:`forget`). The
warden waits for the owner's death, woken by the kernel (a pidfd, Linux 5.3 and
later; else it looks every :data:`POLL` seconds whether its parent changed), not
by the pipe's end: processes forked from the owner hold the pipe too. Once the
owner is gone it kills every worker still running that it was told of (SIGKILL,
through a pidfd opened at registration whose process had the start time told, so
that a pid used again by another process is never killed), waits for them to end,
removes the files of every pool not forgotten (segments first, the lock file
last, as :func:`.shm.sweep_pool` does), and exits. It ignores SIGINT, SIGHUP
and SIGTERM, which a terminal, Slurm or a shell send to the owner's whole
group, so that it outlives the owner, and SIGTSTP (Ctrl-Z), so that it acts
on an owner killed while stopped.

The warden is started with the first pool of an owner and ends (killed, by its
owner) as the last is forgotten: a process with no Prefetcher open in process
mode has none. A child forked from the owner does not use its parent's warden:
it closes its copy of the pipe, and starts its own with its first pool.

>>> started = time.monotonic()
>>> link = _start()  # a warden with nothing to do: forgotten at once
>>> process = _stop(link)
>>> process.returncode == -signal.SIGKILL and time.monotonic() - started < 60
True
"""

from __future__ import annotations

import _thread  # not threading: the warden imports no more than it needs
import os
import select
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    import subprocess
    from collections.abc import Iterable
else:
    import _signal as signal  # signal's functions without its enums: the warden starts in 2/3 of the time

# Seconds between looks at the owner where the kernel cannot wake the warden at its death.
POLL = 0.25
# Seconds the warden waits for the workers it killed to end before it removes their files.
REAP = 5.0


def start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (the 22nd field of
    /proc/<pid>/stat): with its pid, what tells it from a process given the same
    pid later. None where no process has that pid, or there is no /proc.

    >>> start_time(os.getpid()) == start_time(os.getpid()) is not None, start_time(2**22 + 1)
    (True, None)
    """
    stat = _stat(pid)
    return None if stat is None else int(stat[19])


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the process's name (the third on: its state first)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return fields if len(fields) > 19 else None


# --- the warden's side: this file run as a program ---------------------------------


class _Worker:
    """A worker process the warden was told of: its pid, its start time, and a
    pidfd of it (None where the system has none)."""

    __slots__ = ("fd", "pid", "start")

    def __init__(self, pid: int, start: int, fd: int | None) -> None:
        self.pid, self.start, self.fd = pid, start, fd

    def same(self) -> bool:
        """Whether the process of this pid is still the worker and has not ended."""
        stat = _stat(self.pid)
        return stat is not None and int(stat[19]) == self.start and stat[0] not in (b"Z", b"X")

    def kill(self) -> None:
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, signal.SIGKILL)
            elif self.same():
                os.kill(self.pid, signal.SIGKILL)
        except OSError:  # ended already (ProcessLookupError), or not ours to kill
            pass

    def wait(self, until: float) -> None:
        """Return once the worker has ended, or at ``until`` (a :func:`time.monotonic` time)."""
        if self.fd is not None:
            watcher = select.poll()
            watcher.register(self.fd, select.POLLIN)
            watcher.poll(max(0.0, until - time.monotonic()) * 1000)
            return
        while self.same() and time.monotonic() < until:
            time.sleep(0.01)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _Warden:
    """Watches ``owner`` (its parent) for its death, reading from its standard
    input what to do then: files to remove (each pool's, in its folder, start
    with a prefix that starts with ``files``; the file ``lock`` after it goes
    last) and worker processes to kill."""

    def __init__(self, owner: int, files: str, lock: str) -> None:
        self.owner, self.files, self.lock = owner, files, lock
        # Each pool's folder and workers, by prefix.
        self.pools: dict[str, tuple[str, dict[int, _Worker]]] = {}
        self.unread = b""

    def run(self) -> None:
        for sent_to_the_group in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGTSTP):
            signal.signal(sent_to_the_group, signal.SIG_IGN)
        os.set_blocking(0, False)
        death = _pidfd(self.owner)
        watcher = select.poll()
        watcher.register(0, select.POLLIN)
        if death is not None:
            watcher.register(death, select.POLLIN)
        # Where no pidfd wakes it, the warden looks: its parent is the owner until the owner ends.
        wait = None if death is not None else POLL * 1000
        reading = True
        # The pidfd was opened while the owner was still this process's parent: it is the owner's.
        while os.getppid() == self.owner:
            ready = {fd for fd, _ in watcher.poll(wait)}
            if death is not None and death in ready:
                break
            if 0 in ready and reading and not self.read():
                # The pipe's end, the owner alive (it let go of the pipe in an exec): the
                # files told stay to be removed at its death, if any are.
                watcher.unregister(0)
                reading = False
                if not self.pools:
                    return
        if reading:
            self.read()  # what the owner wrote before it died
        self.end()

    def read(self) -> bool:
        """Do what the owner wrote since the last read; False at the pipe's end."""
        while True:
            try:
                data = os.read(0, 1 << 16)
            except BlockingIOError:
                return True
            if not data:
                return False
            *lines, self.unread = (self.unread + data).split(b"\n")
            for line in lines:
                self.obey(os.fsdecode(line))

    def obey(self, line: str) -> None:
        """Do one line: ``p PREFIX FOLDER`` (a pool's files; the folder's path is
        the rest of the line), ``w PREFIX PID START`` (a worker of that pool;
        START ``-`` where unknown) or ``f PREFIX`` (forget the pool)."""
        match line.split(" ", 2):
            case ["p", prefix, folder] if self.pool(prefix) and folder:
                self.pools.setdefault(prefix, (folder, {}))
            case ["w", prefix, rest] if prefix in self.pools:
                pid, _, start = rest.partition(" ")
                if pid.isdigit() and start.isdigit():
                    worker = _adopt(int(pid), int(start))
                    if worker is not None:
                        self.pools[prefix][1][worker.pid] = worker
            case ["f", prefix]:
                for worker in self.pools.pop(prefix, ("", {}))[1].values():
                    worker.close()

    def pool(self, prefix: str) -> bool:
        """Whether ``prefix`` may be a pool's (no other files start with it)."""
        return prefix.startswith(self.files) and len(prefix) > len(self.files) and "/" not in prefix

    def end(self) -> None:
        """Kill the workers, wait for them, and remove the pools' files."""
        workers = [worker for _, pool in self.pools.values() for worker in pool.values()]
        for worker in workers:
            worker.kill()
        # Ended before their files go: a worker killed while it made a file has made it.
        until = time.monotonic() + REAP
        for worker in workers:
            worker.wait(until)
        for prefix, (folder, _) in self.pools.items():
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            mine = sorted((name for name in names if name.startswith(prefix)), key=lambda n: n == prefix + self.lock)
            for name in mine:
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass


def _pidfd(pid: int) -> int | None:
    """A pidfd of process ``pid`` (readable once it ends), or None where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _adopt(pid: int, start: int) -> _Worker | None:
    """The worker of ``pid`` if its process started at ``start``; None if another or none does."""
    fd = _pidfd(pid)
    worker = _Worker(pid, start, fd)
    # Checked after the pidfd is opened: then the pidfd is of that process, whatever comes later.
    if start_time(pid) != start:
        worker.close()
        return None
    return worker


def main(argv: list[str]) -> None:
    """The warden's program: ``OWNER FILES LOCK`` (see :class:`_Warden`)."""
    owner, files, lock = argv
    _Warden(int(owner), files, lock).run()


# --- the owner's side ---------------------------------------------------------------


class _Link:
    """The owner's end of its warden: the process and the pipe's write end."""

    def __init__(self, process: subprocess.Popen[bytes], fd: int) -> None:
        self.process, self.fd = process, fd


# The pools told to this process's warden, each with its workers' pids and start
# times, and its folder; the warden (None while none runs); the warden's deaths
# not asked for. Reentrant: a finalizer that closes a prefetcher may run in a
# thread that holds it.
_lock = _thread.RLock()
_pools: dict[str, dict[int, int | None]] = {}
_folders: dict[str, str] = {}
_link: _Link | None = None
_failures = 0
# A warden that ends unasked this many times is not started again (it cannot run here).
FAILURES = 3


def guard(prefix: str, folder: str | os.PathLike[str]) -> None:
    """Have this process's warden remove the files of the pool ``prefix`` (see
    :attr:`.shm.Pool.prefix`) in ``folder`` if this process ends before
    :func:`forget`; the warden starts here if none runs."""
    folder = os.fspath(folder)
    if "\n" in folder or "\n" in prefix or " " in prefix:
        return  # not a line's word: left to the workers' lifelines
    with _lock:
        if prefix not in _pools:
            _pools[prefix], _folders[prefix] = {}, folder
            _say(_pool_line(prefix))


def watch(prefix: str, pids: Iterable[int]) -> None:
    """Have the warden kill the worker processes ``pids`` of pool ``prefix`` if
    this process ends before :func:`forget` (those told before are skipped)."""
    with _lock:
        workers = _pools.get(prefix)
        if workers is None:
            return
        lines = []
        for pid in pids:
            if pid not in workers:
                workers[pid] = start = start_time(pid)
                lines.append(_worker_line(prefix, pid, start))
        if lines:
            _say("".join(lines))


def forget(prefix: str) -> None:
    """The pool ``prefix`` is closed: its files and workers are gone. The warden
    ends with the last pool forgotten."""
    global _link
    with _lock:
        if _pools.pop(prefix, None) is None:
            return
        del _folders[prefix]
        if _pools:
            _say(f"f {prefix}\n")
            return
        link, _link = _link, None
    if link is not None:
        _stop(link)


def pid() -> int | None:
    """The pid of this process's warden; None while it has none."""
    link = _link
    return None if link is None else link.process.pid


def guarded() -> dict[str, list[int]]:
    """The pools told to the warden now, each with its workers' pids."""
    with _lock:
        return {prefix: sorted(workers) for prefix, workers in _pools.items()}


def _pool_line(prefix: str) -> str:
    return f"p {prefix} {_folders[prefix]}\n"


def _worker_line(prefix: str, pid: int, start: int | None) -> str:
    return f"w {prefix} {pid} {'-' if start is None else start}\n"


def _say(text: str) -> None:
    """Write ``text`` to the warden (the caller holds the lock), starting one if
    none runs; one started anew (the last died) is told every pool and worker."""
    global _link, _failures
    if not _pools:  # all forgotten meanwhile (a finalizer run while this thread held the lock)
        return
    if _link is None:
        _link = _start()
        text = _everything()
    while _link is not None:
        try:
            _write(_link.fd, os.fsencode(text))
            return
        except OSError:  # the warden ended unasked (killed, or it could not run)
            _stop(_link)
            _failures += 1
            _link = _start()
            text = _everything()


def _everything() -> str:
    lines = []
    for prefix, workers in _pools.items():
        lines.append(_pool_line(prefix))
        lines.extend(_worker_line(prefix, pid, start) for pid, start in workers.items())
    return "".join(lines)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _start() -> _Link | None:
    """Start a warden for this process; None where it cannot run."""
    global _failures
    import subprocess

    from . import shm

    program = os.path.abspath(__file__)
    # A frozen application's executable is the application, not a Python to run the program with.
    if _failures >= FAILURES or not sys.executable or getattr(sys, "frozen", False) or not os.path.isfile(program):
        return None
    argv = [str(os.getpid()), shm.files.PREFIX, shm.files.LOCK]
    read, write = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", program, *argv], stdin=read, stdout=subprocess.DEVNULL, close_fds=True
        )
    except OSError:
        os.close(write)
        _failures += 1
        return None
    finally:
        os.close(read)
    return _Link(process, write)


def _stop(link: _Link) -> subprocess.Popen[bytes]:
    """End the warden of ``link`` (it has nothing to do: no pool left, or it died) and reap it."""
    os.close(link.fd)
    link.process.kill()  # it ignores SIGTERM
    link.process.wait()
    return link.process


def _after_fork_in_child() -> None:
    """In a child forked from the owner: not the parent's warden (see the module's docstring)."""
    global _lock, _link
    _lock = _thread.RLock()
    _pools.clear()
    _folders.clear()
    link, _link = _link, None
    if link is not None:
        os.close(link.fd)
        link.process.returncode = 0  # the parent's child, not this process's: nothing to reap here


if __name__ == "__main__":
    main(sys.argv[1:])
else:
    os.register_at_fork(after_in_child=_after_fork_in_child)
