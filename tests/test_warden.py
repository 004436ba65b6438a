"""The warden: the process that ends a dead owner's worker processes and removes
their files, whatever the workers are doing (queuetune.prefetch.warden). What it
does at its owner's death with a Prefetcher's workers is in test_parent_death.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

from helpers import assert_nothing_left_running
from queuetune import Prefetcher
from queuetune.prefetch import shm, warden

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")


def children() -> set[int]:
    return {c.pid for c in psutil.Process().children() if c.status() != psutil.STATUS_ZOMBIE}


def prefetcher(value: float, workers: int, method: str | None = None) -> Prefetcher:
    source = [np.full(1000, value)] * 8
    return Prefetcher(source, max_bytes="1MiB", mode="process", workers=workers, multiprocessing_context=method)


def workers_of(p: Prefetcher) -> list[int]:
    return sorted(p._kept.workers[0].processes.known)  # type: ignore[attr-defined]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_warden_runs_while_a_prefetcher_does_and_a_close_leaves_nothing_told(method):
    first, second = prefetcher(0, 2, method), prefetcher(1, 1, method)
    try:
        assert warden.pid() is None and warden.guarded() == {}
        next(iter(first))
        watcher = warden.pid()
        assert watcher in children()
        assert warden.guarded() == {first._kept.pools[0]: workers_of(first)}
        assert len(workers_of(first)) == 2
        next(iter(second))
        assert warden.pid() == watcher  # one warden for the process
        assert warden.guarded() == {first._kept.pools[0]: workers_of(first), second._kept.pools[0]: workers_of(second)}
        first.close()
        assert warden.guarded() == {second._kept.pools[0]: workers_of(second)} and warden.pid() == watcher
    finally:
        first.close()
        second.close()
    assert warden.pid() is None and warden.guarded() == {}
    assert watcher not in children()  # ended with the last pool forgotten, and reaped
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_a_warden_killed_meanwhile_is_started_again_and_told_everything():
    first, second = prefetcher(0, 1, "fork"), prefetcher(1, 1, "fork")
    try:
        next(iter(first))
        killed = psutil.Process(warden.pid())
        killed.kill()
        deadline = time.monotonic() + 10
        while killed.status() != psutil.STATUS_ZOMBIE:  # its end of the pipe is closed
            assert time.monotonic() < deadline
            time.sleep(0.01)
        next(iter(second))  # tells the warden of a new pool: the write fails, a new warden gets both
        assert warden.pid() not in (None, killed.pid)
        assert warden.guarded() == {first._kept.pools[0]: workers_of(first), second._kept.pools[0]: workers_of(second)}
        assert not killed.is_running()  # reaped
    finally:
        first.close()
        second.close()
    assert warden.pid() is None
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_a_child_forked_from_the_owner_does_not_use_its_parents_warden():
    with prefetcher(0, 1) as p:
        next(iter(p))
        parents = warden._link
        assert parents is not None
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (the child)
            try:
                os.fstat(parents.fd)
                inherited = True
            except OSError:
                inherited = False
            os.write(write, repr((warden.pid(), warden.guarded(), inherited)).encode())
            os._exit(0)
        os.close(write)
        said = os.read(read, 1000).decode()
        os.close(read)
        assert os.waitpid(child, 0)[1] == 0
        assert said == "(None, {}, False)"  # not told of the parent's pools, and its pipe closed
        assert warden.pid() == parents.process.pid and warden.guarded()  # the parent's as it was
    assert_nothing_left_running()


# An owner that tells its warden of a pool of files and of two processes: a
# worker, and one whose pid it tells with another start time, as if that pid had
# been a worker's that ended and was given to another process since.
OWNER = textwrap.dedent(
    """
    import os, sys, time
    from queuetune.prefetch import shm, warden

    prefix = f"{shm.files.PREFIX}{os.getpid()}-0123abcd-"
    for name in ("segment", "lock"):
        open(shm.files.ROOT / f"{prefix}{name}", "w").close()
    worker, stranger = int(sys.argv[1]), int(sys.argv[2])
    if len(sys.argv) > 3:  # another program for the warden
        warden.__file__ = sys.argv[3]
    warden.guard(prefix, shm.files.ROOT)
    warden.watch(prefix, [worker])
    with warden._lock:
        warden._say(warden._worker_line(prefix, stranger, warden.start_time(stranger) + 1))
    print(warden.pid(), flush=True)
    time.sleep(60)
    """
)


# The warden's program on a system without pidfds: it looks every 0.25 s.
NO_PIDFD = textwrap.dedent(
    """
    import os, signal
    del os.pidfd_open, signal.pidfd_send_signal
    with open({program!r}) as program:
        exec(compile(program.read(), {program!r}, "exec"), {{"__name__": "__main__"}})
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("system", ["pidfd", "no pidfd"])
def test_at_its_owners_death_the_warden_kills_the_workers_it_was_told_of_and_no_other_process(tmp_path, system):
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    argv = [sys.executable, str(script)]
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    worker, stranger = subprocess.Popen(sleep), subprocess.Popen(sleep)
    argv += [str(worker.pid), str(stranger.pid)]
    if system == "no pidfd":
        program = tmp_path / "no_pidfd.py"
        program.write_text(NO_PIDFD.format(program=warden.__file__))
        argv.append(str(program))
    owner = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=tmp_path)
    try:
        watcher = psutil.Process(int(owner.stdout.readline()))  # type: ignore[union-attr]
        assert sorted(p.name for p in shm.files.ROOT.glob(f"{shm.files.PREFIX}{owner.pid}-*")) == [
            f"{shm.files.PREFIX}{owner.pid}-0123abcd-lock",
            f"{shm.files.PREFIX}{owner.pid}-0123abcd-segment",
        ]
        owner.kill()
        owner.wait(timeout=30)
        assert worker.wait(timeout=10) == -signal.SIGKILL
        watcher.wait(timeout=10)
        assert list(shm.files.ROOT.glob(f"{shm.files.PREFIX}{owner.pid}-*")) == []
        assert stranger.poll() is None  # not the process it was told of
    finally:
        for process in (owner, worker, stranger):
            process.kill()
            process.wait(timeout=30)
        owner.stdout.close()  # type: ignore[union-attr]
        shm.sweep(owner.pid)
    assert_nothing_left_running()
