"""A real input pipeline over several epochs, a new iterator each: JPEGs decoded
and augmented in worker processes, a ResNet-18 trained on them; torch's
DataLoader (with and without persistent workers) and torchdata.nodes against
queuetune.Prefetcher, in throughput and in the real memory of the process tree.

Run: .venv/bin/python benchmarks/real_pipeline.py [--device cpu|cuda] [--loaders NAME,...]
         [--epoch-batches 20] [--epochs 3] [--batch 16] [--workers 2] [--size 500x375]
         [--rounds 2] [--warmup-steps 3] [--json] [--out DIR]

- The data: ``--epoch-batches * --batch`` JPEGs (320 at the defaults) of
  ``--size`` (500x375, ImageNet's typical size; quality 90), made on the spot
  with Pillow from seeded noise and shapes (``examples/images.py``'s
  ``make_images``), in a temporary folder. The dataset is exactly that many
  batches, so every loader's epoch is ``--epoch-batches`` batches with no
  batch dropped (the benchmark stops with an error if an epoch has another
  count).
- A sample: the JPEG decoded with Pillow, then the transforms of torchvision's
  ImageNet recipe written with Pillow and torch in ``examples/images.py``
  (torchvision is not used: its builds for torch 2.13.0 do not load against
  the CPU build of torch): ``RandomResizedCrop(224)`` (scale 0.08-1, ratio
  3/4-4/3, bilinear), a horizontal flip with p=0.5, ``ToTensor`` (uint8 HWC to
  float CHW in [0, 1]), ``Normalize`` with ImageNet's mean and std: 588 KiB of
  float32 and an int label. Samples are collated into batches in the workers.
- The model: ResNet-18 (torchvision's layout: 7x7 stem, four stages of two
  basic blocks, 64-512 channels, 10 classes here), SGD with momentum,
  cross-entropy, one step per batch, built anew (seed 0) for each run. On
  CUDA: the model and each input in channels_last, inputs moved with
  ``non_blocking=True``, bf16 autocast, ``cudnn.benchmark`` on and
  ``torch.cuda.synchronize()`` after each step; on the CPU float32. Before
  each run's loader is built, ``--warmup-steps`` steps on a random batch of the
  same shape, so that the first steps' costs (cudnn's autotuning, the
  allocators' first blocks) fall outside every loader's timing.
- The consumer: ``for epoch in range(epochs): for x, y in loader: step``, a new
  iterator each epoch, as training does.
- The loaders (``--loaders``; by default the first four), each with
  ``--workers`` worker processes started by fork, each built anew for each run
  and closed after it, exactly as short_epochs.py builds them
  (``harness.loaders.epoch_loader``): ``torch``: ``DataLoader(dataset, batch_size,
  shuffle=True, num_workers, persistent_workers=False, pin_memory=(device is
  cuda))`` (prefetch_factor 2); ``torch-persistent``: the same with
  ``persistent_workers=True`` (its workers shut down after the run);
  ``torchdata.nodes``: ``ParallelMapper(batches of indices, map_fn=load and
  collate, num_workers, in_order=True, method="process")`` -> ``Prefetcher(2)``
  -> ``Loader``, the batches of indices from
  ``SamplerWrapper(BatchSampler(RandomSampler))`` so that each epoch is
  shuffled anew (skipped, with a note, where torchdata does not import);
  ``prefetcher``: ``queuetune.Prefetcher(dataset, batch_size, shuffle=True,
  mode="process", workers, max_bytes="4GiB", multiprocessing_context="fork")``
  with all its other defaults (adaptive depth, memory sampling on);
  ``prefetcher-forkserver``: the same with ``multiprocessing_context="forkserver"``,
  its workers forked from a server process of their own (each imports what the
  dataset needs, torch here) rather than from the training process, whose memory
  a forked worker keeps as it was at the fork for as long as it lives;
  ``prefetcher-unsampled`` and ``prefetcher-fixed`` (not run unless named):
  the same with ``sample_memory=False`` (what sampling the workers' memory
  costs), and with ``adaptive=False, depth=24, sample_memory=False``, a
  reference for the data path at a fixed depth; the two apart tell the
  depth's share of a gap to the fixed depth from the sampler's. Only the two
  torch loaders pin memory (on CUDA).
- Throughput: images per second over the whole run, epoch starts included:
  ``epochs * epoch-batches * batch`` over the time from just before the first
  epoch's ``iter()`` (the ``for`` loop's start) to the end of the last step
  (its ``synchronize()`` on CUDA). Within that span: every epoch's ``iter()``
  (worker starts, where a loader starts workers), every wait for a batch,
  every step, the end of each epoch but the last; outside it: building the
  loader object, the warm-up steps, the last epoch's ``StopIteration`` and
  closing the loader. The input wait: the part of that span the loop spent
  outside its steps (from the end of one step, or the span's start, to the
  next batch in hand: epoch ends and starts included), over the span; the
  first batch: each epoch's wait from ``iter()`` to its first batch, the median
  over epochs and rounds; the step: the median step (each step's seconds are in
  the JSON's runs). A step's time includes what the loader's processes cost it
  on the same cores: on 2 cores the first step after a loader forks its
  workers took about 1 s against 0.35 s (batch 8; the workers starting, and
  copy-on-write after the fork), once an epoch for a loader that starts
  workers each epoch, once a run for one that keeps them. The loaders
  interleaved for ``--rounds`` rounds, the order rotated one each round; the
  median over rounds, and its ratio to the best median of the references
  (``torch``, ``torch-persistent``, ``torchdata.nodes``, those that ran).
- Memory, as short_epochs.py measures it: ``harness.memory.tree_memory()``, the PSS of
  this process and all its descendants plus the bytes of this tree's files in
  /dev/shm that none of its processes maps, sampled every 0.5 s by a thread
  (``harness.memory.Sampler``) from just before the first ``iter()`` to the end of the
  last epoch; the highest peak over rounds and the median of the rounds'
  medians. The same measure of this process alone (the model built and warmed
  up, no loader yet) is shown as the floor. The sampler costs CPU itself (about
  0.1 s a sample on 2 cores), the same for every loader. On CUDA, torch's cached GPU and
  pinned host memory is emptied after each run, so that one loader's pinned
  batches do not stay in the next one's PSS. Also the most samples started
  (counted as each sample's load begins, in whichever process loads it) and not
  yet released (the step loop releases a batch's samples once its step is
  done), the highest over rounds, in batches and in the bytes of those decoded
  samples; the Prefetcher's count includes the one sample its worker builds to
  guess a batch's size before the first batch.
- Each run is made in a new Python process (this script again, with the
  loader's name and the JPEGs' folder), which builds the model, warms it up,
  measures itself alone, runs the loader and prints its row, so that no run
  starts from what another loader's run left in the process (its allocators,
  threads, helper processes). The process alone before a run still varies
  from run to run (755-889 MiB with 20-batch epochs), the model's own doing:
  compare a loader's figures over its rounds.
- Between runs the benchmark checks (psutil) that no child process is left:
  it waits up to 10 s for the loader's children to end, records how many did
  not, and ends those itself.
- Targets (issue 39): the Prefetcher's defaults at >= 1.0 x the best of the
  references' images/s, and its PSS peak <= the DataLoader's (``torch``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from images import ImageFolder, make_images, train_transform

from harness.epochs import first_batches_text, issue39_targets, memory_text, run_rounds
from harness.loaders import FIXED_DEPTH, chosen_loaders, depths_text
from harness.memory import (
    SAMPLE_EVERY_TRAINING,
    children_left_line,
    growth_line,
)
from harness.results import machine, mib, package_versions, preamble, publish, target_lines
from harness.training import prepare, run, summarize

LOADERS = (
    "torch",
    "torch-persistent",
    "torchdata.nodes",
    "prefetcher",
    "prefetcher-forkserver",
    "prefetcher-unsampled",
    "prefetcher-fixed",
)
DEFAULT_LOADERS = ("torch", "torch-persistent", "torchdata.nodes", "prefetcher", "prefetcher-forkserver")
QUALITY = 90  # make_images' JPEG quality


def run_apart(name: str, folder: str, size: str, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`run` in a new process of this script: what one run leaves in its
    process (allocators, threads, helper processes) is none of the next one's."""
    command = [sys.executable, __file__, "--one", name, "--folder", folder, "--size", size, "--device", args.device]
    for option in ("epoch_batches", "epochs", "batch", "workers", "warmup_steps"):
        command += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: its run ended with exit code {done.returncode}")
    return json.loads(done.stdout.splitlines()[-1])


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    width = max(len("loader"), *map(len, result["loaders"]))
    lines = [
        *preamble(
            f"Real pipeline: {s['epochs']} epochs of {s['epoch_batches']} batches, a new iterator each; JPEG "
            f"{s['size'][0]}x{s['size'][1]} (quality {s['quality']}) -> RandomResizedCrop(224), flip, ToTensor, "
            f"Normalize, batches of {s['batch']} ({mib(result['sample_bytes'] * s['batch'])}) -> ResNet-18 training "
            f"on {result['device']}; {s['workers']} worker processes (fork); {s['rounds']} interleaved rounds, "
            f"{s['warmup_steps']} model warm-up steps before each run",
            result,
        ),
        "images/s: whole run, epoch starts included; x best ref: to the best median of torch, torch-persistent, "
        "torchdata.nodes; input wait: the run's time outside the steps; step: median step; first batch: median "
        "wait from iter() to an epoch's first batch; PSS: the process tree's PSS + its unmapped /dev/shm files, "
        f"sampled every {s['sample_every_s']} s (peak: highest over rounds; median: of the rounds' medians); "
        "started: most samples started and not yet released (batches)",
        "",
        f"{'loader':<{width}} {'images/s per round':<20} {'median':>7} {'x best ref':>11} {'input wait':>11} "
        f"{'step':>8} {'first batch':>12} {'PSS peak':>12} {'PSS median':>12} {'started':>8}",
    ]
    for name, r in result["loaders"].items():
        ratio = "n/a" if r["x_best_reference"] is None else f"{r['x_best_reference']:.3f}"
        lines.append(
            f"{name:<{width}} {', '.join(f'{x:.1f}' for x in r['rounds']):<20} {r['images_per_s']:>7.1f} {ratio:>11} "
            f"{r['input_wait_fraction']:>11.1%} {r['step_median_s'] * 1e3:>5.0f} ms "
            f"{r['first_batch_wait_median'] * 1e3:>9.0f} ms {mib(r['pss_peak']):>12} {mib(r['pss_median']):>12} "
            f"{r['peak_started_batches']:>8.2f}"
        )
    before = [r["pss_before"] for rows in result["runs"].values() for r in rows]
    lines.append(
        f"PSS of this process alone before each run (model built, no loader): {mib(min(before))} to {mib(max(before))}"
    )
    lines.append(growth_line(result["loaders"], result["runs"]))
    lines.append(children_left_line(result["loaders"]))
    for note in result["notes"]:
        lines.append(f"note: {note}")
    lines += ["", *target_lines(result["targets"])]
    return "\n".join(lines)


def said(row: dict[str, Any]) -> str:
    """A run's progress line."""
    return (
        f"{row['images_per_s']:.1f} images/s, input wait {row['input_wait_fraction']:.1%}, step "
        f"{row['step_median_s'] * 1e3:.0f} ms, first batches {first_batches_text(row)} ms, {memory_text(row)}, "
        f"started {row['peak_started_samples']} samples, children left {row['children_left']}" + depths_text(row)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--loaders", default=",".join(DEFAULT_LOADERS), help="comma-separated, of: " + ", ".join(LOADERS)
    )
    parser.add_argument("--epoch-batches", type=int, default=20, help="batches an epoch: the dataset is this x --batch")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--size", default="500x375", help="the JPEGs' WIDTHxHEIGHT")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup-steps", type=int, default=3, help="model steps on a random batch before each run")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="write real_pipeline[_cuda].json and .txt into this folder")
    # How each run is made: this script again, in a new process, for one loader over the JPEGs in a folder.
    parser.add_argument("--one", choices=LOADERS, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = args.size
    names = chosen_loaders(parser, args.loaders, LOADERS)
    try:
        width, height = (int(n) for n in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size: WIDTHxHEIGHT, got {args.size!r}")
    if min(width, height) < 48:
        parser.error("--size: at least 48x48 (make_images draws shapes up to 40 pixels in from the edges)")
    args.size = (width, height)
    if min(args.workers, args.batch, args.epoch_batches, args.epochs, args.rounds) < 1:
        parser.error("--workers, --batch, --epoch-batches, --epochs and --rounds must be at least 1")
    if args.warmup_steps < 0:
        parser.error("--warmup-steps must not be below 0")
    import torch

    notes = prepare(parser, names, args.device)
    if args.one is not None:
        data = ImageFolder(args.folder, train_transform())
        print(json.dumps(run(args.one, data, tuple(data[0][0].shape), args)))
        return 0
    if not names:
        parser.error("--loaders: none of them can run here")
    ordered = [name for name in LOADERS if name in names]

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="queuetune-jpegs-") as folder:
        count = args.epoch_batches * args.batch
        making = time.perf_counter()
        make_images(Path(folder), count, size=args.size)
        print(f"{count} JPEGs of {width}x{height} made in {time.perf_counter() - making:.1f} s", file=sys.stderr)
        data = ImageFolder(folder, train_transform())
        sample_bytes = int(data[0][0].nbytes) + 8  # and its label, collated as int64
        runs = run_rounds(ordered, args.rounds, lambda name: run_apart(name, folder, size, args), said)
    summary = summarize(runs, args.batch, sample_bytes)
    result: dict[str, Any] = {
        "benchmark": "real_pipeline",
        "machine": machine(),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "CPU",
        "versions": package_versions("torch", "torchdata", "pillow", "numpy", "queuetune"),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "settings": {
            "loaders": ordered,
            "epoch_batches": args.epoch_batches,
            "epochs": args.epochs,
            "batch": args.batch,
            "workers": args.workers,
            "size": list(args.size),
            "quality": QUALITY,
            "rounds": args.rounds,
            "warmup_steps": args.warmup_steps,
            "device": args.device,
            "fixed_depth": FIXED_DEPTH,
            "sample_every_s": SAMPLE_EVERY_TRAINING,
        },
        "sample_bytes": sample_bytes,
        "seconds": time.monotonic() - started,
        "loaders": summary,
        "runs": runs,
        "notes": notes,
        "targets": issue39_targets(summary, "images/s"),
    }
    stem = "real_pipeline" if args.device == "cpu" else f"real_pipeline_{args.device}"
    publish(result, render(result), stem, args.json, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
