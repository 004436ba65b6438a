"""A loop owns the prefetcher it alone holds: ``for b in Prefetcher(...)`` and
``list(Prefetcher(...))`` deliver every batch in both modes, and the workers end
when the loop ends or its iterator is collected, with no file left behind."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from helpers import assert_nothing_left_running
from queuetune import Prefetcher
from queuetune.prefetch import shm

N = 12


class Numbered:
    """Batch i: 100,000 float64 values (800 kB: through shared memory in process mode), all i."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> np.ndarray:
        return np.full(100_000, float(i))


def files() -> list[str]:
    return sorted(p.name for p in shm.files.ROOT.glob(f"queuetune-{os.getpid()}-*")) if shm.available() else []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_for_loop_over_a_prefetcher_it_alone_holds_gets_every_batch_and_ends_its_workers(mode):
    got = [float(b[0]) for b in Prefetcher(Numbered(), max_bytes="32MiB", mode=mode, workers=2)]
    assert got == [float(i) for i in range(N)]
    gc.collect()
    assert_nothing_left_running()
    assert files() == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_list_of_a_prefetcher_gets_every_batch_whole_and_ends_its_workers(mode):
    batches = list(Prefetcher(Numbered(), max_bytes="32MiB", mode=mode, workers=2))
    # Every batch kept at once: in process mode more than the budget holds in shared
    # memory, so the later ones come through the pipe; all of them whole.
    assert [(float(b.min()), float(b.max()), b.shape) for b in batches] == [
        (float(i), float(i), (100_000,)) for i in range(N)
    ]
    gc.collect()
    assert_nothing_left_running()
    del batches
    gc.collect()
    assert files() == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_an_iterator_left_mid_epoch_and_collected_ends_the_workers_it_alone_held(mode):
    it = iter(Prefetcher(Numbered(), max_bytes="32MiB", mode=mode, workers=2))
    first = next(it)
    assert float(first[0]) == 0.0
    del it
    gc.collect()
    assert_nothing_left_running()
    assert float(first.sum()) == 0.0  # the batch handed over stays whole after its prefetcher ended
    del first
    gc.collect()
    assert files() == []


@pytest.mark.timeout(120)
def test_a_named_prefetcher_keeps_its_workers_for_the_next_epoch():
    """The contrast: one the program keeps a name for keeps its workers between loops."""
    loader = Prefetcher(Numbered(), max_bytes="32MiB", mode="thread", workers=2)
    assert [float(b[0]) for b in loader] == [float(i) for i in range(N)]
    gc.collect()
    assert loader._kept.workers and loader._kept.workers[0].usable()
    assert [float(b[0]) for b in loader] == [float(i) for i in range(N)]
    loader.close()
    assert_nothing_left_running()
