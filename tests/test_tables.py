"""Every command that prints a table prints rich tables in one style, as wide as
``COLUMNS`` or the real terminal, with no trailing spaces off a terminal, and
prints JSON instead with ``--json``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import assert_nothing_left_running
from queuetune.cli import COMMANDS, build_parser, main

TRACE = Path(__file__).parent / "data" / "traces" / "af51450-torch0.json"
ESTIMATE = ["estimate", "--shape", "224x224x3", "--batch", "64", "--framework", "torch", "--num-workers", "4"]
TABLES = {
    "table": ["table"],
    "estimate": [*ESTIMATE, "--pin-memory", "--transient-factor", "2"],
    "report": ["report", str(TRACE)],
}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def printed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out.splitlines()


def trailing(lines: list[str]) -> list[str]:
    return [line for line in lines if line != line.rstrip()]


@pytest.mark.parametrize("name", TABLES)
def test_columns_sets_the_width_and_no_line_ends_in_spaces(name, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "100")
    lines = printed(TABLES[name], capsys)
    assert lines and max(map(len, lines)) <= 100, max(lines, key=len)
    assert trailing(lines) == []


def test_the_report_uses_the_width_it_is_given(monkeypatch, capsys):
    widths = {}
    for columns in (70, 100, 160):
        monkeypatch.setenv("COLUMNS", str(columns))
        lines = printed(["report", str(TRACE)], capsys)
        widths[columns] = max(map(len, lines))
    # Its rows are longer than any of these: each width is filled, never passed.
    assert widths == {70: 70, 100: 100, 160: 160}


@pytest.mark.parametrize("name", TABLES)
def test_off_a_terminal_without_columns_lines_are_80_wide_and_not_padded(name, monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    lines = printed(TABLES[name], capsys)
    assert trailing(lines) == []
    # 80 columns, or as many as a table's numbers need where they need more (a number is never cut).
    monkeypatch.setenv("COLUMNS", "1")
    narrowest = max(map(len, printed(TABLES[name], capsys)))
    assert max(map(len, lines)) == max(80, narrowest) or max(map(len, lines)) <= 80, max(lines, key=len)
    if name == "report":
        # The report's rows are longer: each is wrapped at 80, none cut.
        assert max(map(len, lines)) == 80
        wait = " ".join(line for line in lines if "input wait" in line or "with the start" in line)
        assert "input wait (steady state)" in wait and "with the start" in wait


def test_table_and_estimate_draw_the_same_boxes(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    table = printed(["table"], capsys)
    estimate = printed(ESTIMATE, capsys)
    for lines in (table, estimate):
        assert any(line.startswith("┏") for line in lines) and any(line.startswith("└") for line in lines)
        assert not any(line.lstrip().startswith("|") for line in lines)  # no Markdown table


def test_every_command_that_prints_a_table_takes_json():
    argv = {
        "table": ["table", "--json"],
        "estimate": ["estimate", "--shape", "2x2", "--batch", "1", "--json"],
        "demo": ["demo", "--json"],
        "report": ["report", "run.json", "--json"],
        "tune": ["tune", "job.py:make", "--json"],
        "run": ["run", "--json", "job.py"],
    }
    assert set(argv) == {c.name for c in COMMANDS} - {"doctor"}  # doctor prints lines, no table
    for args in argv.values():
        assert build_parser().parse_args(args).json is True


JOB = """
import torch
from torch.utils.data import DataLoader

for batch in DataLoader(torch.arange(64).float().reshape(64, 1), batch_size=8):
    pass
"""


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_run_prints_json_instead_of_tables(tmp_path, monkeypatch, capsys):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(JOB))
    out = tmp_path / "out"
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["run", "--json", "--out", str(out), str(job)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert_nothing_left_running()
    [loader] = data["loaders"]
    assert loader["report"]["consumed_batches"] == 8 and loader["headline"]["text"].startswith("Bottleneck: ")
    assert data["summary"] == str(out.resolve() / "summary.json") and Path(data["summary"]).is_file()
    assert data["html"] == str(out.resolve() / "report.html") and data["exit_code"] == 0


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_run_fits_its_report_to_columns(tmp_path, monkeypatch, capsys):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(JOB))
    monkeypatch.setenv("COLUMNS", "100")
    lines = printed(["run", "--out", str(tmp_path / "out"), str(job)], capsys)
    assert_nothing_left_running()
    assert any("consumed (reached the model)" in line for line in lines)
    assert max(map(len, lines)) <= 100 and trailing(lines) == []


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
@pytest.mark.timeout(120)
def test_on_a_terminal_the_terminal_width_holds(tmp_path):
    import fcntl
    import struct
    import termios

    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 90, 0, 0))  # 40 rows, 90 columns
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "TERM")}
    env["TERM"] = "xterm"
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "queuetune", "report", str(TRACE)],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=env,
            cwd=tmp_path,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed with the child
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert child.wait(timeout=60) == 0
    finally:
        os.close(leader)
    lines = ANSI.sub("", b"".join(chunks).decode()).replace("\r", "").splitlines()
    assert any("consumed (reached the model)" in line for line in lines)
    assert max(len(line.rstrip()) for line in lines) <= 90
    assert_nothing_left_running()
