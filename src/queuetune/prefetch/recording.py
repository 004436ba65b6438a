"""The recorder of a Prefetcher's epochs (:func:`prefetcher_recorder`), its settings
in the trace's meta."""

from __future__ import annotations

from typing import Any

from ..record.real_memory import dataset_facts
from ..record.recorder import Recorder
from ..record.trace import TraceMeta
from .options import PrefetchOptions, source_length


def prefetcher_recorder(options: PrefetchOptions, source: Any) -> Recorder:
    """The recorder of the epochs of a Prefetcher of ``options`` over ``source``,
    which samples memory across its epochs (the workers outlive each).

    >>> from queuetune.prefetch import Prefetcher
    >>> with Prefetcher(list(range(6)), max_bytes="1MiB", batch_size=4, sample_memory=False) as p:
    ...     recorder = prefetcher_recorder(p.options, p.source)
    >>> recorder.meta.settings["workers"], recorder.meta.num_batches, recorder.meta.num_samples
    (2, 2, 6)
    >>> recorder.close()
    """
    mode = options.mode
    recorder = Recorder(
        TraceMeta(
            loader="prefetcher",
            framework="queuetune",
            type=type(source).__qualname__,
            settings={
                "max_bytes": options.max_bytes,
                "workers": "auto" if options.auto else options.workers,
                **({"max_workers": options.max_workers} if options.auto else {}),
                "mode": mode,
                **({"start_method": options.start_method} if mode == "process" else {}),
                "adaptive": options.adaptive,
                "ordered": options.ordered,
            },
            depth=options.depth,
            match_scope="run",
        ),
        processes=mode == "process",
        sample_memory=options.sample_memory,
        keep_runs=options.trace_epochs,
        sample_across_runs=True,  # the workers outlive each epoch
    )
    recorder.consumer = "prefetcher"
    if mode == "process":
        facts = dataset_facts(source, options.start_method == "fork")
        recorder.meta.extra.update({**facts, "batch_size": options.batch_size})
    if options.indexable:
        recorder.meta.num_batches = options.batches(source_length(source))
        if options.batch_size is not None:
            recorder.meta.num_samples = source_length(source)
    return recorder
