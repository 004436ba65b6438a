"""The memory of the process tree (PSS, and /dev/shm no process maps), sampled while a
loader runs; the child processes a loader leaves; items counted in flight."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

#: How often :class:`Sampler` reads :func:`tree_memory`, in seconds.
# Seconds between readings of the process tree's memory. Reading a process's smaps_rollup
# holds its memory map's lock: a training process of 1 GiB read every 0.2 s on 2 cores
# took 3.4 s a step against 0.7 s (real_pipeline.py), so that benchmark reads every 0.5 s.
SAMPLE_EVERY = 0.2


SAMPLE_EVERY_TRAINING = 0.5


class Counted:
    """Items started in a load function and not yet released by the consumer,
    and their peak: how the loaders queuetune cannot watch are measured. Shared
    with worker processes forked after it is made.

    >>> counted = Counted()
    >>> counted.start(); counted.start(3); counted.release(2)
    >>> counted.now.value, counted.peak
    (2, 4)
    """

    def __init__(self, start_method: str = "fork") -> None:
        import multiprocessing

        # The workers' start method: a lock made for forked workers cannot be sent to others.
        context = multiprocessing.get_context(start_method)
        self.now = context.Value("i", 0)
        self.top = context.RawValue("i", 0)

    def start(self, count: int = 1) -> None:
        with self.now.get_lock():
            self.now.value += count
            self.top.value = max(self.top.value, self.now.value)

    def release(self, count: int = 1) -> None:
        with self.now.get_lock():
            self.now.value -= count

    @property
    def peak(self) -> int:
        return int(self.top.value)


def tree_memory(pid: int | None = None, shm: str | Path = "/dev/shm") -> dict[str, int]:
    """The real memory of process ``pid`` (this one by default) and all its
    descendants, in bytes, read from /proc (Linux) by what queuetune's own
    reports use (:func:`queuetune.record.real_memory.read_tree`):

    - ``pss``: the sum of each process's proportional set size
      (``psutil.Process.memory_full_info().pss``): its private pages, and each
      shared page divided among the processes that map it. The RSS of a tree of
      forked workers counts every shared page once per process; PSS counts it
      once. Files in ``shm`` that a process maps are in here already.
    - ``shm``: the bytes (blocks allocated, ``st_blocks * 512``) of the files in
      ``shm`` that none of those processes maps but that are theirs: held open
      by one of them (deleted or not: torch's workers hand tensors over as
      descriptors of unlinked files) or named with one's pid (queuetune's
      segments ``queuetune-<pid>-...``, torch's ``torch_<pid>_...``). Files of
      other processes on the machine are left out, so a test run beside the
      benchmark adds nothing.
    - ``total``: the two together; ``processes``: how many were read;
      ``workers_uss``: the descendants' own memory (their USS: pages no other
      process maps), what a worker grows by as it runs.

    A process that ends while it is read is left out.

    >>> m = tree_memory()
    >>> m["total"] == m["pss"] + m["shm"] and m["pss"] > 0 and m["processes"] >= 1
    True
    """
    import psutil

    from queuetune.record.real_memory import read_tree

    tree = read_tree(psutil.Process(pid), shm=shm)
    if tree is None:
        return {"pss": 0, "shm": 0, "total": 0, "processes": 0, "workers_uss": 0}
    pss = tree.consumer.pss + tree.workers_pss
    return {
        "pss": pss,
        "shm": tree.shm,
        "total": pss + tree.shm,
        "processes": 1 + len(tree.workers),
        "workers_uss": tree.workers_uss,
    }


class Sampler:
    """``tree_memory()`` every ``every`` seconds from a thread, until stopped;
    each sample tagged with ``epoch``, which the run sets as each epoch begins."""

    def __init__(self, every: float = SAMPLE_EVERY) -> None:
        self.every = every
        self.epoch = 0
        self.totals: list[int] = []
        self.shm: list[int] = []
        self.costs: list[float] = []
        self.workers_uss: dict[int, list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            began = time.perf_counter()
            epoch = self.epoch
            memory = tree_memory()
            self.totals.append(memory["total"])
            self.shm.append(memory["shm"])
            self.workers_uss.setdefault(epoch, []).append(memory["workers_uss"])
            self.costs.append(time.perf_counter() - began)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def figures(self) -> dict[str, Any]:
        """What a run's row says of the samples: peak and median PSS, the peak of
        unmapped /dev/shm, the workers' own memory (USS) at its peak in each epoch,
        how many samples and the median seconds one took."""
        totals = self.totals
        return {
            "pss_peak": max(totals) if totals else None,
            "pss_median": statistics.median(totals) if totals else None,
            "unmapped_shm_peak": max(self.shm) if self.shm else None,
            "workers_uss_by_epoch": [max(self.workers_uss[e]) for e in sorted(self.workers_uss)],
            "pss_samples": len(totals),
            "sample_cost_median": statistics.median(self.costs) if self.costs else None,
        }


def growth_line(loaders: dict[str, dict[str, Any]], runs: dict[str, list[dict[str, Any]]]) -> str:
    """The workers' own memory (USS) at its peak in each epoch, the median over
    rounds, for each loader: what workers kept from one epoch to the next grow by."""
    parts = []
    for name in loaders:
        by_epoch = [r["workers_uss_by_epoch"] for r in runs[name] if r.get("workers_uss_by_epoch")]
        if not by_epoch:
            continue
        epochs = min(len(e) for e in by_epoch)
        medians = [statistics.median(e[i] for e in by_epoch) for i in range(epochs)]
        parts.append(f"{name} {', '.join(f'{m / 2**20:.0f}' for m in medians)}")
    return "workers' own memory (USS, MiB) at its peak in each epoch, median over rounds: " + "; ".join(parts)


def children() -> list[Any]:
    """This process's descendants (psutil processes) but Python's fork server and
    resource tracker, which stay until it exits (the fork server's workers count)."""
    import psutil

    from queuetune.record.recorder import multiprocessing_helpers

    helpers = multiprocessing_helpers()
    return [child for child in psutil.Process().children(recursive=True) if child.pid not in helpers]


def check_no_children(name: str) -> None:
    """Stop before loader ``name`` runs if a child process of an earlier run is still here."""
    before = children()
    if before:
        raise RuntimeError(f"child processes left before {name} ran: {[p.pid for p in before]}")


def children_left_line(loaders: dict[str, dict[str, Any]]) -> str:
    """The table's line on the child processes each loader left after a run."""
    left = {name: r["children_left"] for name, r in loaders.items() if r["children_left"]}
    return "child processes left after a run: " + (
        ", ".join(f"{name} {n}" for name, n in left.items()) + " (ended by the benchmark)" if left else "none"
    )


def reap() -> int:
    """Wait up to 10 s for this process's children to end; end those left (they
    are the loader's) and return how many there were."""
    import psutil

    _, alive = psutil.wait_procs(children(), timeout=10)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(alive)
