"""`queuetune run` writes its report however the program ends: ``os._exit``,
SIGTERM, Ctrl-C; and the loaders of the processes the program forks go into it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import assert_nothing_left_running
from queuetune.program import run_program
from queuetune.run.runner import Target

LOADER = """
import queuetune

def iterate(n):
    with queuetune.Prefetcher(range(n), max_bytes="1MiB", workers=1) as loader:
        for item in loader:
            pass
"""


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.py"
    path.write_text(LOADER + textwrap.dedent(body))
    return path


def queuetune_run(*argv: str) -> list[str]:
    return [sys.executable, "-m", "queuetune", "run", "--no-live", *argv]


def traces(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.json") if not p.name.startswith("summary."))


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def consumed(folder: Path) -> dict[str, int]:
    """Each loader of the summary: its label, and the batches it handed over."""
    return {loader["label"]: loader["report"]["consumed_batches"] for loader in summary(folder)["loaders"]}


@pytest.mark.timeout(120)
def test_os_exit_writes_the_report_and_keeps_its_code(tmp_path):
    job = script(
        tmp_path,
        """
        import os, threading
        iterate(4)
        print("leaving", flush=True)
        # A non-daemon thread, which os._exit does not wait for.
        threading.Thread(target=threading.Event().wait).start()
        os._exit(5)
        """,
    )
    out = tmp_path / "out"
    done = subprocess.run(queuetune_run("--out", str(out), str(job)), capture_output=True, text=True, timeout=100)
    assert done.returncode == 5, done.stderr
    assert done.stdout.startswith("leaving\n") and "prefetcher 1 (job.py:5)" in done.stdout
    assert f"JSON summary: {out / 'summary.json'}" in done.stdout
    assert traces(out) == ["01-prefetcher.json"] and (out / "report.html").is_file()
    assert summary(out)["exit_code"] == 5 and consumed(out) == {"prefetcher 1 (job.py:5)": 4}
    assert_nothing_left_running()


@pytest.fixture
def default_sigterm():
    """SIGTERM's default disposition for the test (an earlier test in the process,
    Ray's, may have left a handler of its own), the one before put back after."""
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.timeout(60)
def test_os_exit_is_put_back_after_the_run(tmp_path, default_sigterm):
    job = script(tmp_path, "iterate(2)\n")
    original = os._exit
    result = run_program(Target(str(job)), tmp_path / "out", html=False)
    assert os._exit is original and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert result.exit_code == 0 and not result.terminated and len(result.loaders) == 1
    assert_nothing_left_running()


def started(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    """``argv`` started, once its program printed ``ready``."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line == "ready\n", (line, process.stderr.read() if process.stderr else "")
    return process


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_and_ctrl_c_write_the_report_then_exit_128_plus_the_signal(tmp_path, sent, code):
    job = script(
        tmp_path,
        """
        import time
        iterate(4)
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
        """,
    )
    out = tmp_path / "out"
    process = started(queuetune_run("--out", str(out), str(job)), tmp_path)
    process.send_signal(sent)
    stdout, stderr = process.communicate(timeout=100)
    assert process.returncode == code, stderr
    assert traces(out) == ["01-prefetcher.json"] and (out / "report.html").is_file()
    assert summary(out)["exit_code"] == code and "prefetcher 1 (job.py:5)" in stdout
    if sent == signal.SIGTERM:
        assert "Traceback" not in stderr  # as Python says nothing of a SIGTERM
    else:
        assert stderr.splitlines()[-1] == "KeyboardInterrupt"
    assert_nothing_left_running()


@pytest.mark.timeout(120)
def test_a_programs_own_sigterm_handler_is_left_alone(tmp_path):
    job = script(
        tmp_path,
        """
        import signal, sys, time

        def stop(signum, frame):
            print("handled", flush=True)
            sys.exit(9)

        signal.signal(signal.SIGTERM, stop)
        iterate(3)
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
        """,
    )
    out = tmp_path / "out"
    process = started(queuetune_run("--out", str(out), str(job)), tmp_path)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=100)
    assert process.returncode == 9, stderr
    assert stdout.startswith("handled\n") and summary(out)["exit_code"] == 9
    assert traces(out) == ["01-prefetcher.json"]
    assert_nothing_left_running()


@pytest.mark.timeout(120)
def test_an_ignored_sigterm_stays_ignored(tmp_path):
    job = script(
        tmp_path,
        """
        import signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        sys.stdin.readline()
        iterate(2)
        """,
    )
    out = tmp_path / "out"
    argv = queuetune_run("--out", str(out), str(job))
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate("go on\n", timeout=100)
    assert process.returncode == 0, stderr
    assert summary(out)["exit_code"] == 0 and traces(out) == ["01-prefetcher.json"]
    assert_nothing_left_running()


FORKS = """
import multiprocessing, os, sys, time

def child(n, code):
    iterate(n)
    sys.exit(code)

iterate(4)
print("before the forks")  # left in the buffer, which a child's os._exit drops
# A child that ends with os._exit, as multiprocessing's own children do.
pid = os.fork()
if pid == 0:
    iterate(5)
    os._exit(0)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
sys.stdout.flush()
# A child that returns through queuetune: it saves its own loaders and prints nothing.
pid = os.fork()
if pid == 0:
    iterate(6)
    sys.exit(7)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
# multiprocessing's fork: its children keep their exit codes, and SIGTERM ends them as it would.
fork = multiprocessing.get_context("fork")
worker = fork.Process(target=child, args=(7, 3))
idle = fork.Process(target=time.sleep, args=(60,))
worker.start()
idle.start()
worker.join()
idle.terminate()
idle.join()
assert (worker.exitcode, idle.exitcode) == (3, -15), (worker.exitcode, idle.exitcode)
iterate(8)
print("parent done", flush=True)
"""


@pytest.mark.timeout(180)
def test_forked_children_add_their_loaders_to_the_run_without_clobbering_the_parents(tmp_path):
    job = script(tmp_path, FORKS)
    out = tmp_path / "out"
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    argv = queuetune_run("--out", str(out), str(job))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=150, env=buffered)
    assert done.returncode == 0, done.stderr
    found = consumed(out)
    parents = {label: n for label, n in found.items() if " in process " not in label}
    assert parents == {"prefetcher 1 (job.py:5)": 4, "prefetcher 2 (job.py:5)": 8}
    children = sorted(n for label, n in found.items() if " in process " in label)
    assert children == [5, 6, 7]
    names = traces(out)
    mine = ["01-prefetcher.json", "02-prefetcher.json"]
    assert [n for n in names if n in mine] == mine and len(names) == 5
    assert all(name.startswith("01-prefetcher.pid") for name in names if name not in mine)
    # The page and the printed report list them all; the child printed nothing of its own.
    page = (out / "report.html").read_text()
    assert all(label in page for label in found)
    assert done.stdout.count("JSON summary:") == 1 and done.stdout.count("in process ") == 3
    assert done.stdout.startswith("before the forks\nparent done\n")
    # queuetune report reads the folder, children's traces included.
    report = subprocess.run(
        [sys.executable, "-m", "queuetune", "report", str(out), "--json"], capture_output=True, text=True, timeout=60
    )
    assert report.returncode == 0, report.stderr
    assert sorted(r["consumed_batches"] for r in json.loads(report.stdout)) == [4, 5, 6, 7, 8]
    assert_nothing_left_running()


@pytest.mark.timeout(120)
def test_traces_of_an_earlier_run_in_the_same_folder_are_not_gathered(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "01-prefetcher.pid1.json").write_text("left by an earlier run")
    job = script(tmp_path, "iterate(2)\n")
    result = run_program(Target(str(job)), out, html=False)
    assert [loader.report.consumed_batches for loader in result.loaders] == [2]
    assert_nothing_left_running()


TORCH_FORK = """
import os
import torch
from torch.utils.data import DataLoader

for batch in DataLoader(torch.arange(64).float().reshape(64, 1), batch_size=8, num_workers=2):
    pass
pid = os.fork()
if pid == 0:
    for batch in DataLoader(torch.arange(32).float().reshape(32, 1), batch_size=8, num_workers=2):
        pass
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.torch
@pytest.mark.timeout(180)
def test_a_forked_child_iterating_a_dataloader_with_workers(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(TORCH_FORK)
    out = tmp_path / "out"
    done = subprocess.run(queuetune_run("--out", str(out), str(job)), capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr
    [(parent, eight), (child, four)] = consumed(out).items()
    assert (parent, eight) == ("dataloader 1 (job.py:6)", 8)
    assert child.startswith("dataloader 1 (job.py:10) in process ") and four == 4
    assert traces(out)[0] == "01-dataloader.json" and traces(out)[1].startswith("01-dataloader.pid")
    assert_nothing_left_running()


TORCH_ENDING = """
import os, signal, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.zeros(4)

for i, batch in enumerate(DataLoader(Slow(), batch_size=2, num_workers=2)):
    if i == 5:
        print("ready", flush=True)
        if sys.argv[1] == "exit":
            os._exit(5)
"""


@pytest.mark.torch
@pytest.mark.timeout(180)
@pytest.mark.parametrize("ending", ["exit", "sigterm"])
def test_a_dataloader_mid_epoch_with_workers_when_the_program_ends(tmp_path, ending):
    job = tmp_path / "job.py"
    job.write_text(TORCH_ENDING)
    out = tmp_path / "out"
    process = started(queuetune_run("--out", str(out), str(job), ending), tmp_path)
    if ending == "sigterm":
        process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=150)
    assert process.returncode == (5 if ending == "exit" else 143), stderr
    assert traces(out) == ["01-dataloader.json"] and summary(out)["exit_code"] == process.returncode
    assert consumed(out)["dataloader 1 (job.py:13)"] >= 6
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_ctrl_c_while_the_report_is_written_is_one_line_and_130(tmp_path, monkeypatch, capsys, default_sigterm):
    import queuetune.program
    from queuetune.cli import main

    def interrupted(trace):
        raise KeyboardInterrupt

    monkeypatch.setattr(queuetune.program, "analyze", interrupted)
    job = script(tmp_path, "iterate(2)\n")
    original = os._exit
    assert main(["run", "--no-live", "--out", str(tmp_path / "out"), str(job)]) == 130
    assert capsys.readouterr().err == "queuetune: error: interrupted\n"
    assert os._exit is original and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert_nothing_left_running()
