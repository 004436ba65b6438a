"""Nothing left behind when the consumer's process is killed: its worker
processes (and Python's fork server and resource tracker) end within seconds,
its shared-memory files are removed by its workers as they go, and files of a
pool whose every process was killed are swept by the next pool or by
``queuetune doctor --shm``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from helpers import assert_nothing_left_running
from queuetune import Prefetcher
from queuetune.cli import main
from queuetune.prefetch import shm, warden

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")

# The reproduction, smaller: 1 MiB batches, a fixed depth of 8.
VICTIM = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import queuetune

    class Samples:
        def __len__(self):
            return 10**6

        def __getitem__(self, i):
            return np.full(1 << 17, float(i))  # 1 MiB

    if __name__ == "__main__":
        p = queuetune.Prefetcher(
            Samples(), max_bytes="64MiB", mode="process", workers=2, adaptive=False, depth=8,
            multiprocessing_context=sys.argv[1],
        )
        for i, batch in enumerate(p):
            if i == 5:
                print("ready", flush=True)
            if i == 6 and sys.argv[2] == "exit":
                import os
                os._exit(3)
            if i == 6 and sys.argv[2] == "close":
                time.sleep(1)  # the test sees the processes first
                p.close()
                print("closed", flush=True)
                time.sleep(60)
            if i == 6 and sys.argv[2] == "return":
                time.sleep(1)  # the test sees the processes first
                break  # and the interpreter exits with the Prefetcher open
            time.sleep(0.05)
    """
)

# Builds that hold the GIL for minutes (a regular expression that backtracks,
# in C, never letting go of the GIL) from the seventh sample on: the workers'
# lifeline threads cannot run, and only the warden ends them.
HOLDS_THE_GIL = textwrap.dedent(
    """
    import re, sys
    import numpy as np
    import queuetune

    class Samples:
        def __len__(self):
            return 10**6

        def __getitem__(self, i):
            if i >= 6:
                re.match(r"(a+)+$", "a" * 40 + "b")
            return np.full(1 << 17, float(i))  # 1 MiB

    if __name__ == "__main__":
        p = queuetune.Prefetcher(
            Samples(), max_bytes="64MiB", mode="process", workers=2, adaptive=False, depth=8,
            multiprocessing_context=sys.argv[1],
        )
        for i, batch in enumerate(p):
            if i == 5:
                print("ready", flush=True)
    """
)

# Workers and helpers must be gone within this many seconds of the death (the
# aim is 2; the rest is room for a busy machine).
GONE_WITHIN = 10.0


def start_victim(tmp_path, method: str, how: str, script: str = VICTIM) -> subprocess.Popen:
    path = tmp_path / "victim.py"
    path.write_text(script)
    victim = subprocess.Popen(
        [sys.executable, str(path), method, how],
        stdout=subprocess.PIPE,
        start_new_session=True,
        cwd=tmp_path,
    )
    line = victim.stdout.readline()  # type: ignore[union-attr]
    assert line == b"ready\n", f"the victim did not start: {line!r}"
    return victim


def clean_up(victim: subprocess.Popen, processes: list[psutil.Process]) -> None:
    """What a test that failed may have left: kill the victim, then what is left
    of ``processes`` (its descendants as found) after a while (Python's resource
    tracker removes the victim's semaphores as it ends), remove its files, close
    its output."""
    with contextlib.suppress(OSError):
        victim.kill()
    victim.wait(timeout=30)
    _, alive = psutil.wait_procs(processes, timeout=GONE_WITHIN)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=10)
    shm.sweep(victim.pid)
    victim.stdout.close()  # type: ignore[union-attr]


def descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def owned_files(pid: int) -> list[str]:
    return sorted(p.name for p in shm.files.ROOT.glob(f"queuetune-{pid}-*"))


def wardens(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` that are a queuetune warden (see queuetune.prefetch.warden)."""
    return [p for p in processes if p.cmdline()[1:4] == ["-I", "-S", warden.__file__]]


def running(processes: list[psutil.Process]) -> list[int]:
    alive = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_until_gone(processes: list[psutil.Process], within: float) -> float:
    start = time.monotonic()
    while running(processes):
        if time.monotonic() - start > within:
            raise AssertionError(f"still running {within} s after their owner died: {running(processes)}")
        time.sleep(0.02)
    return time.monotonic() - start


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "exit"])
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_a_killed_owner_leaves_no_worker_and_no_file(tmp_path, method, how):
    victim = start_victim(tmp_path, method, how)
    pid = victim.pid
    helpers = descendants(pid)
    try:
        workers = [p for p in helpers if "resource_tracker" not in " ".join(p.cmdline())]
        assert len(workers) >= 2, [p.cmdline() for p in helpers]
        assert len(wardens(helpers)) == 1, [p.cmdline() for p in helpers]
        assert owned_files(pid), "the victim made no shared-memory file"
        if how != "exit":
            os.kill(pid, getattr(signal, how))
        victim.wait(timeout=30)
        took = wait_until_gone(helpers, GONE_WITHIN)
        print(f"{method}, {how}: {len(helpers)} processes gone {took:.2f} s after the owner's end")
        # The workers took the files with them, and no process holds the victim's stdout.
        assert owned_files(pid) == []
        assert victim.stdout.read() == b""  # type: ignore[union-attr]
    finally:
        clean_up(victim, helpers)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_a_killed_owner_leaves_no_worker_and_no_file_while_builds_hold_the_gil(tmp_path, method, how):
    victim = start_victim(tmp_path, method, how, HOLDS_THE_GIL)
    pid = victim.pid
    helpers = descendants(pid)
    try:
        watcher = wardens(helpers)
        workers = [p for p in helpers if p not in watcher and "resource_tracker" not in " ".join(p.cmdline())]
        if method == "forkserver":
            workers = [p for p in workers if p.ppid() != pid]  # the fork server's children, not the server
        assert len(workers) == 2 and len(watcher) == 1, [p.cmdline() for p in helpers]
        # Both workers in a build that holds the GIL: each spends a second of CPU in it.
        spent = {p.pid: cpu_seconds(p) for p in workers}
        deadline = time.monotonic() + 60
        while any(cpu_seconds(p) - spent[p.pid] < 1.0 for p in workers):
            assert time.monotonic() < deadline, "the workers did not start the builds that hold the GIL"
            time.sleep(0.05)
        assert owned_files(pid), "the victim made no shared-memory file"
        os.kill(pid, getattr(signal, how))
        victim.wait(timeout=30)
        took = wait_until_gone(helpers, GONE_WITHIN)
        print(f"{method}, {how}, builds holding the GIL: {len(helpers)} processes gone {took:.2f} s after")
        assert owned_files(pid) == []
        assert victim.stdout.read() == b""  # type: ignore[union-attr]
    finally:
        clean_up(victim, helpers)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_an_owner_that_closes_its_prefetcher_or_ends_normally_leaves_no_warden(tmp_path, method):
    victim = start_victim(tmp_path, method, "close")
    helpers = descendants(victim.pid)
    try:
        assert len(wardens(helpers)) == 1
        # The workers and the warden (not Python's resource tracker and fork server, which stay).
        ours = [p for p in helpers if "resource_tracker" not in " ".join(p.cmdline())]
        if method == "forkserver":
            ours = [p for p in ours if p.ppid() != victim.pid]
        assert victim.stdout.readline() == b"closed\n"  # type: ignore[union-attr]
        assert running(ours) == []  # while the victim runs on
        assert owned_files(victim.pid) == []
    finally:
        clean_up(victim, helpers)
    victim = start_victim(tmp_path, method, "return")
    helpers = descendants(victim.pid)
    try:
        assert len(wardens(helpers)) == 1
        assert victim.wait(timeout=30) == 0
        wait_until_gone(helpers, GONE_WITHIN)
        assert owned_files(victim.pid) == []
    finally:
        clean_up(victim, helpers)


def kill_everything(victim: subprocess.Popen) -> list[str]:
    """SIGKILL the victim and every process of its session at once: nobody is left to remove its files."""
    pid = victim.pid
    files = owned_files(pid)
    os.killpg(pid, signal.SIGKILL)
    victim.wait(timeout=30)
    victim.stdout.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + GONE_WITHIN
    while any(p.info["pid"] != pid for p in psutil.process_iter(["pid"]) if _in_session(p, pid)):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # The kernel lets go of a dead process's locks a moment after it is gone.
    while not all(pool.orphaned for pool in shm.pools() if pool.owner == pid):
        assert time.monotonic() < deadline, "the victim's pool is still locked"
        time.sleep(0.02)
    return files


def _in_session(process: psutil.Process, sid: int) -> bool:
    try:
        return os.getsid(process.pid) == sid and process.status() != psutil.STATUS_ZOMBIE
    except (OSError, psutil.Error):
        return False


@pytest.mark.timeout(120)
def test_the_next_pool_sweeps_the_files_of_a_pool_whose_processes_all_died(tmp_path):
    victim = start_victim(tmp_path, "fork", "SIGKILL")
    files = kill_everything(victim)
    assert files and owned_files(victim.pid) == files  # left behind: nobody ran to remove them
    other = shm.Pool(os.getpid())  # a live pool of this process: not swept
    try:
        with Prefetcher(list(range(4)), max_bytes="1MiB", mode="process", workers=1) as p:
            assert list(p) == [0, 1, 2, 3]
        assert owned_files(victim.pid) == []
        assert (shm.files.ROOT / f"{other.prefix}lock").exists()
    finally:
        other.close()
    assert_nothing_left_running()


@pytest.mark.timeout(120)
def test_doctor_shm_lists_and_removes_orphaned_files_only(tmp_path, capsys):
    victim = start_victim(tmp_path, "fork", "SIGKILL")
    files = kill_everything(victim)
    live = shm.Pool(os.getpid())
    try:
        assert main(["doctor", "--shm", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert f"pid {victim.pid} (queuetune-{victim.pid}-" in out and "orphaned: would remove" in out
        assert owned_files(victim.pid) == files
        assert main(["doctor", "--shm"]) == 0
        out = capsys.readouterr().out
        assert f"pid {victim.pid} (queuetune-{victim.pid}-" in out and "orphaned: removed" in out
        assert owned_files(victim.pid) == []
        assert (shm.files.ROOT / f"{live.prefix}lock").exists()
        assert main(["doctor", "--shm"]) == 0
        assert "no orphaned" in capsys.readouterr().out
    finally:
        live.close()
    assert not list(shm.files.ROOT.glob(f"{live.prefix}*"))
