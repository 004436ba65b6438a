"""The loaders the epoch benchmarks compare, built anew for a run: DataLoader with and
without persistent workers, torchdata.nodes, the Prefetcher's rows."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

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
    # The device stage: batches copied ahead to the run's device (device=, by :func:`epoch_loader`).
    "prefetcher-device": {},
}

#: The rows whose batches arrive on the device already: their step copies nothing.
ON_DEVICE = ("prefetcher-device",)


def chosen_loaders(parser: Any, text: str, known: tuple[str, ...]) -> list[str]:
    """``--loaders``: distinct names of ``known``, comma-separated (else the parser's error)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names or len(set(names)) != len(names):
        parser.error(f"--loaders: distinct names of {', '.join(known)}; got {text!r}")
    return names


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
    name: str, data: Any, batch: int, workers: int, pin_memory: bool = False, device: str | None = None
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
      with what :data:`PREFETCHERS` sets; closed by the stop;
    - ``prefetcher-device``: the same with ``device=device`` (the device stage,
      ``device_depth`` and the stage's other settings at their defaults).
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

        if name in ON_DEVICE and device is None:
            raise ValueError(f"{name} needs a device")
        staged = {"device": device} if name in ON_DEVICE else {}
        prefetcher = queuetune.Prefetcher(
            data,
            batch_size=batch,
            shuffle=True,
            mode="process",
            workers=workers,
            max_bytes="4GiB",
            **{"multiprocessing_context": "fork", **PREFETCHERS[name], **staged},
        )
        return prefetcher, prefetcher.close
    if name != "torchdata.nodes":
        raise ValueError(f"no loader named {name!r}")
    from torch.utils.data import BatchSampler, RandomSampler
    from torchdata.nodes import SamplerWrapper

    batches = SamplerWrapper(BatchSampler(RandomSampler(range(len(data))), batch, drop_last=False))
    return nodes_loader(batches, Collated(data), workers)


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
