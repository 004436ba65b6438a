"""What every benchmark prints about the machine it ran on."""

from __future__ import annotations

import heapq
import json
import os
import platform
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: How often :class:`Sampler` reads :func:`tree_memory`, in seconds.
# Seconds between readings of the process tree's memory. Reading a process's smaps_rollup
# holds its memory map's lock: a training process of 1 GiB read every 0.2 s on 2 cores
# took 3.4 s a step against 0.7 s (real_pipeline.py), so that benchmark reads every 0.5 s.
SAMPLE_EVERY = 0.2
SAMPLE_EVERY_TRAINING = 0.5
#: The loaders that short_epochs.py and real_pipeline.py hold the Prefetcher to (issue 39).
REFERENCES = ("torch", "torch-persistent", "torchdata.nodes")
#: ``prefetcher-fixed``'s depth.
FIXED_DEPTH = 24
#: What each Prefetcher row of :func:`epoch_loader` sets beyond the settings all share.
PREFETCHERS: dict[str, dict[str, Any]] = {
    "prefetcher": {},
    "prefetcher-unsampled": {"sample_memory": False},
    "prefetcher-fixed": {"adaptive": False, "depth": FIXED_DEPTH, "sample_memory": False},
    # Workers forked from a server process of their own, not from the training process (see real_pipeline.py).
    "prefetcher-forkserver": {"multiprocessing_context": "forkserver"},
}


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


def machine() -> str:
    """Architecture, cores and processor model."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores" + (f" ({model})" if model else "")


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


def chosen_loaders(parser: Any, text: str, known: tuple[str, ...]) -> list[str]:
    """``--loaders``: distinct names of ``known``, comma-separated (else the parser's error)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names or len(set(names)) != len(names):
        parser.error(f"--loaders: distinct names of {', '.join(known)}; got {text!r}")
    return names


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


def package_versions(*packages: str) -> dict[str, str]:
    """Python's version and each installed distribution's, by its name on the
    package index (``pillow``, ``torch``...), in the order given. A package
    that is importable but not installed (``PYTHONPATH=src``) gives its module's
    ``__version__`` with "(not installed)"; one that is neither, "absent".

    >>> package_versions("no-such-package-here")["no-such-package-here"]
    'absent'
    """
    import importlib
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version()}
    for name in packages:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            try:
                module = importlib.import_module({"pillow": "PIL"}.get(name, name).replace("-", "_"))
            except ImportError:
                versions[name] = "absent"
            else:
                versions[name] = f"{getattr(module, '__version__', '?')} (not installed)"
    return versions


def add_paired(comparison: dict[str, Any]) -> None:
    """Ratios of each round's tuned run to the default run of the same round,
    and their medians: the interleaved design's estimate, robust to drift over the
    rounds (the ratio of the medians is not)."""
    pairs = list(zip(comparison["runs"]["default"], comparison["runs"]["tuned"]))
    throughput = [t["throughput"] / d["throughput"] for d, t in pairs if d["throughput"]]
    peak = [t["peak_in_flight_bytes"] / d["peak_in_flight_bytes"] for d, t in pairs if d["peak_in_flight_bytes"]]
    comparison["paired_throughput_ratios"] = throughput
    comparison["paired_throughput_ratio"] = statistics.median(throughput) if throughput else None
    comparison["paired_peak_bytes_ratios"] = peak
    comparison["paired_peak_bytes_ratio"] = statistics.median(peak) if peak else None


def mib(value: float | None) -> str:
    """Bytes in MiB, one decimal, for a table ("n/a" for None)."""
    return "n/a" if value is None else f"{value / 2**20:.1f} MiB"


def target_lines(checks: list[dict[str, Any]]) -> list[str]:
    """A benchmark table's closing "Targets:" lines: each check's status (met,
    MISSED, or n/a where ``met`` is None), what it asks and its ``value``."""
    lines = ["Targets:"]
    for check in checks:
        status = "n/a   " if check["met"] is None else "met   " if check["met"] else "MISSED"
        value = check["value"]
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        lines.append(f"  {status} {check['target']}: {shown}")
    return lines


def throughput_target(name: str, comparison: dict[str, Any], least: float = 0.98) -> dict[str, Any]:
    """Issue 16's check of a tuner benchmark's final comparison: the tuned
    setting keeps ``least`` of the default's throughput by the median of the
    paired rounds (the ratio of medians is shown beside it). None (n/a) where
    the tuner kept the default: the comparison then runs one setting twice and
    measures only its own noise."""
    a, b = comparison["throughput_ratio"], comparison["paired_throughput_ratio"]
    rounds = comparison.get("paired_throughput_ratios") or []
    spread = f" (rounds {min(rounds):.3f} to {max(rounds):.3f})" if rounds else ""
    same = comparison["tuned"]["settings"] == comparison["default"]["settings"]
    return {
        "target": f"{name}: tuned throughput >= {least} x default (median of paired rounds)",
        "value": f"median of paired rounds {b:.3f}, ratio of medians {a:.3f}{spread}"
        + (" (the default kept: the same setting twice)" if same else ""),
        "met": None if same else b is not None and b >= least,
    }


def preamble(title: str, result: dict[str, Any]) -> list[str]:
    """A benchmark table's first lines: what ran, the versions, the machine and the date."""
    return [
        title,
        "versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()),
        f"machine: {result['machine']}; date: {result['date']}; took {result['seconds']:.0f} s",
        "",
    ]


def commit() -> dict[str, Any]:
    """The commit the benchmark ran at, and whether tracked files had changes
    beside it, where git can tell (nothing where it cannot: a copy without
    ``.git``, no git)."""
    root = Path(__file__).resolve().parents[1]

    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(["git", *argv], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if not head:
        return {}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": head.strip(), **({} if status is None else {"commit_dirty": bool(status.strip())})}


def publish(result: dict[str, Any], text: str, stem: str, as_json: bool, out: Path | None) -> None:
    """Print the table (or the JSON with ``as_json``); with ``out``, write
    ``<stem>.json`` and ``<stem>.txt`` into that folder as well, replacing the
    run before (git keeps the history; a file's name carries no run's story).
    The JSON gets the date (UTC) and the commit where the benchmark gave none."""
    stamp = {"date": datetime.now(UTC).isoformat(timespec="seconds"), **commit()}
    result = {**result, **{key: value for key, value in stamp.items() if key not in result}}
    print(json.dumps(result, indent=2) if as_json else text)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / f"{stem}.txt").write_text(text + "\n")


def depth_changes(loader: Any) -> list[int] | None:
    """A Prefetcher's depth as it changed over the run (its trace's depth marks,
    a repeat at each epoch's start left out); None for the other loaders."""
    if not hasattr(loader, "trace"):
        return None
    depths: list[int] = []
    for mark in loader.trace().marks:
        if mark.kind == "depth" and (not depths or mark.value != depths[-1]):
            depths.append(mark.value)
    return depths


def depths_text(row: dict[str, Any]) -> str:
    """The end of a run's progress line: its depths as they changed, where it has them (a Prefetcher's).

    >>> depths_text({"depths": [13, 20]}), depths_text({"depths": None})
    (', depths 13, 20', '')
    """
    depths = row.get("depths")
    return "" if depths is None else ", depths " + ", ".join(map(str, depths))


def rotated(items: list[Any], round_: int) -> list[Any]:
    """``items`` starting one later each round, so that none always runs first.

    >>> rotated(["a", "b", "c"], 4)
    ['b', 'c', 'a']
    """
    shift = round_ % len(items)
    return items[shift:] + items[:shift]


def interleaved_comparison(
    settings: dict[str, dict[str, Any]],
    rounds: int,
    run: Callable[[dict[str, Any]], dict[str, Any]],
    log: Callable[[int], None],
) -> dict[str, Any]:
    """``settings["default"]`` and ``settings["tuned"]``, each run once a round,
    the first of each round alternating (A B, B A, A B ...) so that neither
    always starts after the other's run: ``run(settings)`` gives a run's row (``throughput``,
    ``peak_in_flight_batches``, ``peak_in_flight_bytes``, ``input_bound_fraction``
    and what else the benchmark keeps); ``log(round)`` after each round. Returns
    the rows, each setting's summary (median throughput, highest peaks, median
    input-bound fraction) and the tuned/default ratios, medians and paired."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    names = list(settings)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            runs[name].append(run(settings[name]))
        log(round_ + 1)
    summary: dict[str, Any] = {"rounds": rounds, "runs": runs}
    for name, rows in runs.items():
        fractions = [r["input_bound_fraction"] for r in rows if r["input_bound_fraction"] is not None]
        summary[name] = {
            "settings": dict(settings[name]),
            "throughput": statistics.median(r["throughput"] for r in rows),
            "throughputs": [r["throughput"] for r in rows],
            "peak_in_flight_batches": max(r["peak_in_flight_batches"] for r in rows),
            "peak_in_flight_bytes": max(r["peak_in_flight_bytes"] for r in rows),
            "input_bound_fraction": statistics.median(fractions) if fractions else None,
        }
    d, t = summary["default"], summary["tuned"]
    summary["throughput_ratio"] = t["throughput"] / d["throughput"] if d["throughput"] else None
    summary["peak_bytes_ratio"] = (
        t["peak_in_flight_bytes"] / d["peak_in_flight_bytes"] if d["peak_in_flight_bytes"] else None
    )
    add_paired(summary)
    return summary


def throughput_ratios(comparison: dict[str, Any]) -> str:
    """The tuned/default throughput ratios of a comparison, for a table."""
    c = comparison
    return (
        f"throughput {c['throughput_ratio']:.3f} (paired rounds: median {c['paired_throughput_ratio']:.3f}, "
        + ", ".join(f"{x:.2f}" for x in c["paired_throughput_ratios"])
        + ")"
    )


def nodes_loader(batches: Any, map_fn: Callable[[Any], Any], workers: int) -> tuple[Any, Callable[[], None]]:
    """torchdata.nodes as the benchmarks build it: ``ParallelMapper(batches,
    map_fn, workers processes, in order, fork)`` then ``Prefetcher(2)`` in a
    ``Loader``; and what stops its threads and processes. ``batches``: a node
    of the lists of indices each batch is made of."""
    from torchdata.nodes import Loader, ParallelMapper
    from torchdata.nodes import Prefetcher as NodesPrefetcher

    mapper = ParallelMapper(
        batches,
        map_fn=map_fn,
        num_workers=workers,
        in_order=True,
        method="process",
        multiprocessing_context="fork",
    )
    prefetcher = NodesPrefetcher(mapper, prefetch_factor=2)
    return Loader(prefetcher), lambda: stop_nodes(prefetcher, mapper)


def stop_nodes(*nodes: Any) -> None:
    """Stop the threads and processes of torchdata.nodes now, rather than when the
    nodes are collected: each node's iterator chain (``_it``), its ``_shutdown``."""
    for node in nodes:
        inner = getattr(node, "_it", None)
        while inner is not None:
            shutdown = getattr(inner, "_shutdown", None)
            if shutdown is not None:
                shutdown()
            inner = getattr(inner, "_it", None)


class Collated:
    """torchdata.nodes' map function: the batch of samples at a list of indices, collated."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def __call__(self, indices: list[int]) -> Any:
        from torch.utils.data import default_collate

        return default_collate([self.data[i] for i in indices])


def epoch_loader(
    name: str, data: Any, batch: int, workers: int, pin_memory: bool = False
) -> tuple[Iterable[Any], Callable[[], None]]:
    """short_epochs.py's and real_pipeline.py's loader ``name`` over the
    map-style ``data``, built anew for a run, each with ``workers`` worker
    processes started by fork and a new shuffled order each epoch; and what
    stops all it runs:

    - ``torch``, ``torch-persistent``: ``DataLoader(data, batch, shuffle=True,
      num_workers=workers, persistent_workers=name == "torch-persistent",
      pin_memory=pin_memory)``; the persistent workers are shut down by the stop;
    - ``torchdata.nodes``: :func:`nodes_loader` of
      ``SamplerWrapper(BatchSampler(RandomSampler))`` and :class:`Collated`;
    - ``prefetcher``, ``prefetcher-unsampled``, ``prefetcher-fixed``, ``prefetcher-forkserver``:
      ``queuetune.Prefetcher(data, batch_size=batch, shuffle=True,
      mode="process", workers=workers, max_bytes="4GiB", multiprocessing_context="fork")``
      with what :data:`PREFETCHERS` sets; closed by the stop.
    """
    if name in ("torch", "torch-persistent"):
        from torch.utils.data import DataLoader

        loader: Any = DataLoader(
            data,
            batch_size=batch,
            shuffle=True,
            num_workers=workers,
            persistent_workers=name == "torch-persistent",
            pin_memory=pin_memory,
            multiprocessing_context="fork",
        )

        def close() -> None:
            iterator = getattr(loader, "_iterator", None)  # kept only with persistent workers
            if iterator is not None:
                iterator._shutdown_workers()
                loader._iterator = None

        return loader, close
    if name in PREFETCHERS:
        import queuetune

        prefetcher = queuetune.Prefetcher(
            data,
            batch_size=batch,
            shuffle=True,
            mode="process",
            workers=workers,
            max_bytes="4GiB",
            **{"multiprocessing_context": "fork", **PREFETCHERS[name]},
        )
        return prefetcher, prefetcher.close
    if name != "torchdata.nodes":
        raise ValueError(f"no loader named {name!r}")
    from torch.utils.data import BatchSampler, RandomSampler
    from torchdata.nodes import SamplerWrapper

    batches = SamplerWrapper(BatchSampler(RandomSampler(range(len(data))), batch, drop_last=False))
    return nodes_loader(batches, Collated(data), workers)


def summarize_epochs(runs: dict[str, list[dict[str, Any]]], rate: str, digits: int) -> dict[str, dict[str, Any]]:
    """Each loader's rows over the rounds: the median of ``rate`` (each round's
    rounded to ``digits``), the median first-batch wait over all epochs and
    rounds, the highest PSS peak and the median of the rounds' PSS medians, the
    highest unmapped /dev/shm, the children left; and ``x_best_reference``, the
    median ``rate`` over the best median of the :data:`REFERENCES` that ran."""
    summary = {}
    for name, rows in runs.items():
        peaks = [r["pss_peak"] for r in rows if r["pss_peak"] is not None]
        medians = [r["pss_median"] for r in rows if r["pss_median"] is not None]
        summary[name] = {
            rate: statistics.median(r[rate] for r in rows),
            "rounds": [round(r[rate], digits) for r in rows],
            "first_batch_wait_median": statistics.median(w for r in rows for w in r["first_batch_waits"]),
            "pss_peak": max(peaks) if peaks else None,
            "pss_median": statistics.median(medians) if medians else None,
            "unmapped_shm_peak": max((r["unmapped_shm_peak"] or 0) for r in rows),
            "children_left": sum(r["children_left"] for r in rows),
        }
    references = [summary[name][rate] for name in REFERENCES if name in summary]
    best = max(references) if references else None
    for s in summary.values():
        s["x_best_reference"] = s[rate] / best if best else None
    return summary


def issue39_targets(summary: dict[str, dict[str, Any]], unit: str) -> list[dict[str, Any]]:
    """The checks of the Prefetcher's defaults (``summary["prefetcher"]``, from
    :func:`summarize_epochs`): its throughput (in ``unit``) against the best
    reference's (issue 39), and its PSS peak against the DataLoader's, with and
    without persistent workers (issues 39 and 58: the tree holds no more than
    DataLoader's); n/a where either did not run."""
    ours = summary.get("prefetcher")
    ratio = ours["x_best_reference"] if ours else None
    checks = [
        {
            "target": f"prefetcher (defaults) {unit} >= 1.0 x the best of {', '.join(REFERENCES)}",
            "value": ratio if ratio is not None else "n/a",
            "met": None if ratio is None else ratio >= 1.0,
        }
    ]
    for name, said in (("torch", "persistent_workers=False"), ("torch-persistent", "persistent_workers=True")):
        theirs = summary.get(name)
        both = bool(ours and theirs and ours["pss_peak"] is not None and theirs["pss_peak"] is not None)
        checks.append(
            {
                "target": f"prefetcher (defaults) PSS peak <= {name}'s (DataLoader, {said})",
                "value": f"{mib(ours['pss_peak'])} vs {mib(theirs['pss_peak'])}" if both else "n/a",
                "met": ours["pss_peak"] <= theirs["pss_peak"] if both else None,
            }
        )
    return checks


def ceiling(loads: list[float], steps: list[float], depth: int, workers: int, warmup: int) -> float:
    """Batches per second of an ideal in-order loader, simulated (``ideal_in_order.py``):
    ``workers`` workers take the batches in order; batch ``i`` starts once a worker is
    free and batch ``i - depth`` is taken (``depth`` + 1 started and not released, with
    the one in the step) and takes ``loads[i]`` seconds; the consumer takes it once it
    is built and the step on the batch before (``steps[i - 1]``) has ended. Counted
    from batch ``warmup`` on.

    >>> ceiling([0.01] * 200, [0.001] * 200, depth=4, workers=1, warmup=20)  # one 10 ms build at a time
    100.0
    >>> ceiling([0.001] * 200, [0.005] * 200, depth=4, workers=4, warmup=20)  # the consumer is slower
    200.0
    """
    free = [0.0] * workers
    taken: list[float] = []
    for i, load in enumerate(loads):
        start = max(heapq.heappop(free), taken[i - depth] if i >= depth else 0.0)
        built = start + load
        heapq.heappush(free, built)
        taken.append(max(built, taken[-1] + steps[i - 1]) if taken else built)
    return round((len(taken) - 1 - warmup) / (taken[-1] - taken[warmup]), 1)
