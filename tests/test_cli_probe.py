"""The CLI's demo and report commands: JSON schemas, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import queuetune
from queuetune.cli import main

RUN_KEYS = {
    "loader",
    "workers",
    "max_queue_size",
    "batch_size",
    "consumed_batches",
    "produced_batches",
    "peak_in_flight_batches",
    "peak_in_flight_bytes",
    "first_batch_seconds",
    "built_before_asked",
    "steady_wait_seconds",
    "steady_seconds",
    "input_bound_fraction",
}


@pytest.mark.keras
@pytest.mark.timeout(180)
def test_demo_json_reproduces_the_article_experiment():
    pytest.importorskip("keras")
    out = subprocess.run(
        [sys.executable, "-m", "queuetune.cli", "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["backend"] == "torch" and data["keras"].startswith("3.") and data["step_ms"] == 5.0
    assert [(r["loader"], r["workers"], r["max_queue_size"]) for r in data["runs"]] == [
        ("pydataset", 4, 10),
        ("pydataset", 4, 2),
        ("generator", 0, None),
    ]
    for run in data["runs"]:
        assert RUN_KEYS <= set(run)
        assert run["batch_size"] == 128
        assert run["consumed_batches"] == 10 and run["predicted_samples"] == 1280
        assert 0.0 <= run["input_bound_fraction"] <= 1.0
        assert run["first_batch_seconds"] > 0 and run["built_before_asked"] >= 0
        # The steady state is the run after its workers' first batches: at most what follows the first.
        assert 0 < run["steady_seconds"] <= run["wall_seconds"] - run["first_batch_seconds"] + 1e-9
        assert run["steady_wait_seconds"] <= run["input_wait_seconds"]
        assert run["peak_in_flight_bytes"] == run["peak_in_flight_batches"] * data["batch_bytes"]
    q10, q2, gen = data["runs"]
    # Keras starts up to max_queue_size + 1 batches the model never sees
    assert 10 < q10["produced_batches"] <= 21
    assert 10 < q2["produced_batches"] <= 13
    assert q2["produced_batches"] < q10["produced_batches"]
    assert gen["produced_batches"] == 10
    assert data["batch_bytes"] == 128 * 60 * 4 + 128 * 10 * 4
    assert data["advice"]


def saved_trace(tmp_path):
    watched = queuetune.watch([np.zeros(10, "float32")] * 3)
    for _ in watched:
        pass
    probe = queuetune.probe_of(watched)
    path = tmp_path / "trace.json"
    probe.trace().save(path)
    probe.close()
    return path


@pytest.mark.timeout(30)
def test_report_command_renders_a_saved_trace(tmp_path, capsys):
    path = saved_trace(tmp_path)
    assert main(["report", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["produced_batches"] == 3 and data["consumed_batches"] == 3
    assert data["peak_in_flight_bytes"] == 40


@pytest.mark.plot
@pytest.mark.timeout(30)
def test_report_command_plots_a_saved_trace(tmp_path, capsys):
    path = saved_trace(tmp_path)
    png = tmp_path / "flight.png"
    assert main(["report", str(path), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "produced (built)" in text and "plot written to" in text
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "cannot read trace"),
        ("{", "not valid JSON"),
        ('{"format": "queuetune-trace", "version": 0}', "version 0"),
    ],
)
def test_report_command_bad_trace_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert str(path) in err  # the line names the file


def test_report_names_the_bad_one_of_several_traces(tmp_path, capsys):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    queuetune.Trace().save(good)
    bad.write_text("{")
    assert main(["report", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"queuetune: error: {bad}: trace is not valid JSON") and err.count("\n") == 1


def test_an_html_report_that_cannot_be_written_is_one_line_naming_it_and_exit_2(tmp_path, capsys):
    trace = tmp_path / "t.json"
    queuetune.Trace().save(trace)
    target = tmp_path / "missing" / "r.html"
    assert main(["report", str(trace), "--html", str(target)]) == 2
    assert capsys.readouterr().err == f"queuetune: error: {target}: No such file or directory\n"


def test_bare_queuetune_lists_its_commands(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    commands = "table, estimate, demo, report, tune, run, doctor"
    assert err == f"queuetune: error: give a command: {commands} (queuetune -h for more)\n"


@pytest.mark.parametrize("args", [["demo", "--steps", "0"], ["demo", "--batch-size", "-3"], ["demo", "--steps", "x"]])
def test_demo_bad_arguments_exit_2(capsys, args):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("queuetune: error:") and err.count("\n") == 1
