"""A real input pipeline over several epochs, a new iterator each: JPEGs decoded
and augmented in worker processes, a ResNet trained on them; torch's
DataLoader (with and without persistent workers) and torchdata.nodes against
queuetune.Prefetcher (with and without its device stage), in throughput, in
the step and its hand-over, and in the real memory of the process tree.

Run: .venv/bin/python benchmarks/real_pipeline.py [--device cpu|cuda] [--loaders NAME,...]
         [--setting starved|model-bound] [--model resnet18|resnet50|resnet101]
         [--epoch-batches 20] [--epochs 3] [--batch 16] [--workers 2] [--size WxH]
         [--rounds 2] [--warmup-steps 3] [--json] [--out DIR]

- The setting (``--setting``): ``starved`` (the default), ResNet-18 on JPEGs of
  500x375, where on a GPU the decoding is the bottleneck; ``model-bound``,
  ResNet-50 on JPEGs of 160x120, where the GPU is (a note says so where a
  reference's input wait passes 10 %). ``--model`` and ``--size`` override it;
  the table's first line names it, and its results carry ``.model-bound``.

- The data: ``--epoch-batches * --batch`` JPEGs (320 at the defaults) of
  ``--size`` (the setting's; 500x375 is ImageNet's typical size; quality 90), made on the spot
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
- The model: ResNet-18, -50 or -101 (torchvision's layouts, 10 classes here,
  ``harness.resnets``), SGD with momentum,
  cross-entropy, one step per batch, built anew (seed 0) for each run. On
  CUDA: the model and each input in channels_last, inputs moved with
  ``non_blocking=True`` (but ``prefetcher-device``'s, already there), bf16 autocast, ``cudnn.benchmark`` on and
  ``torch.cuda.synchronize()`` after each step; on the CPU float32. Before
  each run's loader is built, ``--warmup-steps`` steps on a random batch of the
  same shape, so that the first steps' costs (cudnn's autotuning, the
  allocators' first blocks) fall outside every loader's timing.
- The consumer: ``for epoch in range(epochs): for x, y in loader: step``, a new
  iterator each epoch, as training does.
- The loaders (``--loaders``; by default all but the unsampled and fixed), each with
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
  depth's share of a gap to the fixed depth from the sampler's;
  ``prefetcher-device``: the defaults with ``device=--device`` (the device
  stage: pinned staging, copies ahead on a side stream, ``device_depth`` 2),
  skipped with a note on the CPU, which the stage does not copy to. Only the
  two torch loaders pin memory (on CUDA) otherwise.
- The hand-over per batch: taking a batch already built (a Prefetcher's own
  split, ``Report.handover``'s median; for the others, marked ``~``, the
  median time in ``next()`` after each epoch's first batch, which holds any
  wait for a build too) plus the step's copy to the device (the host's time in
  ``to()``; none for ``prefetcher-device``), and its share of the median step.
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
  references' images/s, and its PSS peak <= the DataLoader's (``torch``);
  (issue 62) ``prefetcher-device``'s median step <= the pinned DataLoader's,
  its hand-over <= 1 % of its step, its images/s >= 1.0 x the best reference.
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

from harness.device_targets import add_handover, issue62_targets
from harness.epochs import first_batches_text, issue39_targets, memory_text, run_rounds
from harness.loaders import FIXED_DEPTH, REFERENCES, chosen_loaders, depths_text
from harness.memory import SAMPLE_EVERY_TRAINING
from harness.pipeline_table import render
from harness.resnets import MODELS
from harness.results import machine, package_versions, publish
from harness.training import prepare, run, summarize

LOADERS = (
    "torch",
    "torch-persistent",
    "torchdata.nodes",
    "prefetcher",
    "prefetcher-forkserver",
    "prefetcher-unsampled",
    "prefetcher-fixed",
    "prefetcher-device",
)
DEFAULT_LOADERS = ("torch", "torch-persistent", "torchdata.nodes", "prefetcher", "prefetcher-forkserver")
DEFAULT_LOADERS += ("prefetcher-device",)
QUALITY = 90  # make_images' JPEG quality
#: Each setting's model and JPEG size, where --model and --size do not say.
SETTINGS = {"starved": ("resnet18", "500x375"), "model-bound": ("resnet50", "160x120")}
#: In the model-bound setting, the most input wait a reference may show for the model to be the bottleneck.
MODEL_BOUND_WAIT = 0.10


def run_apart(name: str, folder: str, size: str, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`run` in a new process of this script: what one run leaves in its
    process (allocators, threads, helper processes) is none of the next one's."""
    command = [sys.executable, __file__, "--one", name, "--loaders", name, "--folder", folder, "--size", size]
    command += ["--device", args.device]
    for option in ("setting", "model", "epoch_batches", "epochs", "batch", "workers", "warmup_steps"):
        command += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: its run ended with exit code {done.returncode}")
    return json.loads(done.stdout.splitlines()[-1])


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
    parser.add_argument("--setting", default="starved", choices=tuple(SETTINGS), help="the model and JPEG size")
    parser.add_argument("--model", choices=MODELS, help="the model trained (default: the setting's)")
    parser.add_argument(
        "--loaders", default=",".join(DEFAULT_LOADERS), help="comma-separated, of: " + ", ".join(LOADERS)
    )
    parser.add_argument("--epoch-batches", type=int, default=20, help="batches an epoch: the dataset is this x --batch")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--size", help="the JPEGs' WIDTHxHEIGHT (default: the setting's)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup-steps", type=int, default=3, help="model steps on a random batch before each run")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="write real_pipeline[_cuda][.model-bound].json and .txt here")
    # How each run is made: this script again, in a new process, for one loader over the JPEGs in a folder.
    parser.add_argument("--one", choices=LOADERS, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    model, size = SETTINGS[args.setting]
    args.model, args.size = args.model or model, args.size or size
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
    add_handover(summary, runs)
    waits = {name: summary[name]["input_wait_fraction"] for name in REFERENCES if name in summary}
    if args.setting == "model-bound" and any(wait > MODEL_BOUND_WAIT for wait in waits.values()):
        shown = ", ".join(f"{name} {wait:.1%}" for name, wait in waits.items())
        notes.append(f"not model-bound here: input wait {shown} (a larger --model, or a smaller --size)")
    result: dict[str, Any] = {
        "benchmark": "real_pipeline",
        "machine": machine(),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "CPU",
        "versions": package_versions("torch", "torchdata", "pillow", "numpy", "queuetune"),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "settings": {
            "setting": args.setting,
            "model": args.model,
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
        "targets": issue39_targets(summary, "images/s") + issue62_targets(summary),
    }
    stem = "real_pipeline" if args.device == "cpu" else f"real_pipeline_{args.device}"
    stem += "" if args.setting == "starved" else f".{args.setting}"
    publish(result, render(result), stem, args.json, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
