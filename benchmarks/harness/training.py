"""real_pipeline.py's run: a ResNet trained on decoded JPEGs for some epochs over a
loader built for the run, each sample's load counted, each batch's take and copy to the
device timed, the process tree's memory sampled; and the rounds summed up per loader."""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from typing import Any

from images import ImageFolder

from harness.epochs import summarize_epochs
from harness.loaders import ON_DEVICE, depth_changes, epoch_loader
from harness.memory import (
    SAMPLE_EVERY_TRAINING,
    Counted,
    Sampler,
    check_no_children,
    reap,
    tree_memory,
)
from harness.resnets import model_named


class CountedImages:
    """The images, each sample's load counted as it begins (in whichever process
    loads it: the counter is shared with forked workers)."""

    def __init__(self, data: ImageFolder, counted: Counted) -> None:
        self.data, self.counted = data, counted

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        self.counted.start()
        return self.data[i]


class Trainer:
    """The model ``model`` trained one step per batch on ``device``, built anew (seed 0).
    With ``on_device``, each batch arrives on the device already (the Prefetcher's
    device stage) and the step copies nothing; otherwise the step copies it there
    and ``copies`` holds each copy's seconds (the host's: the calls to ``to()``)."""

    def __init__(self, device: str, model: str = "resnet18", on_device: bool = False) -> None:
        import torch
        from torch import nn

        torch.manual_seed(0)
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.on_device = on_device
        built = model_named(model).to(self.device)
        self.model = (built.to(memory_format=torch.channels_last) if self.cuda else built).train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        self.copies: list[float] = []

    def step(self, x: Any, y: Any, timed: bool = True) -> None:
        import torch

        if self.on_device and timed:
            if any(not isinstance(t, torch.Tensor) or t.device.type != self.device.type for t in (x, y)):
                raise RuntimeError(f"the device stage handed over a batch that is not on {self.device}")
            self.copies.append(0.0)
        else:
            copying = time.perf_counter()
            x = torch.as_tensor(x).to(self.device, non_blocking=True)
            y = torch.as_tensor(y).to(self.device, non_blocking=True)
            if timed:
                self.copies.append(time.perf_counter() - copying)
        if self.cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cuda):
            loss = self.loss_fn(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.cuda:
            torch.cuda.synchronize()

    def warm_up(self, steps: int, batch: int, shape: tuple[int, ...]) -> None:
        """``steps`` steps on a random batch of ``batch`` samples of ``shape``."""
        import torch

        x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))
        for _ in range(steps):
            self.step(x, y, timed=False)


def host_cache_emptier() -> Any:
    """What gives back torch's cached pinned host memory: ``torch.accelerator``'s
    ``empty_host_cache`` (newer torch), else ``torch._C._host_emptyCache`` (CUDA
    builds), else None."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    return getattr(accelerator, "empty_host_cache", None) or getattr(torch._C, "_host_emptyCache", None)


def empty_caches(device: str) -> None:
    """On CUDA, give back torch's cached GPU memory and its cached pinned host memory."""
    if device != "cuda":
        return
    import torch

    torch.cuda.empty_cache()
    emptier = host_cache_emptier()
    if emptier is not None:
        emptier()


def run(name: str, data: ImageFolder, shape: tuple[int, ...], args: argparse.Namespace) -> dict[str, Any]:
    """One run of ``args.epochs`` epochs of a loader built for it; its row."""
    check_no_children(name)
    trainer = Trainer(args.device, args.model, on_device=name in ON_DEVICE)
    trainer.warm_up(args.warmup_steps, args.batch, shape)
    alone = tree_memory()["total"]  # this process alone: the model built and warmed up, no loader yet
    counted = Counted("forkserver" if name == "prefetcher-forkserver" else "fork")
    cuda = args.device == "cuda"
    loader, close = epoch_loader(
        name, CountedImages(data, counted), args.batch, args.workers, pin_memory=cuda, device=args.device
    )
    firsts, counts, steps, takes = [], [], [], []
    waited = 0.0
    try:
        with Sampler(SAMPLE_EVERY_TRAINING) as sampler:
            started = done = time.perf_counter()
            for epoch in range(args.epochs):
                sampler.epoch = epoch
                began = time.perf_counter()
                count = 0
                for x, y in loader:
                    got = time.perf_counter()
                    if count == 0:
                        firsts.append(got - began)
                    else:
                        takes.append(got - done)  # the time in next(): the loop does nothing else here
                    waited += got - done
                    trainer.step(x, y)
                    del x, y
                    counted.release(args.batch)
                    count += 1
                    done = time.perf_counter()
                    steps.append(done - got)
                counts.append(count)
            ended = time.perf_counter()
        depths = depth_changes(loader)
        handover = loader.report().handover if hasattr(loader, "report") else None
        copies = trainer.copies
    finally:
        close()
        del loader, trainer
        gc.collect()
        empty_caches(args.device)
    left = reap()
    if any(count != args.epoch_batches for count in counts):
        raise RuntimeError(f"{name}: epochs of {counts} batches, not {args.epoch_batches}")
    span = done - started
    return {
        "images_per_s": args.epochs * args.epoch_batches * args.batch / span,
        "seconds": span,
        "seconds_to_loop_end": ended - started,
        "input_wait_fraction": waited / span,
        "step_median_s": statistics.median(steps),
        "step_seconds": sum(steps),  # the span is this and the input wait
        "steps": steps,
        "takes": takes,
        "copies": copies,
        # A Prefetcher's own hand-over per batch: the waits of batches built before they were asked for.
        "handover_median_s": None if handover is None else handover.median,
        "first_batch_waits": firsts,
        "pss_before": alone,
        **sampler.figures(),
        "children_left": left,
        "peak_started_samples": counted.peak,
        "depths": depths,
    }


def summarize(runs: dict[str, list[dict[str, Any]]], batch: int, sample_bytes: int) -> dict[str, dict[str, Any]]:
    """short_epochs.py's summary in images/s, with the input wait, the step and the started samples."""
    summary = summarize_epochs(runs, "images_per_s", 1)
    for name, rows in runs.items():
        peak = max(r["peak_started_samples"] for r in rows)
        summary[name].update(
            input_wait_fraction=statistics.median(r["input_wait_fraction"] for r in rows),
            step_median_s=statistics.median(r["step_median_s"] for r in rows),
            peak_started_samples=peak,
            peak_started_batches=peak / batch,
            peak_started_bytes=peak * sample_bytes,
        )
    return summary


def prepare(parser: argparse.ArgumentParser, names: list[str], device: str) -> list[str]:
    """Torch set up for ``device``, and every loader's modules imported before the
    first run, so that each run forks the same process; ``names`` loses a loader
    that cannot import. The notes the table shows."""
    import torch
    import torch.utils.data

    if device == "cuda":
        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA device")
        torch.backends.cudnn.benchmark = True
    notes = []
    for name in [name for name in names if name in ON_DEVICE and device != "cuda"]:
        names.remove(name)
        notes.append(f"{name} skipped: the Prefetcher's device stage copies to CUDA devices, not to --device {device}")
        print(f"note: {notes[-1]}", file=sys.stderr, flush=True)
    if device == "cuda" and host_cache_emptier() is None:
        notes.append("this torch has no call to empty its pinned host memory cache: kept between runs")
    try:
        import torchdata.nodes  # noqa: F401
    except ImportError as error:
        if "torchdata.nodes" in names:
            names.remove("torchdata.nodes")
            notes.append(f"torchdata.nodes skipped: torchdata does not import here ({error})")
            print(f"note: {notes[-1]}", file=sys.stderr, flush=True)
    if any(name.startswith("prefetcher") for name in names):
        try:
            import queuetune  # noqa: F401
        except ImportError as error:
            parser.error(f"queuetune does not import ({error}): put src and its dependencies on PYTHONPATH")
    return notes
