"""Short epochs, a new iterator each: what a training loop pays at every epoch
start, and the real memory of the process tree; torch's DataLoader (with and
without persistent workers) and torchdata.nodes against queuetune.Prefetcher.

Run: .venv/bin/python benchmarks/short_epochs.py [--loaders NAME,...] [--workers 12]
         [--batch 32] [--epoch-batches 23] [--epochs 4] [--rounds 2] [--build-ms 8]
         [--jitter 0] [--step-ms 14] [--shape 3,64,64] [--json] [--out DIR]

The GPU machine's case of design.md ("What a real GPU showed": the defaults at
0.52-0.60 x the best DataLoader in 23-batch epochs), reproduced on 2 cores:

- The data: ``--epoch-batches * --batch`` samples (736), each a new float32
  array of ``--shape`` (3x64x64: 48 KiB, so 1.5 MiB a batch of 32) and an int
  label, built in ``--build-ms`` of ``time.sleep`` (an I/O-like build that holds
  no CPU, so 12 workers need not 12 cores): 256 ms a batch of 32. Samples are
  collated into batches in the workers. With ``--jitter SIGMA`` each sample's
  build is its own multiple of that, a lognormal factor of that sigma drawn
  once per sample (seed 1) and scaled to a mean of 1, as JPEG decodes vary
  with the files' sizes: batches then finish out of turn, and in order the
  ones built behind a slow batch wait for it (the GPU machine's case, where
  the defaults ran 0.92 x a fixed depth of 24 until the depth controller
  counted workers idle for the depth; ``--jitter 0.7``: ``short_epochs.jitter``).
- The consumer: ``for epoch in range(epochs): for batch in loader: step``, a new
  iterator each epoch, the step a ``time.sleep(--step-ms)`` (a GPU step holds
  no CPU).
- The loaders (``--loaders``, by default all), each with ``--workers`` worker
  processes (fork), each built anew for each run and closed after it:
  ``torch``: ``DataLoader(dataset, batch_size, shuffle=True, num_workers,
  persistent_workers=False)`` (prefetch_factor 2); ``torch-persistent``: the
  same with ``persistent_workers=True`` (its workers stopped after the run);
  ``torchdata.nodes`` (``harness.loaders.epoch_loader`` builds all of these, for
  real_pipeline.py too): ``ParallelMapper(batches of indices, map_fn=load and
  collate, num_workers, in_order=True, method="process")`` ->
  ``Prefetcher(2)`` -> ``Loader``, the batches of indices
  from ``SamplerWrapper(BatchSampler(RandomSampler))`` so that each epoch is
  shuffled anew as the others' are (``iter(Loader)`` resets the root node each
  epoch, and the ParallelMapper starts new worker processes), stopped with
  ``stop_nodes`` after the run; ``prefetcher``: ``queuetune.Prefetcher(dataset,
  batch_size, shuffle=True, mode="process", workers, max_bytes="4GiB",
  multiprocessing_context="fork")`` with its other defaults, closed after the
  run (``with``); ``prefetcher-unsampled``: the same with
  ``sample_memory=False`` (what sampling the workers' memory costs);
  ``prefetcher-fixed``: the same with ``adaptive=False, depth=24,
  sample_memory=False`` (a reference: the data path at a fixed depth).
- Throughput: batches per second over the whole run, epoch starts included:
  ``epochs * epoch-batches`` over the time from just before the first epoch's
  ``iter()`` (the ``for`` loop's start) to the end of the last batch's step in
  the last epoch. Within that span: every epoch's ``iter()`` (worker starts,
  where a loader starts workers), every wait for a batch, every step, and the
  end of each epoch but the last (the ``StopIteration`` of epochs 1 to E-1,
  where a loader stops its workers); outside it: building the loader object
  (no worker starts there for any of these loaders), the last epoch's
  ``StopIteration`` and closing the loader. The loaders interleaved for
  ``--rounds`` rounds, the order rotated one each round; the median over
  rounds, and its ratio to the best median of the references (``torch``,
  ``torch-persistent``, ``torchdata.nodes``, those that ran). Also each epoch's
  wait from ``iter()`` to its first batch (the median over epochs and rounds).
- Memory: ``harness.memory.tree_memory()``: the PSS of this process and all its
  descendants, plus the bytes of this tree's files in /dev/shm that none of its
  processes maps; sampled every 0.5 s by a thread of this process while the
  loader runs (from just before the first ``iter()`` to the end of the last
  epoch), the peak and the median of the samples; the highest peak over rounds
  and the median of the rounds' medians. The same measure of this process
  alone before each run (no loader built yet) is shown as the floor. The sampler costs CPU itself (each
  sample reads /proc for 13 processes, some ms on 2 cores): the same sampler
  at the same rate for every loader, so the cost is the same for all rows. The
  loaders fork their workers while the sampler thread runs.
- Between runs the benchmark checks (psutil) that no child process is left:
  it waits up to 10 s for the loader's children to end, records how many did
  not, and ends those itself.
- Targets (issue 39): the Prefetcher's defaults at >= 1.0 x the best of the
  references' batches/s, and its PSS peak <= the DataLoader's (``torch``).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from harness.epochs import first_batches_text, issue39_targets, memory_text, run_rounds, summarize_epochs
from harness.loaders import FIXED_DEPTH, chosen_loaders, depth_changes, depths_text, epoch_loader
from harness.memory import SAMPLE_EVERY, Sampler, check_no_children, children_left_line, growth_line, reap, tree_memory
from harness.results import machine, mib, package_versions, preamble, publish, target_lines

LOADERS = ("torch", "torch-persistent", "torchdata.nodes", "prefetcher", "prefetcher-unsampled", "prefetcher-fixed")
DEFAULT_SHAPE = (3, 64, 64)


class Samples:
    """Sample ``i``: a new float32 array of ``shape`` and a label, after a sleep of
    ``seconds``, times a factor of its own with ``jitter`` (a lognormal of that
    sigma drawn once per sample, seed 1, scaled to a mean of 1: as a JPEG's
    decode takes as long as its file is large)."""

    def __init__(self, length: int, shape: tuple[int, ...], seconds: float, jitter: float = 0.0) -> None:
        self.length = length
        factors = np.random.default_rng(1).lognormal(0.0, jitter, length) if jitter else np.ones(length)
        self.seconds = (seconds * factors / factors.mean()).tolist()
        self.image = np.random.default_rng(0).random(shape, dtype=np.float32)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        time.sleep(self.seconds[i])
        return self.image + np.float32(i % 7), i % 10


def run(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run of ``args.epochs`` epochs of a loader built for it; its row."""
    check_no_children(name)
    alone = tree_memory()["total"]  # this process alone, before the loader is built
    data = Samples(args.epoch_batches * args.batch, args.shape, args.build_ms / 1e3, args.jitter)
    step = args.step_ms / 1e3
    loader, close = epoch_loader(name, data, args.batch, args.workers)
    firsts, counts = [], []
    try:
        with Sampler() as sampler:
            started = time.perf_counter()
            for epoch in range(args.epochs):
                sampler.epoch = epoch
                began = time.perf_counter()
                count = 0
                for batch in loader:
                    if count == 0:
                        firsts.append(time.perf_counter() - began)
                    time.sleep(step)
                    count += 1
                    del batch
                    done = time.perf_counter()
                counts.append(count)
            ended = time.perf_counter()
        depths = depth_changes(loader)
    finally:
        close()
        del loader
        gc.collect()
    left = reap()
    if any(count != args.epoch_batches for count in counts):
        raise RuntimeError(f"{name}: epochs of {counts} batches, not {args.epoch_batches}")
    span = done - started
    return {
        "batches_per_s": args.epochs * args.epoch_batches / span,
        "seconds": span,
        "seconds_to_loop_end": ended - started,
        "first_batch_waits": firsts,
        "pss_before": alone,
        **sampler.figures(),
        "children_left": left,
        "depths": depths,
    }


def jittered(settings: dict[str, Any]) -> str:
    """How the sample builds vary, for the title."""
    sigma = settings.get("jitter", 0.0)
    return f", each sample's x its own lognormal factor of sigma {sigma:g}, mean 1" if sigma else ""


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    shape = "x".join(map(str, s["shape"]))
    lines = [
        *preamble(
            f"Short epochs: {s['epochs']} epochs of {s['epoch_batches']} batches, a new iterator each; batches of "
            f"{s['batch']} samples of {shape} float32 ({mib(result['batch_bytes'])}), each sample built in "
            f"{s['build_ms']:g} ms (sleeps{jittered(s)}), steps of {s['step_ms']:g} ms (sleeps), {s['workers']} worker "
            f"processes (fork); {s['rounds']} interleaved rounds",
            result,
        ),
        "batches/s: whole run, epoch starts included; x best ref: to the best median of torch, torch-persistent, "
        "torchdata.nodes; first batch: median wait from iter() to an epoch's first batch; PSS: the process tree's "
        f"PSS + its unmapped /dev/shm files, sampled every {SAMPLE_EVERY} s (peak: highest over rounds; median: of "
        "the rounds' medians)",
        "",
        f"{'loader':<21} {'batches/s per round':<22} {'median':>7} {'x best ref':>11} {'first batch':>12} "
        f"{'PSS peak':>12} {'PSS median':>12}",
    ]
    for name, r in result["loaders"].items():
        ratio = "n/a" if r["x_best_reference"] is None else f"{r['x_best_reference']:.3f}"
        lines.append(
            f"{name:<21} {', '.join(f'{x:.2f}' for x in r['rounds']):<22} {r['batches_per_s']:>7.2f} {ratio:>11} "
            f"{r['first_batch_wait_median'] * 1e3:>9.0f} ms {mib(r['pss_peak']):>12} {mib(r['pss_median']):>12}"
        )
    before = [r["pss_before"] for rows in result["runs"].values() for r in rows]
    lines.append(f"PSS of this process alone before each run (no loader): {mib(min(before))} to {mib(max(before))}")
    lines.append(growth_line(result["loaders"], result["runs"]))
    lines.append(children_left_line(result["loaders"]))
    lines += ["", *target_lines(result["targets"])]
    return "\n".join(lines)


def said(row: dict[str, Any]) -> str:
    """A run's progress line."""
    return (
        f"{row['batches_per_s']:.2f} batches/s, first batches {first_batches_text(row)} ms, {memory_text(row)}, "
        f"children left {row['children_left']}" + depths_text(row)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated, of: " + ", ".join(LOADERS))
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--epoch-batches", type=int, default=23)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--build-ms", type=float, default=8.0, help="milliseconds to build a sample (a sleep)")
    parser.add_argument("--step-ms", type=float, default=14.0, help="milliseconds of the consumer's step (a sleep)")
    parser.add_argument(
        "--jitter", type=float, default=0.0, help="each sample's build time x its own lognormal factor of this sigma"
    )
    parser.add_argument(
        "--shape", default=",".join(map(str, DEFAULT_SHAPE)), help="a sample's shape (float32), comma-separated"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--out",
        type=Path,
        help="write short_epochs.json and .txt here (.jitter with --jitter, .shape-CxHxW with another --shape)",
    )
    args = parser.parse_args()
    names = chosen_loaders(parser, args.loaders, LOADERS)
    try:
        args.shape = tuple(int(n) for n in args.shape.split(","))
    except ValueError:
        parser.error(f"--shape: integers separated by commas, got {args.shape!r}")
    if min(args.workers, args.batch, args.epoch_batches, args.epochs, args.rounds, *args.shape) < 1:
        parser.error("--workers, --batch, --epoch-batches, --epochs, --rounds and --shape must be at least 1")
    if args.build_ms < 0 or args.step_ms < 0 or args.jitter < 0:
        parser.error("--build-ms, --step-ms and --jitter must not be below 0")
    ordered = [name for name in LOADERS if name in names]
    # Every loader's modules imported before the first run, so that each run forks the same process.
    import torch.utils.data  # noqa: F401
    import torchdata.nodes  # noqa: F401

    import queuetune  # noqa: F401

    # torch's note, every run, that more workers than cores may be slow: here they sleep.
    warnings.filterwarnings("ignore", message="This DataLoader will create")

    started = time.monotonic()
    runs = run_rounds(ordered, args.rounds, lambda name: run(name, args), said)
    summary = summarize_epochs(runs, "batches_per_s", 2)
    result = {
        "benchmark": "short_epochs",
        "machine": machine(),
        "versions": package_versions("torch", "torchdata", "numpy", "queuetune"),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "settings": {
            "loaders": ordered,
            "workers": args.workers,
            "batch": args.batch,
            "epoch_batches": args.epoch_batches,
            "epochs": args.epochs,
            "rounds": args.rounds,
            "build_ms": args.build_ms,
            "step_ms": args.step_ms,
            "jitter": args.jitter,
            "shape": list(args.shape),
            "fixed_depth": FIXED_DEPTH,
            "sample_every_s": SAMPLE_EVERY,
        },
        "batch_bytes": args.batch * (int(np.prod(args.shape)) * 4 + 8),
        "seconds": time.monotonic() - started,
        "loaders": summary,
        "runs": runs,
        "targets": issue39_targets(summary, "batches/s"),
    }
    stem = "short_epochs" + (".jitter" if args.jitter else "")
    if args.shape != DEFAULT_SHAPE:
        stem += ".shape-" + "x".join(map(str, args.shape))
    publish(result, render(result), stem, args.json, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
