"""The loader's real memory, split by cause, against ground truth read from
/proc by the processes themselves: copy-on-read named (and not where there is
none), shared memory left behind named, and the total as the kernel counts it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import psutil
import pytest
from tests.helpers import assert_nothing_left_running

import queuetune
from queuetune.analysis import memory as memory_use
from queuetune.record import real_memory
from queuetune.record.recorder import MemorySampler, clock, multiprocessing_helpers
from queuetune.tune.headline import headline
from queuetune.tune.recommend import Recommendation

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

pytestmark = pytest.mark.skipif(not real_memory.supported(), reason="needs Linux's /proc/PID/smaps_rollup")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from copy_on_read import loader as names_loader  # noqa: E402

MiB = 2**20


@pytest.fixture(autouse=True)
def readings_as_often_as_a_short_run_needs(monkeypatch):
    # The tree is read at most as often as keeps that within a share of a core. In the
    # suite's own process, grown large, a reading costs several times what it costs in a
    # process of its own: runs of 5-8 s got too few readings to show a growth (a Keras
    # PyDataset's workers end before the last reading). What these tests test is what
    # the readings show, not how seldom they come.
    monkeypatch.setattr(MemorySampler, "CHILDREN_SHARE", 0.5)


def own_uss() -> int:
    """This process's unique bytes, read from its smaps_rollup here (not through psutil)."""
    private = 0
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                private += int(line.split()[1]) * 1024
    return private


class SelfReported:
    """A collate function that also writes, in the worker, the time and the
    worker's own unique memory after each batch, to ``folder/<pid>``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, items: list[int]) -> torch.Tensor:
        batch = torch.tensor(items)
        with open(self.folder / str(os.getpid()), "a") as out:
            out.write(f"{clock()} {own_uss()}\n")
        return batch


def at(points: list[tuple[float, int]], t: float) -> float:
    """The self-reported value at ``t``, linearly between the reports around it."""
    before = max((p for p in points if p[0] <= t), default=points[0])
    after = min((p for p in points if p[0] >= t), default=points[-1])
    if after[0] == before[0]:
        return float(before[1])
    return before[1] + (after[1] - before[1]) * (t - before[0]) / (after[0] - before[0])


def read_names(
    samples: int = 1_000_000, batches: int = 150, numpy: bool = False, epochs: int = 1, **settings: Any
) -> queuetune.Report:
    """The report of ``epochs`` over :mod:`copy_on_read`'s names, read shuffled
    by a watched DataLoader of 2 workers with ``settings``, 30 ms a step."""
    plain = names_loader(samples, batches=batches, batch=500, workers=2, numpy=numpy)
    loader = DataLoader(plain.dataset, batch_size=500, sampler=plain.sampler, num_workers=2, **settings)
    watched = queuetune.watch(loader)
    for _epoch in range(epochs):
        for _ in watched:
            time.sleep(0.03)
    report = queuetune.report(watched)
    queuetune.probe_of(watched).close()
    return report


@pytest.mark.timeout(120)
def test_copy_on_read_of_a_list_of_strings_is_named_with_the_growth_the_workers_see(tmp_path):
    report = read_names(multiprocessing_context="fork", collate_fn=SelfReported(tmp_path))
    assert_nothing_left_running()
    use = report.memory
    assert use is not None and len(use.growing) == 2
    finding = use.finding()
    assert finding is not None and "copy-on-read" in finding and "names: a list of 1,000,000 str" in finding
    for growth in use.growing:
        reported = [(float(t), int(uss)) for t, uss in (line.split() for line in (tmp_path / growth.worker).open())]
        assert growth.copy_on_read and growth.per_1000_samples > 0
        # Each worker's growth as queuetune read it, against what the worker read of
        # itself over the same span: within 15 %.
        first, last = growth.span
        truth = at(reported, last) - at(reported, first)
        assert truth > 16 * MiB
        assert abs(growth.bytes - truth) <= 0.15 * truth, (growth.bytes / MiB, truth / MiB)
        # Heading for a copy of every string: the baseline and the strings' objects
        # (a million str, over 48 MiB), or what it holds where its reads copied whole
        # pages past that (on a busy machine the last reading comes late).
        baseline = growth.held - growth.bytes
        assert growth.heading is not None and growth.heading >= max(growth.held, baseline + 48 * MiB)
    assert use.heading_bytes is not None and use.heading_bytes >= use.peak.total
    line = headline(report, Recommendation(None, why="none")).text()
    assert "Memory: workers copy what they read (copy-on-read)" in line


@pytest.mark.timeout(120)
def test_the_same_strings_in_a_numpy_array_stay_flat_and_nothing_is_named(tmp_path):
    report = read_names(numpy=True, multiprocessing_context="fork", collate_fn=SelfReported(tmp_path))
    assert_nothing_left_running()
    use = report.memory
    assert use is not None and use.readings >= 4
    assert use.growing == [] and use.finding() is None


class Leaky(Dataset):
    """Each sample puts 512 KiB in shared memory that its worker keeps (a leak)."""

    kept: ClassVar[list[torch.Tensor]] = []

    def __len__(self) -> int:
        return 200

    def __getitem__(self, index: int) -> torch.Tensor:
        Leaky.kept.append(torch.zeros(MiB // 8).share_memory_())
        return torch.tensor([index])


class Transit(Dataset):
    """Samples of 256 KiB: batches of 4 MiB, which torch's workers put in shared
    memory on their way to the consumer."""

    def __len__(self) -> int:
        return 16 * 24

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.001)
        return torch.full((64, 1024), float(index))


@pytest.mark.timeout(300)
def test_a_dataloaders_own_tensors_in_transit_raise_no_alarm():
    from tests.helpers import busy_cores

    findings = []
    with busy_cores():
        for _ in range(20):
            loader = DataLoader(Transit(), batch_size=16, num_workers=2, prefetch_factor=4)
            watched = queuetune.watch(loader)
            for _ in watched:
                time.sleep(0.03)
            report = queuetune.report(watched)
            queuetune.probe_of(watched).close()
            assert report.memory is not None
            findings.append((report.memory.shared_growth, report.memory.finding()))
    assert_nothing_left_running()
    assert [f for f in findings if f[0] or (f[1] and "shared memory" in f[1])] == []


@pytest.mark.timeout(120)
def test_shared_memory_left_behind_beyond_the_batches_in_flight_is_named():
    watched = queuetune.watch(DataLoader(Leaky(), batch_size=1, num_workers=2, multiprocessing_context="fork"))
    for _ in watched:
        time.sleep(0.04)
    report = queuetune.report(watched)
    queuetune.probe_of(watched).close()
    assert_nothing_left_running()
    use = report.memory
    assert use is not None and use.peak is not None
    # 100 MiB left behind by the end, against 5 batches of 8 bytes in flight at most.
    assert use.shared_growth >= 30 * MiB
    assert max(c.shared_beyond for c in use.series) >= 30 * MiB > use.series[0].shared_beyond
    assert "shared memory beyond the batches in flight grew" in (use.finding() or "")
    # Each worker's heap keeps the 1 MiB tensor it made before moving it to shared
    # memory: growth, but no copy-on-read (the dataset holds no Python objects).
    assert not any(g.copy_on_read for g in use.growing)
    assert "copy-on-read" not in (use.finding() or "")


def independent_total(root: psutil.Process) -> int:
    """PSS summed over the tree from each process's smaps_rollup, plus the files
    in /dev/shm named with one of its pids (the Prefetcher's segments)."""
    helpers = multiprocessing_helpers()
    processes = [root, *(c for c in root.children(recursive=True) if c.pid not in helpers)]
    total, pids = 0, set()
    for process in processes:
        with open(f"/proc/{process.pid}/smaps_rollup") as rollup:
            total += sum(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss:"))
        pids.add(process.pid)
    for entry in os.scandir("/dev/shm"):
        if any(str(pid) in entry.name for pid in pids):
            # Mapped segments are in the PSS already: count only those none maps.
            mapped = any(entry.name in open(f"/proc/{pid}/maps").read() for pid in pids)
            if not mapped:
                total += entry.stat().st_blocks * 512
    return total


@pytest.mark.timeout(60)
def test_a_child_that_has_ended_is_not_read_as_a_worker_holding_nothing(monkeypatch):
    # A worker's last reading, made as it exits, read it as holding 0 bytes: its
    # growth came out negative, and copy-on-read went unnamed.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)
        tree = real_memory.read_tree(exclude=multiprocessing_helpers())
        assert tree is not None and child.pid not in [w.pid for w in tree.workers]
        monkeypatch.setattr(real_memory, "supported", lambda: False)
        samples: list[Any] = []
        MemorySampler(samples.append).sample(children_now=True)
        living = [c for c in psutil.Process().children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]
        assert samples[0].n_children == len([c for c in living if c.pid not in multiprocessing_helpers()])
    finally:
        child.wait(timeout=10)
    assert_nothing_left_running()


@pytest.mark.timeout(120)
def test_the_total_is_the_pss_of_the_tree_and_its_shared_memory():
    source = [torch.full((256, 1024), float(i)) for i in range(64)]  # 1 MiB a sample
    ratios = []
    with queuetune.Prefetcher(source, max_bytes="64MiB", workers=2, mode="process", batch_size=4) as loader:
        for step, _ in enumerate(loader):
            if step % 4 == 0:
                tree = real_memory.read_tree(exclude=multiprocessing_helpers())
                truth = independent_total(psutil.Process())
                assert tree is not None
                ratios.append(tree.total / truth)
            time.sleep(0.01)
    assert_nothing_left_running()
    assert len(ratios) == 4
    assert all(0.9 <= r <= 1.1 for r in ratios), ratios


@pytest.mark.timeout(120)
def test_copy_on_read_in_the_prefetchers_worker_processes_is_named():
    from copy_on_read import Names

    loader = queuetune.Prefetcher(
        Names(1_000_000),
        max_bytes="64MiB",
        workers=2,
        mode="process",
        batch_size=500,
        shuffle=True,
        seed=0,
        multiprocessing_context="fork",
    )
    with loader:
        for step, _ in enumerate(loader):
            time.sleep(0.03)
            if step == 150:
                break
        report = loader.report()
    assert_nothing_left_running()
    use = report.memory
    assert use is not None and use.growing and all(g.copy_on_read for g in use.growing)
    assert "names: a list of 1,000,000 str" in (use.finding() or "")


@pytest.mark.timeout(120)
def test_spawned_workers_that_grow_are_not_called_copy_on_read():
    report = read_names(200_000, multiprocessing_context="spawn")
    assert_nothing_left_running()
    use = report.memory
    assert use is not None and use.forked is False
    assert not any(g.copy_on_read for g in use.growing)
    assert "(copy-on-read)" not in (use.finding() or "")


@pytest.mark.timeout(60)
def test_a_system_without_pss_says_so_once(monkeypatch):
    monkeypatch.setattr(real_memory, "supported", lambda: False)
    watched = queuetune.watch(DataLoader(list(range(40)), batch_size=4, num_workers=2))
    for _ in watched:
        time.sleep(0.01)
    report = queuetune.report(watched)
    queuetune.probe_of(watched).close()
    assert_nothing_left_running()
    assert report.memory is not None and report.memory.peak is None
    assert report.memory.notes == [memory_use.NO_PSS]
    assert report.peak_rss_bytes is not None  # what psutil gives everywhere


class Images(Dataset):
    """Image-sized tensors made anew for each sample: no Python objects to copy."""

    def __len__(self) -> int:
        return 16 * 80

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.002)
        return torch.rand(3, 224, 224)


@pytest.mark.timeout(120)
def test_workers_warming_up_over_their_first_batches_are_not_named():
    # Each worker's allocator takes tens of MiB over its first batches of 9 MiB, then holds.
    watched = queuetune.watch(DataLoader(Images(), batch_size=16, num_workers=2))
    for _epoch in range(2):
        for _ in watched:
            time.sleep(0.02)
    report = queuetune.report(watched)
    queuetune.probe_of(watched).close()
    assert_nothing_left_running()
    assert report.memory is not None and report.memory.readings >= 4
    assert report.memory.growing == [] and report.memory.shared_growth == 0
    assert report.memory.finding() is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("end", ["exhausted", "closed", "dropped"])
def test_a_dataloaders_workers_are_read_as_they_are_told_to_end(monkeypatch, end):
    # The sampler's readings, a fraction of a second apart, may all come before a short
    # epoch's workers grew most (in CI, one run of 20 read its workers once, at a tenth
    # of what they came to hold): their last reading is made as they are told to end.
    # Here the sampler reads the tree at its start and once more, then not for minutes.
    monkeypatch.setattr(MemorySampler, "CHILDREN_SHARE", 1e-6)
    monkeypatch.setattr(MemorySampler, "EARLY_SHARE", 1e-6)
    watched = queuetune.watch(DataLoader(range(64), batch_size=4, num_workers=2))
    probe = queuetune.probe_of(watched)
    it = iter(watched)
    for _ in range(16 if end == "exhausted" else 6):
        next(it)
        time.sleep(0.02)
    ending = clock()
    if end == "exhausted":
        assert next(it, None) is None
    elif end == "closed":
        it.close()
    else:
        del it
    trace = probe.trace()
    probe.close()
    assert_nothing_left_running()
    workers = {int(p.worker.rsplit(":", 1)[-1]) for p in trace.produced}
    assert len(workers) == 2 and len(trace.consumed) == (16 if end == "exhausted" else 6)
    at_the_end = [m for m in trace.memory if m.t >= ending and workers <= {w[0] for w in m.workers or []}]
    assert at_the_end, [(m.t - ending, m.workers) for m in trace.memory]


@pytest.mark.timeout(120)
def test_copy_on_read_by_persistent_workers_is_named():
    report = read_names(batches=75, epochs=2, multiprocessing_context="fork", persistent_workers=True)
    assert_nothing_left_running()
    use = report.memory
    # Both workers copy what they read; late in a long suite one of the two is at times
    # not named (its readings' fit), so the finding is asked of at least one.
    assert use is not None and 1 <= len(use.growing) <= 2 and all(g.copy_on_read for g in use.growing)
    finding = use.finding()
    assert finding is not None and "copy-on-read" in finding


@pytest.mark.keras
@pytest.mark.timeout(180)
def test_copy_on_read_by_a_keras_pydatasets_worker_processes_is_named():
    keras = pytest.importorskip("keras")
    import numpy as np
    from copy_on_read import Names

    class Batches(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__(workers=2, use_multiprocessing=True, max_queue_size=4)
            self.names = Names(1_000_000).names
            self.order = np.random.default_rng(0).permutation(len(self.names))

        def __len__(self) -> int:
            return 150

        def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
            picked = self.order[index * 500 : (index + 1) * 500]
            x = np.array([[len(self.names[i])] for i in picked], dtype="float32")
            return x, x

    class Step(keras.callbacks.Callback):
        def on_predict_batch_end(self, batch: int, logs: object = None) -> None:
            time.sleep(0.03)

    inputs = keras.Input((1,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    data = queuetune.watch(Batches())
    probe = queuetune.probe_of(data)
    model.predict(data, verbose=0, callbacks=[Step(), probe.keras_callback(print_report=False)])
    report = probe.report()
    probe.close()
    assert_nothing_left_running()
    use = report.memory
    assert use is not None and use.growing and all(g.copy_on_read for g in use.growing)
    assert "names: a list of 1,000,000 str" in (use.finding() or "")
