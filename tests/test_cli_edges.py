"""The command line's edges, as a new user meets them: a reader that goes away
keeps the program's code, errors name the flag, a factory's exception is one
line and its own traceback, unknown options are named, and the report of a
Prefetcher prints like a watched loader's."""

from __future__ import annotations

import io
import os
import textwrap

import numpy as np
import pytest
from rich.console import Console

import queuetune
from helpers import assert_nothing_left_running, queuetune_process, run_cli


@pytest.mark.timeout(120)
@pytest.mark.parametrize("code", [0, 3])
@pytest.mark.parametrize("json", [False, True])
def test_run_keeps_the_programs_code_when_the_reader_goes_away(code, json, tmp_path):
    (tmp_path / "job.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            import queuetune
            for batch in queuetune.Prefetcher(range(8), max_bytes="1MiB"):
                pass
            sys.exit({code})
            """
        )
    )
    argv = ["run", "--out", str(tmp_path / "out"), *(["--json"] if json else []), "job.py"]
    got, err = queuetune_process(argv, tmp_path, close_stdout=True)
    assert got == code, err
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert (tmp_path / "out" / "summary.json").is_file()
    assert_nothing_left_running()


@pytest.mark.parametrize("flag", ["--frobnicate", "-x"])
def test_an_unknown_option_before_the_command_is_named(flag):
    code, out, err = run_cli([flag])
    assert code == 2 and out == ""
    assert err == f"queuetune: error: unrecognized arguments: {flag} (queuetune -h for more)\n"


def test_no_command_still_lists_the_commands():
    code, _, err = run_cli([])
    assert code == 2 and err.startswith("queuetune: error: give a command: table, estimate")


JOB = """
import numpy as np

def make(**settings):
    return [np.zeros(4) for _ in range(40)]

def broken(**settings):
    return helper()

def helper():
    raise RuntimeError("no data here")
"""


def test_tune_names_warmup_where_it_does_not_fit_the_steps(tmp_path):
    (tmp_path / "f.py").write_text(JOB)
    code, out, err = run_cli(["tune", f"{tmp_path / 'f.py'}:make", "--steps", "5"])
    assert code == 2 and out == ""
    assert err == "queuetune: error: argument --warmup: must be less than --steps (5), got 10\n"


def test_a_factory_that_raises_is_one_line_and_its_own_traceback(tmp_path):
    (tmp_path / "f.py").write_text(JOB)
    spec = f"{tmp_path / 'f.py'}:broken"
    code, err = queuetune_process(["tune", spec], tmp_path)
    assert code == 2
    lines = err.splitlines()
    assert lines[0] == f"queuetune: error: {spec} raised RuntimeError: no data here"
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "RuntimeError: no data here"
    # Only the factory's frames: broken, then helper; none of queuetune's.
    frames = [line for line in lines if line.strip().startswith('File "')]
    assert [f.rsplit(" in ", 1)[1] for f in frames] == ["broken", "helper"]
    assert "queuetune" not in "".join(frames).replace(str(tmp_path), "")


def test_a_file_that_raises_as_it_is_imported_is_one_line_and_its_traceback(tmp_path):
    (tmp_path / "g.py").write_text("raise KeyError('setup')\n")
    code, err = queuetune_process(["tune", "g.py:make"], tmp_path)
    assert code == 2
    lines = err.splitlines()
    assert lines[0] == "queuetune: error: g.py raised KeyError: 'setup'"
    assert lines[-1] == "KeyError: 'setup'"
    assert "cli.py" not in err and f"queuetune{os.sep}cli" not in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_report_of_a_prefetcher_prints_like_a_watched_loaders(mode):
    with queuetune.Prefetcher(
        [np.zeros(64) for _ in range(6)], mode=mode, workers=2, max_bytes="1MiB", sample_memory=False
    ) as p:
        assert len(list(p)) == 6
        out = io.StringIO()
        queuetune.print_report(p, Console(file=out, width=100))
        assert queuetune.report(p).consumed_batches == 6
        assert queuetune.probe_of(p).report().produced_batches == 6
    text = out.getvalue()
    assert "produced (built)" in text and "consumed (reached the model)" in text
    assert_nothing_left_running()
