"""Shared test helpers."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from queuetune.prefetch import warden
from queuetune.record.recorder import multiprocessing_helpers

#: pytest's own outcomes (a test's timeout is a Failed raised inside the test): a
#: helper that returns what the code under test raised must raise these instead.
OUTCOMES = (pytest.fail.Exception, pytest.skip.Exception, pytest.exit.Exception)


#: Threads already reported as left running by an earlier test: not reported again, so
#: that one test's leftover fails that test, not every test after it.
_REPORTED: set[int] = set()


def queuetune_threads() -> list[str]:
    return [t.name for t in _queuetune_threads()]


def _queuetune_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("queuetune") and t.ident not in _REPORTED]


def assert_nothing_left_running(timeout: float = 10.0, threads: bool = True) -> None:
    """Fail unless, within ``timeout``, no queuetune thread and no child process is alive
    (Python's own multiprocessing helpers aside: see ``multiprocessing_helpers``; queuetune's
    warden is not, as it ends with the last Prefetcher closed).

    The failure says what each leftover is doing (a thread's stack, a process's command
    line and state); then the processes are killed and the threads set aside, so that
    the tests after this one start clean and fail only for what they leave themselves.
    """
    deadline = time.monotonic() + timeout
    while True:
        alive = _children_left()
        named = _queuetune_threads() if threads else []
        if not alive and not named:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    report = _describe(named, alive)
    _REPORTED.update(t.ident for t in named if t.ident is not None)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(alive, timeout=5)
    raise AssertionError(report)


def _children_left() -> list[psutil.Process]:
    helpers = multiprocessing_helpers() - {warden.pid()}
    return [c for c in psutil.Process().children(recursive=True) if c.pid not in helpers and _alive(c)]


def _describe(threads: list[threading.Thread], children: list[psutil.Process]) -> str:
    import traceback

    frames = sys._current_frames()
    lines = [f"left running: threads={[t.name for t in threads]}, children={[c.pid for c in children]}"]
    for thread in threads:
        frame = frames.get(thread.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "  (no frame)\n"
        lines.append(f"thread {thread.name}:\n{stack}")
    for child in children:
        try:
            lines.append(f"process {child.pid} ({child.status()}): {' '.join(child.cmdline())[:300]}")
        except psutil.Error as exc:
            lines.append(f"process {child.pid}: {exc!r}")
    return "\n".join(lines)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# The article's table as it prints it: GiB, float32, RGB; rows are batch sizes,
# columns 32, 64, 128, 256, 512, 1024.
_ARTICLE_TABLE = """
32 | 0.000366211 | 0.001464844 | 0.005859375 | 0.0234375 | 0.09375 | 0.375
64 | 0.000732422 | 0.002929688 | 0.01171875 | 0.046875 | 0.1875 | 0.75
128 | 0.001464844 | 0.005859375 | 0.0234375 | 0.09375 | 0.375 | 1.5
256 | 0.002929688 | 0.01171875 | 0.046875 | 0.1875 | 0.75 | 3
512 | 0.005859375 | 0.0234375 | 0.09375 | 0.375 | 1.5 | 6
1024 | 0.01171875 | 0.046875 | 0.1875 | 0.75 | 3 | 12
2048 | 0.0234375 | 0.09375 | 0.375 | 1.5 | 6 | 24
4096 | 0.046875 | 0.1875 | 0.75 | 3 | 12 | 48
8192 | 0.09375 | 0.375 | 1.5 | 6 | 24 | 96
16384 | 0.1875 | 0.75 | 3 | 12 | 48 | 192
32768 | 0.375 | 1.5 | 6 | 24 | 96 | 384
65536 | 0.75 | 3 | 12 | 48 | 192 | 768
"""
ARTICLE_ROWS = [[cell.strip() for cell in line.split("|")] for line in _ARTICLE_TABLE.strip().splitlines()]


def block_import(monkeypatch: pytest.MonkeyPatch, package: str, message: str) -> None:
    """Make every import of ``package`` (and its modules) raise ImportError(message)
    for the rest of the test, as if it were not installed."""
    import builtins

    real_import = builtins.__import__

    def blocked(name: str, *args: object, **kwargs: object) -> object:
        if name == package or name.startswith(package + "."):
            raise ImportError(message)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", blocked)


#: The keys of ``Footprint.to_dict()`` (``queuetune estimate --json``'s ``footprint``).
FOOTPRINT_KEYS = {
    "framework",
    "settings",
    "batch_bytes",
    "depth",
    "total_batches",
    "total_bytes",
    "batches_bytes",
    "lines",
}


@contextlib.contextmanager
def busy(script: str, extra: int = 1) -> Iterator[None]:
    """Run ``script`` in one Python process per core, and ``extra`` more, for the
    block: what a test that must pass on a busy machine runs under."""
    spinners = [subprocess.Popen([sys.executable, "-c", script]) for _ in range((os.cpu_count() or 1) + extra)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait(timeout=10)


def busy_cores(extra: int = 1) -> contextlib.AbstractContextManager[None]:
    """Keep every core busy spinning (one process per core, and ``extra`` more) for the block."""
    return busy("while True: pass", extra)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Run the command line's ``main`` in this process; return (exit code, stdout,
    stderr). Exceptions propagate."""
    import io

    from queuetune.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def peak_held(trace: Any) -> int:
    """The most bytes of batches built and not yet handed over, at any moment (from the trace)."""
    taken = {c.key: c.consumed for c in trace.consumed}
    events = []
    for batch in trace.produced:
        events.append((batch.end, batch.nbytes))
        events.append((taken.get(batch.key, float("inf")), -batch.nbytes))
    held = peak = 0
    for _, change in sorted(events):
        held += change
        peak = max(peak, held)
    return peak


def queuetune_process(argv: list[str], cwd: Any, close_stdout: bool = False) -> tuple[int, str]:
    """Run ``python -m queuetune ARGV`` in ``cwd``; its exit code and stderr. With
    ``close_stdout``, its reader goes away before it writes a byte."""
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "queuetune", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd
    )
    assert process.stdout is not None and process.stderr is not None
    if close_stdout:
        process.stdout.close()  # the reader gone before a byte is written
    err = process.stderr.read().decode()
    code = process.wait(timeout=100)
    process.stderr.close()
    if not close_stdout:
        process.stdout.close()
    return code, err
