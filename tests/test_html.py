"""The HTML report: one self-contained page per run, with lanes, in flight and
memory per loader; loaded in a real headless Chromium where one is installed
(CI installs it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import block_import
from queuetune.analysis.report import analyze
from queuetune.cli import main
from queuetune.record.trace import Consumed, Mark, MemorySample, Produced, Trace, TraceMeta
from queuetune.render.html import Section, html_report


def sample_trace(name: str = "loader <1>") -> Trace:
    produced = [Produced(0.1 * i, 0.1 * i + 0.08, 1024, index=i, key=i, worker=f"thread-{i % 2}") for i in range(10)]
    consumed = [Consumed(0.1 * i + 0.05, 0.1 * i + 0.09, key=i, samples=[i]) for i in range(10)]
    marks = [Mark(0.0, "run_begin", 0), Mark(0.0, "epoch_begin", 0), Mark(1.1, "epoch_end", 0), Mark(1.1, "run_end", 0)]
    memory = [MemorySample(0.1 * i, 100 * 2**20 + i * 2**20, 0) for i in range(11)]
    meta = TraceMeta(name=name, framework="torch", depth=4, num_samples=10, settings={"num_workers": 2})
    return Trace(meta=meta, start=0.0, end=1.1, produced=produced, consumed=consumed, marks=marks, memory=memory)


def external_references(page: str) -> list[str]:
    """Every URL the page would fetch (SVG's namespace names are not fetched)."""
    found = re.findall(r"""(?:src|href)\s*=\s*["']([^"'#][^"']*)["']""", page)
    found += re.findall(r"url\(\s*['\"]?(?!#)([^)'\"]+)", page)
    found += re.findall(r"@import", page)
    return found


@pytest.mark.plot
def test_the_page_has_a_section_per_loader_with_its_figures_and_no_external_references():
    traces = [sample_trace(), sample_trace("second")]
    page = html_report([Section(t.meta.name or "", t, analyze(t), "keep it") for t in traces], "run <x>")
    assert page.startswith("<!DOCTYPE html>") and page.count("<section") == 2 and page.count("<svg") == 2
    assert "loader &lt;1&gt;" in page and "run &lt;x&gt;" in page and "<1>" not in page
    assert "Recommendation: keep it" in page and "Coverage" in page and "input wait (steady state)" in page
    assert external_references(page) == []
    assert "thread 0" in page and "thread 1" in page and "consumer: step (the model has the" in page


def test_the_page_says_when_figures_cannot_be_drawn(monkeypatch):
    block_import(monkeypatch, "matplotlib", "no matplotlib here")
    trace = sample_trace()
    page = html_report([Section("a", trace, analyze(trace))])
    assert "<svg" not in page and "pip install 'queuetune[plot]'" in page.replace("&#x27;", "'")


@pytest.mark.plot
@pytest.mark.timeout(60)
def test_report_writes_one_page_for_several_traces(tmp_path, capsys):
    paths = []
    for number in (1, 2):
        path = tmp_path / f"{number}.json"
        sample_trace(f"loader {number}").save(path)
        paths.append(str(path))
    page = tmp_path / "report.html"
    assert main(["report", *paths, "--html", str(page)]) == 0
    text = page.read_text()
    assert text.count("<section") == 2 and "loader 1" in text and "loader 2" in text
    assert f"HTML report written to {page}" in capsys.readouterr().out
    assert main(["report", *paths, "--plot", str(tmp_path / "x.png")]) == 2
    assert "--plot draws one trace" in capsys.readouterr().err


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def load_in_chromium(page: Path, shot: Path) -> str:
    """Load ``page`` in headless Chromium, save a screenshot; return its log (stderr)."""
    browser = chromium()
    assert browser is not None
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={shot.parent / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1200,1400",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(shot.parent)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


def console_errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if "CONSOLE" in line or "Failed to load" in line]


def colour_share(shot: Path, colour: tuple[int, int, int], tolerance: int = 12) -> float:
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=int)
    return float(np.all(np.abs(pixels - np.array(colour)) <= tolerance, axis=-1).mean())


SCRIPTS = {
    "torch": """
        import sys, time
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self):
                return 64
            def __getitem__(self, i):
                time.sleep(0.004)
                return torch.zeros(16)

        loader = DataLoader(Slow(), batch_size=4, num_workers=2)
        for epoch in range(2):
            for batch in loader:
                time.sleep(0.002)
        sys.exit(3)
        """,
    "keras": """
        import sys, time
        import numpy as np
        import keras

        class Data(keras.utils.PyDataset):
            def __init__(self):
                super().__init__(workers=2, max_queue_size=3)
            def __len__(self):
                return 12
            def __getitem__(self, i):
                time.sleep(0.004)
                return np.ones((8, 4), "float32"), np.zeros((8, 1), "float32")

        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(Data(), epochs=2, verbose=0)
        sys.exit(3)
        """,
    "tf": """
        import sys, time
        import tensorflow as tf

        dataset = tf.data.Dataset.range(64).batch(4).prefetch(2)
        for epoch in range(2):
            for batch in dataset:
                time.sleep(0.002)
        sys.exit(3)
        """,
}


@pytest.mark.plot
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "framework",
    [
        pytest.param("torch", marks=pytest.mark.torch),
        pytest.param("keras", marks=pytest.mark.keras),
        pytest.param("tf", marks=pytest.mark.tf),
    ],
)
def test_a_runs_html_report_renders_in_headless_chromium_with_its_lanes(tmp_path, framework):
    if chromium() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no Chromium: scripts/test installs it (apt-get install chromium)")
        pytest.skip("no Chromium here (CI installs it)")
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(SCRIPTS[framework]))
    out = tmp_path / "D"
    done = subprocess.run(
        [sys.executable, "-m", "queuetune", "run", "--out", str(out), str(job)],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert done.returncode == 3, done.stderr
    [trace] = sorted(out.glob("[0-9]*.json"))
    assert main(["report", str(trace), "--json"]) == 0
    page = out / "report.html"
    assert f"HTML report: {page}" in done.stdout
    assert external_references(page.read_text()) == []
    shot = tmp_path / "shot.png"
    log = load_in_chromium(page, shot)
    assert console_errors(log) == []
    # The lanes: the builds in blue, the consumer's steps in green and, where it waited
    # for its input long enough to see, its waits in red.
    assert colour_share(shot, (31, 119, 180)) > 0.0008
    assert colour_share(shot, (44, 160, 44)) > 0.0005
    # (The lane is about 1 % of the page, and its red is the waiting's share of it:
    # 5 % of the lane is about 0.0005 of the page; its share per pixel is tested apart.)
    if analyze(Trace.load(trace)).input_bound_fraction >= 0.05:
        assert colour_share(shot, (214, 39, 40)) > 0.0001
    # The same check finds what a broken page would show.
    broken = tmp_path / "broken.html"
    broken.write_text('<!DOCTYPE html><html><body><script>console.error("broken")</script></body></html>')
    assert console_errors(load_in_chromium(broken, tmp_path / "broken.png")) != []
    assert colour_share(tmp_path / "broken.png", (31, 119, 180)) == 0


#: The fields the Trace Event Format requires of each phase used.
REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "C": {"name", "ph", "ts", "pid", "args"},
    "M": {"name", "ph", "pid", "args"},
    "i": {"name", "ph", "ts", "pid", "tid", "s"},
}


@pytest.mark.timeout(60)
def test_perfetto_export_follows_the_trace_event_format(tmp_path, capsys):
    import json

    trace = sample_trace()
    trace.marks.append(Mark(0.5, "depth", 6))
    path = tmp_path / "t.json"
    trace.save(path)
    out = tmp_path / "trace.perfetto.json"
    assert main(["report", str(path), "--format", "perfetto", "-o", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["displayTimeUnit"] == "ms"
    events = document["traceEvents"]
    for event in events:
        assert REQUIRED[event["ph"]] <= set(event), event
        if "ts" in event:
            assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        if event["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in event["args"].values())
        if event["ph"] == "M":
            assert event["name"] in {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}
        if event["ph"] == "i":
            assert event["s"] in {"g", "p", "t"}
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {"consumer", "worker thread 0", "worker thread 1"}
    builds = [e for e in events if e["ph"] == "X" and e["name"] == "build"]
    assert len(builds) == 10 and builds[3]["ts"] == pytest.approx(0.3e6) and builds[3]["dur"] == pytest.approx(8e4)
    assert len([e for e in events if e["name"] == "wait"]) == 10
    assert len([e for e in events if e["name"] == "step"]) == 9
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"in flight (batches)", "in flight (bytes)", "memory (bytes)", "depth"}
    peak = max(e["args"]["batches"] for e in events if e["name"] == "in flight (batches)")
    assert peak == analyze(trace).peak_in_flight_batches
    # To stdout when no file is given; --output alone is a usage error.
    assert main(["report", str(path), "--format", "perfetto"]) == 0
    assert json.loads(capsys.readouterr().out)["traceEvents"]
    assert main(["report", str(path), "-o", str(tmp_path / "x")]) == 2
    assert "--output needs --format" in capsys.readouterr().err


# --- what the page shows: the consumer's lane, the workers' lanes, legends, code ----------------

RED, LIGHT_RED, GREEN = (214, 39, 40), (255, 152, 150), (44, 160, 44)


def waiting_trace(share: float, steps: int = 100, period: float = 0.1, handover: bool = False) -> Trace:
    """A consumer that waits ``share`` of each ``period`` for its batch, then steps: each
    batch built by one of two workers (pids) as it is asked for, or, with ``handover``,
    built long before and waited for in its hand-over."""
    produced, consumed = [], []
    for i in range(steps):
        asked = 0.05 + i * period
        got = asked + share * period
        built = asked - period if handover else got
        produced.append(Produced(built - 0.05, built, 1024, index=i, key=i, worker=str(4000 + i % 2)))
        consumed.append(Consumed(asked, got, key=i))
    end = 0.05 + steps * period
    marks = [Mark(0.05, "run_begin", 0), Mark(end, "run_end", 0)]
    return Trace(meta=TraceMeta(depth=2), start=0.0, end=end + 0.01, produced=produced, consumed=consumed, marks=marks)


def lane_pixels(trace: Trace):
    """The consumer's lane, as pixels of the figure drawn at 96 dpi (as a browser shows the SVG)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from queuetune.render.timeline import timeline_figure

    figure = timeline_figure(trace, analyze(trace))
    canvas = FigureCanvasAgg(figure)
    figure.set_dpi(96)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())[..., :3].astype(int)
    lanes = figure.axes[0]
    begin, end = trace.consumed[0].requested - trace.start, trace.consumed[-1].consumed - trace.start
    (x0, y0), (x1, y1) = lanes.transData.transform([(begin, 0.35), (end, -0.35)])
    height = pixels.shape[0]
    return pixels[round(height - y1) : round(height - y0), round(x0) + 1 : round(x1) - 1]


def share_of(pixels, colour) -> float:
    """The share of ``pixels`` nearest to ``colour`` of the lanes' colours and white (an
    anti-aliased pixel between two columns counts for the colour it is nearer to)."""
    import numpy as np

    palette = np.array([RED, LIGHT_RED, GREEN, (31, 119, 180), (255, 255, 255)])
    nearest = np.argmin(((pixels[..., None, :] - palette) ** 2).sum(axis=-1), axis=-1)
    return float((nearest == palette.tolist().index(list(colour))).mean())


@pytest.mark.plot
@pytest.mark.parametrize(("share", "low", "high"), [(0.002, 0.0, 0.01), (0.05, 0.03, 0.07), (0.31, 0.27, 0.36)])
def test_the_consumers_lane_is_as_red_as_the_share_of_time_it_waited(share, low, high):
    pixels = lane_pixels(waiting_trace(share))
    assert low <= share_of(pixels, RED) <= high
    assert share_of(pixels, LIGHT_RED) < 0.01
    assert 1 - high - 0.03 <= share_of(pixels, GREEN) <= 1 - low + 0.01


@pytest.mark.plot
def test_the_consumers_lane_tells_the_hand_over_of_built_batches_from_waiting_for_builds():
    pixels = lane_pixels(waiting_trace(0.31, handover=True))
    assert 0.27 <= share_of(pixels, LIGHT_RED) <= 0.36 and share_of(pixels, RED) < 0.01


def test_the_consumers_shares_per_column_are_exact_time_averages():
    import numpy as np

    from queuetune.render.timeline import consumer_shares

    trace = waiting_trace(0.002)
    edges = np.linspace(0.05, 10.05, 801)
    shares = list(consumer_shares(trace, edges).values())
    starved, handed, step = shares
    assert starved.mean() == pytest.approx(0.002, rel=1e-6) and handed.max() == 0
    assert step.mean() == pytest.approx(0.998, rel=1e-6)
    assert starved.max() < 0.02  # no column reads as a wait: each wait is 0.2 ms of a 12.5 ms column
    assert np.all(starved + handed + step <= 1 + 1e-9)


def epochs_of_fresh_workers() -> Trace:
    """Two epochs, each with two new worker processes (pids 1001, 1002, then 2002, 2001)."""
    produced, consumed, marks = [], [], []
    for run, pids in enumerate((["1001", "1002"], ["2002", "2001"])):
        begin = run * 2.0
        marks += [Mark(begin, "run_begin", run), Mark(begin + 1.5, "run_end", run)]
        for i in range(10):
            key = run * 10 + i
            produced.append(Produced(begin + 0.1 * i, begin + 0.1 * i + 0.08, 64, key=key, worker=pids[i % 2]))
            consumed.append(Consumed(begin + 0.1 * i + 0.05, begin + 0.1 * i + 0.09, run=run, epoch=run, key=key))
    return Trace(meta=TraceMeta(depth=4), start=0.0, end=3.6, produced=produced, consumed=consumed, marks=marks)


@pytest.mark.plot
def test_workers_restarted_each_epoch_keep_their_lanes_named_by_number():
    from queuetune.render.timeline import timeline_figure, worker_lanes

    trace = epochs_of_fresh_workers()
    assert worker_lanes(trace) == {"1001": "worker 0", "1002": "worker 1", "2002": "worker 0", "2001": "worker 1"}
    figure = timeline_figure(trace, analyze(trace))
    assert [label.get_text() for label in figure.axes[0].get_yticklabels()] == ["consumer", "worker 0", "worker 1"]
    page = html_report([Section("a", trace, analyze(trace))])
    assert "worker 0" in page and "worker 1" in page and "4 workers in 2 lanes" in page
    words = re.sub(r'\bd="[^"]*"', "", page)  # the page without the SVG's paths' coordinates
    assert "process" not in words and not any(pid in words for pid in ("1001", "1002", "2001", "2002"))


def test_threads_processes_and_ray_nodes_are_numbered_apart():
    from queuetune.render.timeline import worker_lanes

    workers = ["thread-77", "a:515", "913", "thread-12", "a:516", "b:515", ""]
    trace = Trace(produced=[Produced(0.1 * i, 0.1 * i + 0.05, 8, worker=w) for i, w in enumerate(workers)], end=1.0)
    assert list(worker_lanes(trace).values()) == [
        "thread 0",
        "worker 0 on node a",
        "worker 0",
        "thread 1",
        "worker 1 on node a",
        "worker 0 on node b",
        "the consumer's thread",
    ]


@pytest.mark.plot
def test_every_series_is_in_a_legend_clear_of_the_data_and_the_depth_is_explained():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from queuetune.render.timeline import timeline_figure

    trace = sample_trace()
    trace.meta.settings = {"max_bytes": 8192}
    trace.marks += [Mark(0.0, "depth", 2), Mark(0.5, "depth", 3)]
    trace.memory = [MemorySample(0.1 * i, 100 * 2**20, 2**20 * i, 2) for i in range(11)]
    trace.consumed[3] = Consumed(0.3, 0.38, key=3, samples=[3])  # a batch built before it was asked for
    figure = timeline_figure(trace, analyze(trace))
    FigureCanvasAgg(figure).draw()
    legends = [axes.get_legend() for axes in figure.axes if axes.get_legend() is not None]
    entries = " | ".join(text.get_text().replace("\n", " ") for legend in legends for text in legend.get_texts())
    for series in (
        "a worker building a batch",
        "waiting for a batch not yet built",
        "waiting for the hand-over",
        "step (the model has the batch)",
        "batches in flight",
        "KiB in flight",
        "depth: the most batches",
        "budget (max_bytes): 8.0 KiB",
        "the process's RSS",
        "workers' unique memory",
    ):
        assert series in entries, series
    # Every line drawn in a panel is one of its legend's entries.
    for axes in figure.axes:
        lines = [line.get_label() for line in axes.get_lines()]
        assert all(not label.startswith("_") and label.replace("\n", " ") in entries for label in lines), lines
    # No legend covers any panel (the twin axis included).
    renderer = figure.canvas.get_renderer()
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for axes in figure.axes:
            assert not box.overlaps(axes.get_window_extent(renderer)), legend
    page = html_report([Section("a", trace, analyze(trace))])
    assert "the dashed line is the depth" in page


def test_text_between_backticks_is_code_in_the_page():
    trace = sample_trace()
    report = analyze(trace)
    report.notes.append("call `sampler.set_epoch(epoch)` before <each> epoch")
    page = html_report([Section("a", trace, report, "num_workers=1; `queuetune tune` measures it")])
    assert "<code>queuetune tune</code> measures it" in page
    assert "<code>sampler.set_epoch(epoch)</code> before &lt;each&gt; epoch" in page
    assert "`" not in page
