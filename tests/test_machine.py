"""The machine in the model: what a run took of the cores bounds what more
workers are predicted to gain, worker counts go as far as the gain does, and
the headline names the limit the setting it offers reaches."""

from __future__ import annotations

import itertools
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import assert_nothing_left_running
from queuetune.analysis.report import analyze
from queuetune.record.trace import MemorySample, Trace
from queuetune.tune import machine
from queuetune.tune.headline import advise
from queuetune.tune.machine import machine_of
from queuetune.tune.recommend import recommend
from test_headline import loader_trace

MiB = 2**20


def with_cores(
    trace: Trace,
    cores: int,
    cpu_per_batch: float,
    others: float = 0.0,
    workers: list[list[int]] | None = None,
    host: int | None = None,
) -> Trace:
    """``trace`` with the tree's CPU and the cores' idle time read every 0.25 s as a
    machine of ``cores`` would show them: the tree busy ``cpu_per_batch`` seconds a
    batch taken, ``others`` cores busy with other programs, the rest idle."""
    taken = sorted(c.consumed for c in trace.consumed)
    end = taken[-1]
    samples, t = [], 0.0
    while t <= end:
        done = sum(1 for x in taken if x <= t)
        cpu = done * cpu_per_batch
        idle = max(0.0, cores * t - cpu - others * t)
        tree = {} if workers is None else {"pss": 100 * MiB, "uss": 100 * MiB, "workers": workers}
        samples.append(MemorySample(t, 100 * MiB, cpu=cpu, idle=idle, **tree))
        t += 0.25
    trace.memory = samples
    trace.meta.extra["cores"] = cores
    if host is not None:
        trace.meta.extra["host_memory"] = host
    return trace


def test_a_run_measures_the_cores_it_used_and_those_left_idle():
    trace = with_cores(loader_trace(0.040, 0.002, workers=3, batches=400), cores=16, cpu_per_batch=0.042)
    m = machine_of(trace)
    assert m is not None and m.cores == 16
    assert m.per_batch == pytest.approx(0.042, rel=0.05)
    assert m.used + m.idle == pytest.approx(16, rel=0.02) and m.others == pytest.approx(0, abs=0.1)
    # A loader and its consumer keep at most 90 % of the cores busy between them.
    assert m.ceiling == pytest.approx(machine.EFFICIENCY * 16 / 0.042, rel=0.05)


@given(st.floats(0.0, 0.5))
def test_the_probes_own_readings_are_not_counted_as_the_loaders(probe_share):
    # The sampler's readings of the tree take CPU a run without queuetune does not
    # pay: `probe_share` of a core here, on top of the loader's 42 ms a batch.
    trace = with_cores(loader_trace(0.040, 0.002, workers=3, batches=200), cores=16, cpu_per_batch=0.042)
    for m in trace.memory:
        assert m.cpu is not None
        m.cpu += probe_share * m.t
        m.probe = probe_share * m.t
    found = machine_of(trace)
    assert found is not None and found.per_batch == pytest.approx(0.042, rel=0.05)


def test_cpu_bound_builds_are_predicted_to_saturate_where_workers_and_consumer_fill_the_cores():
    # The case in small: 3 workers decoding on 16 cores, 40 ms of CPU a
    # batch, a step of 2 ms. The queue alone predicts 6.7x (the step's bound);
    # the cores give 0.9 x 16 / 42 ms = 343 batches a second, 4.6x the 75 measured.
    trace = with_cores(loader_trace(0.040, 0.002, workers=3, batches=400), cores=16, cpu_per_batch=0.042)
    rec, line = advise(trace)
    assert rec.limit == "cores" and rec.cores == 16
    assert rec.settings is not None and 12 <= rec.settings["num_workers"] <= 24
    most = machine.EFFICIENCY * 16 / 0.042 / 75
    assert rec.gain is not None and 0.8 * most <= rec.gain <= most
    assert f"{rec.settings['num_workers']} workers would fill the 16 cores: predicted" in line.text()


def test_cores_other_programs_keep_busy_are_shared_with_them():
    # Other programs keep 8 of the 16 cores busy: a setting that asks more than
    # the 8 left gets its share of all 16 (the kernel shares a core among the
    # threads that ask for it), less than on a quiet machine, and more than 8 give.
    quiet = advise(with_cores(loader_trace(0.040, 0.002, workers=3, batches=400), cores=16, cpu_per_batch=0.042))[0]
    trace = with_cores(loader_trace(0.040, 0.002, workers=3, batches=400), cores=16, cpu_per_batch=0.042, others=8.0)
    m = machine_of(trace)
    assert m is not None and m.others == pytest.approx(8, rel=0.05)
    rec, line = advise(trace)
    assert rec.limit == "cores" and rec.gain is not None and quiet.gain is not None
    assert 8 / 0.042 / 75 < rec.gain < quiet.gain
    assert "would fill the 16 cores, 8.0 of them taken by other programs" in line.text()


def test_builds_that_wait_on_io_go_past_eight_workers_a_core_as_far_as_the_gain_goes():
    # 80 ms builds, 2 % of it on a CPU, 0.5 ms steps, 2 workers on 2 cores: the
    # cores give 2 / 2.1 ms = 950 batches a second, some 76 workers' worth; the
    # old search stopped at 16 without saying so.
    trace = with_cores(loader_trace(0.080, 0.0005, cpu=0.02, workers=2, batches=300), cores=2, cpu_per_batch=0.0021)
    rec, line = advise(trace)
    assert rec.settings is not None and rec.settings["num_workers"] > 16
    assert rec.limit == "cores" and rec.edge is None
    assert "would fill the 2 cores" in line.text()


def test_the_setting_offered_at_the_edge_of_what_the_machine_holds_says_so():
    # The same builds, but each worker holds 100 MiB of its own and the machine has
    # 2 GiB: some 14 workers fit, far fewer than the gain would go to.
    workers = [[100 + i, 100 * MiB, 100 * MiB, 0] for i in range(2)]
    trace = with_cores(
        loader_trace(0.080, 0.0005, cpu=0.02, workers=2, batches=300),
        cores=2,
        cpu_per_batch=0.0021,
        workers=workers,
        host=2 * 2**30,
    )
    rec, line = advise(trace)
    most, _ = machine.most_workers(rec.worker_bytes, None, 2 * 2**30)
    assert rec.worker_bytes == pytest.approx(100 * MiB, rel=0.01)
    assert rec.settings is not None and rec.settings["num_workers"] <= most
    assert rec.edge is not None and "the machine's memory" in rec.edge
    assert "the most workers considered, as the machine's memory" in line.text()


# 25 searches of the model take about 100 s on two busy cores: more than the suite's default limit.
@pytest.mark.timeout(600)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    build=st.floats(0.005, 0.1),
    step=st.floats(0.0005, 0.02),
    cpu=st.floats(0.01, 1.0),
    workers=st.integers(1, 8),
    cores=st.integers(1, 64),
    consumer_cpu=st.floats(0.0, 1.0),
    others=st.floats(0.0, 0.9),
)
def test_no_setting_is_predicted_faster_than_the_cores_give(build, step, cpu, workers, cores, consumer_cpu, others):
    # Long enough for readings MIN_SECONDS apart however fast the batches come.
    batches = min(2000, max(160, math.ceil(1.2 / max(step, build / workers))))
    trace = loader_trace(build, step, cpu=cpu, workers=workers, batches=batches)
    per_batch = build * cpu + step * consumer_cpu
    trace = with_cores(trace, cores=cores, cpu_per_batch=per_batch, others=others * cores)
    m = machine_of(trace)
    assert m is not None
    from queuetune.tune.machine import machine_limits
    from queuetune.tune.measures import after_warmup
    from queuetune.tune.predict import search_workers

    trimmed = after_warmup(trace, 10)
    limits = machine_limits(trimmed, analyze(trace))
    m_trim = limits.machine
    assert m_trim is not None
    assert limits.ceiling is not None
    rows, considered = search_workers(
        trimmed, _torch(), workers, limits.most, 32, seed=0, machine=limits.machine, tolerance=0.02
    )
    assert rows and considered <= limits.most
    assert max(p.throughput for p in rows) <= limits.ceiling * (1 + 1e-9)
    # Where the cores bound a setting, it is to what they give it, below the queue's own.
    assert all(p.throughput <= limits.ceiling * (1 + 1e-9) for p in rows if p.limit == "cores")
    alone = queue_alone(trimmed, sorted({p.workers for p in rows}))
    for p in rows:
        queue = alone[(p.workers, tuple(sorted(p.settings.items())))]
        assert p.throughput == pytest.approx(m_trim.bound(queue)) and p.throughput <= queue * (1 + 1e-9)
    rec = recommend(trace)
    if rec.gain is not None and rec.limit == "cores":
        assert rec.share * max(p.throughput for p in rows) <= limits.ceiling * (1 + 1e-9)


def queue_alone(trace: Trace, counts: list[int]) -> dict[tuple[int, tuple], float]:
    """The queue model's own throughput for each setting of ``counts`` workers, without the machine."""
    from queuetune.tune.predict import predict

    rows = predict(trace, _torch(), counts, max(32, *counts), seed=0)
    return {(r.workers, tuple(sorted(r.settings.items()))): r.throughput for r in rows}


def _torch():
    from queuetune.frameworks import get

    return get("torch")


torch = pytest.importorskip("torch")


class Spinning(torch.utils.data.Dataset):
    """Sample i: spins ``cpu`` seconds of its thread's CPU time."""

    def __init__(self, n: int, cpu: float) -> None:
        self.n, self.cpu = n, cpu

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        began = time.thread_time()
        while time.thread_time() - began < self.cpu:
            pass
        return i


@pytest.mark.timeout(120)
def test_a_watched_loader_reads_its_trees_cpu_and_the_idle_cores():
    import queuetune

    samples, each = 120, 0.01
    loader = torch.utils.data.DataLoader(Spinning(samples, each), batch_size=4, num_workers=2)
    watched = queuetune.watch(loader)
    for _ in watched:
        pass
    trace = queuetune.probe_of(watched).trace()
    queuetune.probe_of(watched).close()
    assert_nothing_left_running()
    read = [m for m in trace.memory if m.cpu is not None]
    assert len(read) >= 2 and all(m.idle is not None for m in read)
    # The tree's CPU never goes back, not even as workers end before they are reaped;
    # the cores' idle time may, a little (Linux's idle and iowait accounting).
    assert all(b.cpu >= a.cpu for a, b in itertools.pairwise(read))  # type: ignore[operator]
    assert read[-1].idle >= read[0].idle  # type: ignore[operator]
    # The workers spun 1.2 s of CPU between them, all of it inside the tree read.
    assert read[-1].cpu - read[0].cpu >= 0.9 * samples * each  # type: ignore[operator]
    assert trace.meta.extra["cores"] >= 1
