"""A job killed with SIGKILL mid-epoch and resumed with ``queuetune run --resume``
reads as one (issue 60, part 3): the epoch that spans the restart is counted
across both runs, the killed one from the journal it appended as it ran.
Resumed from the loader's state (a Prefetcher, a ``StatefulDataLoader``), every
sample once; resumed the common wrong ways, the duplicates and misses named with
their cause."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import assert_nothing_left_running

from queuetune.resumes import REORDERED, RESTARTED

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent

#: One epoch of 60 samples in batches of 4; the job saves its state (where it has
#: one) after each batch, and kills itself with SIGKILL after batch ``KILL``, once
#: the journal (written each second) has had the time to take it.
JOB = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from itertools import islice
    from pathlib import Path

    kind, state_file, kill = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    SAMPLES, BATCH = 60, 4

    def handed(count):
        time.sleep(0.02)  # a training step
        if count == kill:
            time.sleep(1.6)
            os.kill(os.getpid(), signal.SIGKILL)

    if kind.startswith("prefetcher"):
        import numpy as np
        from queuetune import Prefetcher

        mode = kind.split("-")[1]
        with Prefetcher(list(range(SAMPLES)), max_bytes="4MiB", batch_size=BATCH, shuffle=True, seed=5,
                        workers=2, mode=mode, ordered=kind.endswith("unordered") is False) as p:
            if state_file.exists():
                p.load_state_dict(json.loads(state_file.read_text()))
            for count, batch in enumerate(p, start=1):
                state_file.write_text(json.dumps(p.state_dict()))
                handed(count)
    elif kind == "stateful":
        import torch
        from torchdata.stateful_dataloader import StatefulDataLoader

        loader = StatefulDataLoader(range(SAMPLES), batch_size=BATCH, shuffle=True,
                                    generator=torch.Generator().manual_seed(5), num_workers=2,
                                    multiprocessing_context="fork")
        if state_file.exists():
            loader.load_state_dict(torch.load(state_file, weights_only=False))
        for count, batch in enumerate(loader, start=1):
            torch.save(loader.state_dict(), state_file)
            handed(count)
    else:
        import torch
        from torch.utils.data import DataLoader

        # "islice": unseeded, the batches already taken skipped; "restart": seeded, the epoch begun again.
        seeded = torch.Generator().manual_seed(5) if kind == "restart" else None
        loader = DataLoader(range(SAMPLES), batch_size=BATCH, shuffle=True, generator=seeded)
        skip = int(state_file.read_text()) if state_file.exists() and kind == "islice" else 0
        for count, batch in enumerate(islice(loader, skip, None), start=skip + 1):
            state_file.write_text(str(count))
            handed(count)
    """
)


def run(tmp_path: Path, kind: str, kill: int, folder: str, resume: bool) -> tuple[int, dict[str, Any] | None]:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    where = ["--resume", str(tmp_path / "job")] if resume else ["--out", str(tmp_path / "job")]
    command = [sys.executable, "-m", "queuetune", "run", "--no-live", "--no-html", "--json", *where]
    command += [str(job), kind, str(tmp_path / "state"), str(kill)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=150, cwd=ROOT)
    summary = tmp_path / "job" / folder / "summary.json"
    return done.returncode, json.loads(summary.read_text()) if summary.exists() else None


def killed_and_resumed(tmp_path: Path, kind: str, kill: int) -> dict[str, Any]:
    """The span the resumed run found, after the first was killed after ``kill`` batches."""
    code, summary = run(tmp_path, kind, kill, ".", resume=False)
    assert code == -9 and summary is None, code  # killed outright: no report, its journal alone
    assert list((tmp_path / "job").glob("01-*.journal.jsonl")), list((tmp_path / "job").iterdir())
    code, summary = run(tmp_path, kind, 0, "resume-1", resume=True)
    assert code == 0 and summary is not None, code
    (loader,) = summary["loaders"]
    (span,) = loader["resumes"]
    assert span["text"] in loader["headline"]["text"], loader["headline"]["text"]
    return span


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["prefetcher-thread", "prefetcher-process", "prefetcher-thread-unordered", "stateful"])
def test_a_job_resumed_from_its_state_hands_over_every_sample_once(tmp_path, kind):
    if kind == "stateful":
        pytest.importorskip("torchdata")
    kill = random.Random(kind).randint(1, 14)
    span = killed_and_resumed(tmp_path, kind, kill)
    assert (span["twice"], span["never"], span["runs"]) == (0, 0, [1, 2]), span
    assert span["before"] == kill and span["before"] + span["after"] == 15, span
    assert span["text"].startswith("epoch 0 spans runs 1 and 2: every sample once"), span
    assert not span["assumed"], span  # the loader said it resumed
    assert_nothing_left_running()


@pytest.mark.timeout(300)
def test_a_dataloader_that_skips_batches_of_another_order_is_named(tmp_path):
    span = killed_and_resumed(tmp_path, "islice", 6)
    assert span["twice"] > 0 and span["never"] > 0 and span["twice"] == span["never"], span
    assert span["cause"] == REORDERED and span["assumed"] and span["dropped"] == 6, span
    assert span["before"] + span["after"] == 15, span
    assert_nothing_left_running()


@pytest.mark.timeout(300)
def test_a_dataloader_that_begins_the_epoch_again_is_named(tmp_path):
    span = killed_and_resumed(tmp_path, "restart", 6)
    assert (span["twice"], span["never"], span["before"], span["after"]) == (24, 0, 6, 15), span
    assert span["cause"] == RESTARTED, span
    assert_nothing_left_running()


def test_resume_names_what_is_wrong_with_its_folder(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("")
    for where, message in (
        (["--resume", str(tmp_path / "nowhere")], "no run to resume"),
        (["--resume", str(tmp_path)], "no trace or journal"),
        (["--resume", str(tmp_path), "--out", str(tmp_path / "o")], "not both"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "queuetune", "run", *where, str(job)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2 and message in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
