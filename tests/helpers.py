"""Shared test helpers."""
from __future__ import annotations

import threading
import time

import psutil


def queuetune_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("queuetune")]


def assert_nothing_left_running(timeout: float = 10.0, threads: bool = True) -> None:
    """Fail unless, within ``timeout``, no queuetune thread and no child process is alive."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [c for c in psutil.Process().children(recursive=True) if _alive(c)]
        named = queuetune_threads() if threads else []
        if not alive and not named:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"left running: threads={named}, children={[c.pid for c in alive]}")
        time.sleep(0.05)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
