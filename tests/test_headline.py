"""The headline: one line with the bottleneck, its size and a next step that
agrees with the verdict, the same in the terminal, the HTML and the JSON."""

from __future__ import annotations

import json
import platform

import pytest
from tests.helpers import assert_nothing_left_running

from queuetune.analysis.memory import COPY_ON_READ_FIX, Growth, MemoryUse
from queuetune.analysis.report import Report, analyze
from queuetune.cli import main
from queuetune.common import cores
from queuetune.common.units import format_bytes
from queuetune.record.trace import Consumed, Mark, Produced, Trace, TraceMeta
from queuetune.render.html import Section, html_report
from queuetune.tune.headline import Headline, advise, headline
from queuetune.tune.recommend import Recommendation

MiB = 2**20


def loader_trace(
    build: float, step: float, handover: float = 0.0, cpu: float = 1.0, workers: int = 2, batches: int = 120
) -> Trace:
    """A DataLoader's run as its probe records it, made by hand: ``workers``
    workers build batch i on worker i % workers, ``build`` seconds each (a
    ``cpu`` share of them on a CPU), at most 2 a worker ahead of the consumer;
    the consumer steps ``step`` seconds and takes ``handover`` seconds to take
    each batch once it is built."""
    depth = 2 * workers
    free = [0.0] * workers
    produced, consumed = [], []
    taken: list[float] = []
    asked = 0.0
    for i in range(batches):
        worker = i % workers
        start = max(free[worker], taken[i - depth] if i >= depth else 0.0)
        end = start + build
        free[worker] = end
        produced.append(Produced(start, end, MiB, index=i, key=i, worker=str(100 + worker), busy=build * cpu))
        got = max(asked, end) + handover
        consumed.append(Consumed(asked, got, key=i))
        taken.append(got)
        asked = got + step
    settings = {"num_workers": workers, "prefetch_factor": 2, "pin_memory": False}
    meta = TraceMeta(framework="torch", loader="DataLoader", settings=settings, depth=depth)
    marks = [Mark(0.0, "run_begin", 0), Mark(0.0, "epoch_begin", 0), Mark(asked, "epoch_end", 0)]
    marks.append(Mark(asked, "run_end", 0))
    return Trace(meta=meta, produced=produced, consumed=consumed, marks=marks, end=asked)


CASES = {
    # build, step, hand-over, CPU share of the builds
    "model-bound": (0.0055, 0.020, 0.0002, 1.0),
    "hand-over-bound": (0.001, 0.010, 0.001, 1.0),
    "moderately input-bound": (0.024, 0.0105, 0.0, 1.0),
    "highly input-bound, builds on a CPU": (0.040, 0.005, 0.0, 1.0),
    "highly input-bound, builds wait on I/O": (0.080, 0.005, 0.0, 0.02),
}


@pytest.mark.parametrize("case", CASES)
def test_every_verdict_gets_a_next_step_that_agrees_with_it(case):
    trace = loader_trace(*CASES[case])
    report = analyze(trace)
    recommendation, line = advise(trace, report)
    assert (
        line.bottleneck
        == {
            "not input-bound": "the hand-over" if case == "hand-over-bound" else "the model",
            "moderately input-bound": "loading",
            "highly input-bound": "loading",
        }[report.verdict]
    )
    assert case.split(",")[0] in (report.verdict, "model-bound", "hand-over-bound")
    text = line.text()
    assert text.startswith(f"Bottleneck: {line.bottleneck} (") and "\n" not in text
    if line.bottleneck == "loading":
        # Waiting for builds: never a setting of less throughput, never fewer workers.
        if recommendation.changes:
            assert recommendation.gain is not None and recommendation.gain > 1.02
            assert recommendation.settings["num_workers"] >= 2
            assert line.settings == recommendation.settings and "Try num_workers=" in text
    else:
        # Not waiting for builds: a change only where it holds less.
        if recommendation.changes:
            assert recommendation.saved_bytes is not None and recommendation.saved_bytes > 0
            saved = format_bytes(int(recommendation.saved_bytes))
            assert f"is predicted to hold {saved} less" in text and "of the best throughput" in text
        else:
            assert "Keep num_workers=2, prefetch_factor=2" in text


def test_builds_that_wait_on_io_are_offered_more_workers_than_cores():
    trace = loader_trace(*CASES["highly input-bound, builds wait on I/O"])
    report = analyze(trace)
    assert report.build_busy_share == pytest.approx(0.02)
    recommendation, line = advise(trace, report)
    assert recommendation.changes and recommendation.settings["num_workers"] > max(2, cores.available())
    assert "builds wait on I/O 98 % of their time" in line.text()


def test_builds_on_a_cpu_are_told_to_get_cheaper_not_more_workers_than_cores():
    trace = loader_trace(*CASES["highly input-bound, builds on a CPU"])
    recommendation, line = advise(trace)
    assert recommendation.settings is None or recommendation.settings["num_workers"] <= max(2, cores.available())
    if not recommendation.changes:
        assert "make each build cheaper" in line.text()


def test_the_hand_over_is_named_with_its_cost_and_what_lowers_it():
    line = advise(loader_trace(*CASES["hand-over-bound"]))[1]
    assert line.bottleneck == "the hand-over"
    text = line.text()
    assert "to take batches already built" in text and "1.00 ms a batch" in text
    assert "pin_memory=True" in text  # torch's own advice


def test_no_batch_consumed_is_an_unknown_bottleneck():
    line = headline(analyze(Trace(produced=[Produced(0, 1, 8)], end=1)), Recommendation(None, why="no batches"))
    assert (line.bottleneck, line.waiting) == ("unknown", None)


def test_the_report_command_prints_and_carries_the_same_headline(tmp_path, capsys):
    path = tmp_path / "trace.json"
    loader_trace(*CASES["highly input-bound, builds wait on I/O"]).save(path)
    html = tmp_path / "r.html"
    assert main(["report", str(path), "--html", str(html)]) == 0
    printed = capsys.readouterr().out
    assert main(["report", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    text = data["headline"]["text"]
    assert printed.replace("\n", " ").startswith(text[:60])
    assert data["headline"]["bottleneck"] == "loading" and data["recommendation"]["text"]
    assert set(data["headline"]) == {
        "bottleneck",
        "waiting",
        "handover",
        "next_step",
        "settings",
        "partial_coverage",
        "memory",
        "coverage",
        "resume",
        "text",
    }
    page = html.read_text()
    assert '<p class="headline"><strong>Bottleneck: loading (waits' in page


def test_a_headline_opens_the_html_section():
    trace = loader_trace(*CASES["model-bound"])
    report = analyze(trace)
    line = Headline("the model", 0.001, 0.0, "keep it")
    page = html_report([Section("loader", trace, report, "keep", line.text())])
    assert page.index('class="headline"') < page.index('class="verdict"')


@pytest.mark.timeout(60)
def test_a_plain_loop_that_waits_is_told_to_build_ahead():
    import time

    import queuetune

    def slow():
        for i in range(30):
            time.sleep(0.004)
            yield i

    watched = queuetune.watch(slow())
    for _ in watched:
        time.sleep(0.001)
    trace = queuetune.probe_of(watched).trace()
    queuetune.probe_of(watched).close()
    line = advise(trace)[1]
    assert line.bottleneck == "loading"
    assert "nothing is built ahead of the model" in line.text().lower()
    assert_nothing_left_running()


def with_worker_memory(trace: Trace, per_worker: int) -> Trace:
    """``trace`` with readings of the tree in which each worker holds ``per_worker`` bytes of its own."""
    from queuetune.record.trace import MemorySample

    pids = sorted({int(p.worker) for p in trace.produced})
    times = [trace.end * k / 10 for k in range(1, 10)]
    trace.memory = [
        MemorySample(
            t,
            0,
            0,
            0,
            pss=400 * MiB,
            uss=300 * MiB,
            shm=0,
            shared=0,
            workers=[[pid, per_worker, per_worker, 0] for pid in pids],
        )
        for t in times
    ]
    return trace


@pytest.mark.parametrize("per_worker", [30 * MiB, 500 * MiB])
def test_memory_advice_counts_each_workers_own_memory(per_worker):
    trace = with_worker_memory(loader_trace(*CASES["model-bound"], workers=4), per_worker)
    report = analyze(trace)
    recommendation, line = advise(trace, report)
    assert recommendation.worker_bytes == pytest.approx(per_worker)
    chosen = recommendation.settings["num_workers"]
    assert chosen <= 4  # never more workers than measured where each holds its own memory
    assert recommendation.held_bytes == pytest.approx(recommendation.peak_bytes + chosen * per_worker)
    assert recommendation.current_held_bytes is not None
    assert recommendation.current_held_bytes == pytest.approx(recommendation.current_peak_bytes + 4 * per_worker)
    assert recommendation.changes and recommendation.saved_bytes > 0
    saved = format_bytes(int(recommendation.saved_bytes))
    assert f"is predicted to hold {saved} less (the workers' own memory counted) at " in line.text()
    if per_worker == 500 * MiB:
        # A worker's own memory outweighs any batch: the fewest workers that keep the throughput.
        assert chosen <= 2 and recommendation.saved_bytes >= 2 * per_worker


def test_without_the_workers_memory_no_worker_is_added_for_memory():
    build, step, handover, _ = CASES["model-bound"]
    trace = loader_trace(build, step, handover, cpu=0.02)  # builds that wait on I/O: many workers considered
    recommendation, line = advise(trace, analyze(trace))
    assert recommendation.worker_bytes is None
    assert recommendation.settings["num_workers"] <= 2
    if recommendation.changes:
        assert "is predicted to hold" in line.text() and "workers' own memory" not in line.text()


def hand_over_bound(memory: MemoryUse | None) -> Report:
    """A DataLoader's report whose consumer waits 9 % of its steady time to take
    batches already built, and none for builds, with ``memory`` as its memory."""
    report = analyze(loader_trace(*CASES["hand-over-bound"][:3]))
    report.memory = memory
    return report


def test_copy_on_read_comes_before_the_hand_overs_own_advice():
    copying = Growth("7", 40 * MiB, 52 * MiB, 0.9 * MiB, 44_000, 52 * MiB, copy_on_read=True)
    report = hand_over_bound(MemoryUse(12, None, growing=[copying], heading_bytes=300 * MiB))
    kept = {"num_workers": 2, "prefetch_factor": 2}
    line = headline(report, Recommendation(kept, current=kept, why="kept"))
    assert line.bottleneck == "the hand-over"
    text = line.text()
    assert "Workers copy what they read (copy-on-read), which slows the hand-over (" in text
    assert COPY_ON_READ_FIX in text and "pin_memory" not in text and "Prefetcher" not in text
    assert "; keep num_workers=2, prefetch_factor=2" in text  # the recommendation's step still follows
    memory = "Memory: workers copy what they read (copy-on-read), +40 MiB so far, heading for 300 MiB in all."
    assert text.endswith(memory)
    # Growth that is not copy-on-read (spawned workers: a cache, a leak), or none:
    # the hand-over's own advice.
    spawned = Growth("7", 80 * MiB, 92 * MiB, 0.9 * MiB, 44_000, None, copy_on_read=False)
    for memory in (MemoryUse(12, None, growing=[spawned]), MemoryUse(12, None), None):
        line = headline(hand_over_bound(memory), Recommendation(None, why="none"))
        assert line.bottleneck == "the hand-over"
        assert line.next_step.startswith("lower the hand-over (") and "pin_memory=True" in line.next_step
        assert "(copy-on-read), which slows" not in line.text()


def keras_trace(multiprocessing: bool) -> Trace:
    """:func:`loader_trace`'s model-bound run as a Keras PyDataset of 4 workers and a queue of 10 records it."""
    trace = loader_trace(*CASES["model-bound"], workers=4)
    settings = {"workers": 4, "max_queue_size": 10, "use_multiprocessing": multiprocessing}
    trace.meta = TraceMeta(framework="keras", loader="PyDataset", settings=settings, depth=11)
    return trace


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the heap a thread keeps is glibc's")
def test_memory_advice_counts_the_heap_each_worker_thread_keeps():
    trace = keras_trace(multiprocessing=False)
    recommendation, line = advise(trace, analyze(trace))
    assert recommendation.thread_bytes == MiB  # a batch a thread
    threads = recommendation.settings["workers"]
    assert threads < 4 and recommendation.changes
    assert recommendation.held_bytes == pytest.approx(recommendation.peak_bytes + threads * MiB)
    assert recommendation.current_held_bytes == pytest.approx(recommendation.current_peak_bytes + 4 * MiB)
    saved = format_bytes(int(recommendation.saved_bytes))
    assert f"is predicted to hold {saved} less (the 1.0 MiB heap each worker thread keeps counted) at " in line.text()


def test_no_thread_heap_is_counted_for_worker_processes_or_a_loader_without_workers():
    recommendation, _ = advise(keras_trace(multiprocessing=True))
    assert recommendation.thread_bytes is None
    trace = loader_trace(*CASES["model-bound"], workers=2)
    assert trace.meta.settings is not None
    trace.meta.settings["num_workers"] = 0
    assert advise(trace)[0].thread_bytes is None
