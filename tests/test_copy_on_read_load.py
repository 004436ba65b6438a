"""Copy-on-read named on a busy machine, and put before the hand-over's own
advice in the headline (issue 59, part 4): a DataLoader of two forked workers
reading a Python list of paths shuffled, in batches of 2,000, copies most of
the list within its first batches, then holds; with every core busy, the
tree's memory was read too seldom to see that rise, and the headline told a
loader slowed by copying pages to pin its memory."""

from __future__ import annotations

import time

import pytest
from tests.helpers import assert_nothing_left_running, busy_cores

import queuetune
from queuetune import real_memory
from queuetune.memory_use import COPY_ON_READ_FIX
from queuetune.tune.headline import Headline, headline
from queuetune.tune.recommend import Recommendation

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset, RandomSampler  # noqa: E402


class Paths(Dataset[int]):
    """``samples`` file paths in a Python list: each a str object of 80 bytes,
    51 to a page, whose reference count a read writes."""

    def __init__(self, samples: int) -> None:
        self.paths = [f"/data/images/train/{i:08d}.jpg" for i in range(samples)]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> int:
        return len(self.paths[index])


def read_paths(samples: int = 500_000, batches: int = 40) -> queuetune.Report:
    """The report of ``batches`` batches of 2,000 paths read shuffled by two
    forked workers, 5 ms a step: each worker reads 40,000 of the 500,000, by
    when it has touched 98 % of the pages (38 MiB of str objects)."""
    dataset = Paths(samples)
    sampler = RandomSampler(dataset, num_samples=batches * 2000)
    loader = DataLoader(dataset, batch_size=2000, sampler=sampler, num_workers=2, multiprocessing_context="fork")
    watched = queuetune.watch(loader)
    for _ in watched:
        time.sleep(0.005)
    report = queuetune.report(watched)
    queuetune.probe_of(watched).close()
    return report


@pytest.mark.skipif(not real_memory.supported(), reason="needs Linux's /proc/PID/smaps_rollup")
@pytest.mark.timeout(400)
def test_copy_on_read_of_a_shuffled_list_is_named_in_20_runs_of_20_with_every_core_busy():
    # The tree is read as often as queuetune reads it (not as test_real_memory's
    # fixture has it), in the suite's own process: larger than a program's, so its
    # readings cost more and come more seldom than under `queuetune run`.
    runs: list[tuple[bool, Headline]] = []
    with busy_cores():
        for _ in range(20):
            report = read_paths()
            use = report.memory
            runs.append((use is not None and use.copy_on_read, headline(report, Recommendation(None, why="none"))))
    assert_nothing_left_running()
    assert [named for named, _ in runs] == [True] * 20, [line.text() for _, line in runs]
    for _, line in runs:
        text = line.text()
        assert "Memory: workers copy what they read (copy-on-read)" in text
        assert "pin_memory" not in text and "Prefetcher" not in text
        if line.bottleneck == "the hand-over":
            assert line.next_step.startswith("workers copy what they read (copy-on-read), which slows the hand-over")
            assert COPY_ON_READ_FIX in line.next_step
