"""`queuetune run`: a program run with every loader it iterates watched, its
exit code kept, each loader's report printed and its trace saved."""

from __future__ import annotations

import dataclasses
import html as html_lib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import assert_nothing_left_running
from queuetune.analysis.report import analyze
from queuetune.cli import main
from queuetune.common.imports import ImportHooks
from queuetune.probing.session import Session
from queuetune.program import run_program
from queuetune.record.trace import Trace
from queuetune.run.runner import Target

TORCH_SCRIPT = """
import sys
import torch
from torch.utils.data import DataLoader

loader = DataLoader(torch.arange(64).float().reshape(64, 1), batch_size=8, num_workers=2)
for epoch in range(2):
    for batch in loader:
        pass
print("trained", sys.argv[1:])
sys.exit(3)
"""


def script(tmp_path: Path, text: str, name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def queuetune_cli() -> list[str]:
    return [sys.executable, "-m", "queuetune"]


def saved(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.json") if not p.name.startswith("summary."))


@pytest.mark.torch
@pytest.mark.timeout(180)
def test_a_torch_script_keeps_its_exit_code_and_leaves_a_trace_the_report_reads(tmp_path):
    job = script(tmp_path, TORCH_SCRIPT)
    out = tmp_path / "D"
    done = subprocess.run(
        [*queuetune_cli(), "run", "--out", str(out), str(job), "--epochs", "2"],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr
    assert "trained ['--epochs', '2']" in done.stdout
    assert "dataloader 1 (job.py:8)" in done.stdout
    assert "consumed (reached the model)" in done.stdout and "16 batches" in done.stdout
    assert "recommendation:" in done.stdout and "input wait (steady state)" in done.stdout
    [trace_file] = saved(out)
    assert trace_file.name == "01-dataloader.json"
    assert (out / "report.html").is_file() and f"HTML report: {out / 'report.html'}" in done.stdout
    # The same headline opens the terminal's report, the HTML page and the JSON summary.
    summary = json.loads((out / "summary.json").read_text())
    assert f"JSON summary: {out / 'summary.json'}" in done.stdout
    [loader] = summary["loaders"]
    headline = loader["headline"]["text"]
    assert headline.startswith("Bottleneck: ") and headline in " ".join(done.stdout.split())
    assert loader["trace"] == str(out / "01-dataloader.json") and summary["exit_code"] == 3
    assert loader["report"]["consumed_batches"] == 16 and loader["recommendation"]["text"]
    assert html_lib.escape(headline) in (out / "report.html").read_text()
    trace = Trace.load(trace_file)
    assert len(trace.consumed) == 16 and len(trace.produced) == 16
    assert trace.meta.framework == "torch" and trace.meta.settings["num_workers"] == 2
    report = subprocess.run(
        [*queuetune_cli(), "report", str(trace_file), "--json"], capture_output=True, text=True, timeout=60
    )
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["consumed_batches"] == 16
    assert data["headline"]["text"] == headline
    # The run's folder stands for its traces: the summary beside them is left out.
    folder = subprocess.run([*queuetune_cli(), "report", str(out)], capture_output=True, text=True, timeout=60)
    assert folder.returncode == 0, folder.stderr
    assert headline[:40] in folder.stdout
    assert [c["never_count"] for c in data["coverage"]] == [0, 0]


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.torch
@pytest.mark.pillow
@pytest.mark.timeout(300)
def test_the_torchvision_example_runs_under_queuetune_run(tmp_path):
    images = tmp_path / "images"
    made = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_images.py"), str(images), "--count", "48", "--classes", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    assert sorted(p.name for p in images.iterdir()) == ["class_0", "class_1", "class_2"]
    assert len(list(images.glob("class_*/*.jpg"))) == 48
    out = tmp_path / "D"
    example = [str(EXAMPLES / "train_torchvision.py"), str(images), "--steps", "5", "--batch", "4"]
    done = subprocess.run(
        [*queuetune_cli(), "run", "--out", str(out), "--no-html", *example],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert "5 steps of 4 images" in done.stdout and "dataloader 1 (train_torchvision.py:" in done.stdout
    [trace_file] = saved(out)
    trace = Trace.load(trace_file)
    assert len(trace.consumed) == 5 and trace.meta.settings["num_workers"] == 2
    seen = [s for c in trace.consumed for s in c.samples]
    assert len(seen) == 20 and len(set(seen)) == 20
    # As a stream (an IterableDataset sharded among the workers): samples keyed by content.
    streamed = subprocess.run(
        [*queuetune_cli(), "run", "--out", str(tmp_path / "S"), "--no-html", *example, "--stream"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert streamed.returncode == 0, streamed.stderr
    [cov] = analyze(Trace.load(saved(tmp_path / "S")[0])).coverage
    assert (cov.unit, cov.consumed, cov.duplicates, cov.unkeyed) == ("sample key", 20, [], 0)
    missing = subprocess.run(
        [sys.executable, str(EXAMPLES / "train_torchvision.py"), str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "make one with examples/make_images.py" in missing.stderr


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_patching_is_undone_and_every_loader_gets_its_own_trace(tmp_path, capsys):
    from torch.utils.data import DataLoader

    original = DataLoader.__iter__
    job = script(
        tmp_path,
        """
        from torch.utils.data import DataLoader
        train = DataLoader(list(range(40)), batch_size=4)
        test = DataLoader(list(range(12)), batch_size=4)
        for epoch in range(2):
            for batch in train:
                pass
        for batch in test:
            pass
        """,
    )
    result = run_program(Target(str(job)), tmp_path / "out")
    assert DataLoader.__iter__ is original
    assert result.exit_code == 0
    assert [loader.label for loader in result.loaders] == ["dataloader 1 (job.py:6)", "dataloader 2 (job.py:8)"]
    assert [loader.report.consumed_batches for loader in result.loaders] == [20, 3]
    assert [p.name for p in saved(tmp_path / "out")] == ["01-dataloader.json", "02-dataloader.json"]
    # After the session, a loader is iterated as before: nothing is recorded.
    assert [b.tolist() for b in DataLoader(list(range(4)), batch_size=2)] == [[0, 1], [2, 3]]
    assert len(result.loaders) == 2


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_a_long_enough_run_gets_a_recommendation_from_the_model(tmp_path, capsys):
    job = script(
        tmp_path,
        """
        import time
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self):
                return 240
            def __getitem__(self, i):
                time.sleep(0.001)
                return torch.zeros(64)

        for batch in DataLoader(Slow(), batch_size=4, num_workers=2, prefetch_factor=4):
            time.sleep(0.004)
        """,
    )
    assert main(["run", "--out", str(tmp_path / "out"), str(job)]) == 0
    printed = capsys.readouterr().out
    [line] = [line for line in printed.splitlines() if line.startswith("recommendation:")]
    assert "num_workers=" in line and "prefetch_factor=" in line and "no recommendation" not in line


@pytest.mark.keras
@pytest.mark.timeout(180)
def test_a_keras_script_has_its_pydataset_and_generator_watched(tmp_path, capsys):
    import keras

    saved_fit = keras.Model.__dict__.get("fit")
    job = script(
        tmp_path,
        """
        import numpy as np
        import keras

        class Data(keras.utils.PyDataset):
            def __init__(self):
                super().__init__(workers=2, max_queue_size=3)
            def __len__(self):
                return 6
            def __getitem__(self, i):
                return np.ones((8, 4), "float32"), np.zeros((8, 1), "float32")

        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(Data(), epochs=2, verbose=0)

        def batches():
            for _ in range(5):
                yield (np.ones((8, 4), "float32"),)

        model.predict(batches(), steps=5, verbose=0)
        """,
    )
    assert main(["run", "--out", str(tmp_path / "out"), str(job)]) == 0
    printed = capsys.readouterr().out
    assert "pydataset 1 (job.py:15)" in printed and "generator 1 (job.py:21)" in printed
    traces = {p.name: Trace.load(p) for p in saved(tmp_path / "out")}
    assert sorted(traces) == ["01-pydataset.json", "02-generator.json"]
    pydataset, generator = traces["01-pydataset.json"], traces["02-generator.json"]
    assert pydataset.meta.framework == "keras" and pydataset.meta.settings["max_queue_size"] == 3
    assert len(pydataset.consumed) == 12  # 6 steps, 2 epochs, counted by the callback
    assert len(generator.consumed) == 5
    assert generator.meta.framework == "generator" and generator.meta.settings == {"backend": "torch"}
    assert "Keras reads a generator with no queue of its own" in printed
    assert keras.Model.__dict__.get("fit") is saved_fit


@pytest.mark.tf
@pytest.mark.timeout(180)
def test_a_tf_data_script_has_each_pass_watched(tmp_path, capsys):
    from tensorflow.python.data.ops import dataset_ops

    original = dataset_ops.DatasetV2.__iter__
    job = script(
        tmp_path,
        """
        import tensorflow as tf

        dataset = tf.data.Dataset.range(30).batch(5).prefetch(2)
        for epoch in range(2):
            for batch in dataset:
                pass
        """,
    )
    assert main(["run", "--out", str(tmp_path / "out"), str(job)]) == 0
    printed = capsys.readouterr().out
    assert "tf.data 1 (job.py:6)" in printed
    [path] = saved(tmp_path / "out")
    trace = Trace.load(path)
    assert trace.meta.framework == "tfdata" and len(trace.consumed) == 12
    assert sum(1 for m in trace.marks if m.kind == "run_begin") == 2
    assert "tf.data builds its batches inside TensorFlow" in printed
    assert dataset_ops.DatasetV2.__iter__ is original


@pytest.mark.timeout(60)
def test_the_programs_own_traceback_and_exit_code_when_it_raises(tmp_path, capsys):
    job = script(
        tmp_path,
        """
        import queuetune

        with queuetune.Prefetcher(range(6), max_bytes="1MiB", workers=1) as loader:
            for item in loader:
                pass

        def broken():
            raise ValueError("the data is bad")

        broken()
        """,
    )
    assert main(["run", "--out", str(tmp_path / "out"), str(job)]) == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert str(job) in lines[1] and lines[-1] == "ValueError: the data is bad"
    assert "runpy" not in captured.err and "queuetune" not in captured.err.replace(str(tmp_path), "")
    assert "prefetcher 1 (job.py:4)" in captured.out
    assert "the Prefetcher sizes its own queue" in captured.out


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("ending", "code", "err"),
    [
        ("sys.exit('stopped by hand')", 1, "stopped by hand"),
        ("sys.exit(0)", 0, ""),
        ("raise KeyboardInterrupt", 130, "KeyboardInterrupt"),
    ],
)
def test_exits_and_ctrl_c_still_print_the_reports(tmp_path, capsys, ending, code, err):
    job = script(
        tmp_path,
        f"""
        import sys
        import queuetune

        loader = queuetune.Prefetcher(range(4), max_bytes="1MiB", workers=1)
        for item in loader:
            pass
        {ending}
        """,
    )
    assert main(["run", "--out", str(tmp_path / "out"), str(job)]) == code
    captured = capsys.readouterr()
    assert err in captured.err
    assert "prefetcher 1 (job.py:5)" in captured.out
    assert [p.name for p in saved(tmp_path / "out")] == ["01-prefetcher.json"]


@pytest.mark.timeout(60)
def test_a_module_runs_with_its_arguments(tmp_path, capsys, monkeypatch):
    package = tmp_path / "jobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text("import sys\nprint('args', sys.argv[1:], __name__)\nsys.exit(4)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--out", str(tmp_path / "out"), "--no-html", "-m", "jobs.train", "--lr", "0.1"]) == 4
    printed = capsys.readouterr().out
    assert "args ['--lr', '0.1'] __main__" in printed
    assert "queuetune: no loader was iterated" in printed
    assert list((tmp_path / "out").iterdir()) == []
    # With the HTML report asked for, and a relative folder: no report of nothing.
    assert main(["run", "--out", "relative", "-m", "jobs.train"]) == 4
    printed = capsys.readouterr().out
    assert "no loader was iterated" in printed and "HTML report" not in printed
    assert list((tmp_path / "relative").iterdir()) == []


@pytest.mark.timeout(60)
def test_bad_input_is_one_line_and_exit_2_before_the_program_starts(tmp_path):
    marker = tmp_path / "ran"
    job = script(tmp_path, f"open({str(marker)!r}, 'w').close()\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cases = [
        (["run", str(tmp_path / "missing.py")], "no such script"),
        (["run", str(tmp_path)], "not a file"),
        (["run", "-m", "no_such_module_anywhere"], "no module named 'no_such_module_anywhere'"),
        (["run", "--out", str(blocker / "sub"), str(job)], "cannot write traces to"),
        (["run"], "give a script to run"),
    ]
    for argv, message in cases:
        done = subprocess.run([*queuetune_cli(), *argv], capture_output=True, text=True, timeout=50)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.startswith("queuetune: error: ") and message in done.stderr
        assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
    assert not marker.exists()


@pytest.mark.timeout(30)
def test_hooks_run_when_a_module_is_first_imported_and_not_after_removal(tmp_path, monkeypatch):
    (tmp_path / "late_module_a.py").write_text("VALUE = 1\n")
    (tmp_path / "late_module_b.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hooks = ImportHooks()
    hooks.add("late_module_a", lambda module: seen.append(module.VALUE))
    hooks.add("late_module_b", lambda module: seen.append(module.VALUE))
    assert hooks in sys.meta_path and seen == []
    import late_module_a

    assert seen == [1]
    assert late_module_a.__loader__.__class__.__name__ == "SourceFileLoader"
    hooks.remove()
    assert hooks not in sys.meta_path
    import late_module_b  # noqa: F401

    assert seen == [1]
    for name in ("late_module_a", "late_module_b"):
        sys.modules.pop(name, None)


@pytest.mark.timeout(30)
def test_a_session_notes_loaders_it_leaves_alone_once_per_type():
    session = Session()
    session.leave([1], "not watched")
    session.leave([2], "said again")
    session.leave((3,), "a tuple")
    assert session.left_alone == {"list": "not watched", "tuple": "a tuple"}


@pytest.mark.timeout(60)
def test_the_live_line_shows_each_loader_on_a_terminal_only(tmp_path):
    import io

    from rich.console import Console

    from queuetune.sinks.live_line import live_line

    job = script(
        tmp_path,
        """
        import time
        import queuetune

        with queuetune.Prefetcher(range(20), max_bytes="1MiB", workers=1) as loader:
            for item in loader:
                time.sleep(0.02)
        """,
    )
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=200)
    result = run_program(Target(str(job)), tmp_path / "out", while_running=lambda s: live_line(s, terminal))
    assert result.exit_code == 0 and len(result.loaders) == 1
    shown = screen.getvalue()
    assert "queuetune: prefetcher 1 (job.py:5): " in shown and " batches/s, in flight " in shown
    piped = io.StringIO()
    with live_line(Session(), Console(file=piped)) as showing:
        assert showing is False
    assert piped.getvalue() == ""


@pytest.mark.timeout(30)
def test_a_hook_that_fails_leaves_the_framework_alone_and_the_import_works(tmp_path, monkeypatch):
    from queuetune.frameworks import FRAMEWORKS, Framework, adapters
    from queuetune.frameworks.base import Adapter

    (tmp_path / "late_framework.py").write_text("VALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    @dataclasses.dataclass(frozen=True)
    class Broken(Adapter):
        def autowatch(self, session, module):
            raise AttributeError("no DataLoader in this version")

    found = adapters.adapter_of
    monkeypatch.setattr(adapters, "adapter_of", lambda spec: Broken(spec) if spec.name == "broken" else found(spec))
    monkeypatch.setitem(FRAMEWORKS, "broken", Framework("broken", autowatch_module="late_framework"))
    with Session() as session:
        import late_framework

        assert late_framework.VALUE == 3
    sys.modules.pop("late_framework", None)
    assert session.left_alone == {"broken loader": "queuetune could not hook in (no DataLoader in this version)"}


@pytest.mark.timeout(60)
def test_the_paths_it_prints_are_absolute_for_a_relative_folder(tmp_path, capsys, monkeypatch):
    job = script(
        tmp_path,
        """
        import queuetune
        with queuetune.Prefetcher(list(range(4)), max_bytes="1MiB", workers=1) as loader:
            assert list(loader) == [0, 1, 2, 3]
        """,
    )
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--out", "rel", str(job)]) == 0
    printed = capsys.readouterr().out
    folder = (tmp_path / "rel").resolve()
    assert f"trace: {folder / '01-prefetcher.json'}\n" in printed
    assert f"HTML report: {folder / 'report.html'}\n" in printed
    assert_nothing_left_running()
