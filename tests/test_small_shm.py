"""A small /dev/shm (Docker's default is 64 MiB): the prefetcher says so as it
starts, a batch with no room left fails with an error that names shared memory
and its figures, and a worker killed by SIGBUS is reported as shared memory
exhausted. The tests mount a 32 MiB tmpfs of their own (as root) and point the
pool at it."""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess

import numpy as np
import pytest

from helpers import assert_nothing_left_running
from queuetune import Prefetcher, SharedMemoryFull, SharedMemoryWarning, WorkerDied
from queuetune.prefetch import shm

SIZE = "32m"
MiB8 = 1 << 20  # float64 values: 8 MiB


@pytest.fixture
def small_shm(tmp_path, monkeypatch):
    """A 32 MiB tmpfs as the pool's folder (the workers are forked: they see it too)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "shm"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    monkeypatch.setattr(shm.files, "ROOT", where)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


class Big:
    """Batch i: 8 MiB of the value i; with ``bus``, batch 2 kills its worker with SIGBUS."""

    def __init__(self, n: int, bus: bool = False) -> None:
        self.n, self.bus = n, bus

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        if self.bus and i == 2:
            faulthandler.disable()  # pytest's, inherited by the fork: no traceback dump
            os.kill(os.getpid(), signal.SIGBUS)
        return np.full(MiB8, float(i))


def settings(**extra):
    return dict(mode="process", workers=2, adaptive=False, multiprocessing_context="fork", **extra)


@pytest.mark.timeout(120)
def test_a_budget_above_the_free_shared_memory_is_warned_of_as_the_epoch_starts(small_shm):
    with Prefetcher(Big(2), max_bytes="64MiB", depth=1, **settings()) as p:
        with pytest.warns(SharedMemoryWarning, match=rf"max_bytes=64.0 MiB.*{small_shm} holds 32.0 MiB.*--shm-size"):
            assert [int(b[0]) for b in p] == [0, 1]
    assert_nothing_left_running()


@pytest.mark.timeout(120)
def test_a_batch_with_no_room_left_fails_with_shared_memory_full_not_a_sigbus(small_shm):
    got = []
    with Prefetcher(Big(12), max_bytes="64MiB", depth=6, **settings()) as p:
        with pytest.warns(SharedMemoryWarning), pytest.raises(SharedMemoryFull) as caught:
            for batch in p:
                got.append(batch)  # each kept: the segments are never freed
    message = str(caught.value)
    assert "no room for a shared-memory segment of 8.0 MiB" in message
    assert f"{small_shm} holds 32.0 MiB" in message and "--shm-size" in message
    assert not isinstance(caught.value, WorkerDied)
    # Every batch handed over whole, in order, before the one that had no room.
    assert 1 <= len(got) < 12
    assert [float(b[0]) for b in got] == list(range(len(got))) and all(b.size == MiB8 for b in got)
    del got, batch
    assert_nothing_left_running()
    assert list(small_shm.iterdir()) == []


@pytest.mark.timeout(120)
def test_a_worker_killed_by_sigbus_is_reported_as_shared_memory_exhausted(small_shm):
    with Prefetcher(Big(6, bus=True), max_bytes="16MiB", depth=1, **settings()) as p:
        with pytest.raises(WorkerDied) as caught:
            for _ in p:
                pass
    message = str(caught.value)
    assert "killed by SIGBUS: shared memory exhausted, most likely" in message
    assert f"{small_shm} holds 32.0 MiB" in message and "max_bytes=16.0 MiB" in message
    assert_nothing_left_running()
    assert list(small_shm.iterdir()) == []
