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

from queuetune.analysis.resumes import LOST, REORDERED, RESTARTED, UNSET

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
#: The kill points of a job resumed from its state, 1-2 batches of its run each: 20 where
#: a run starts in a second; a StatefulDataLoader's imports torch and starts workers (7 s).
KILLS = {
    "prefetcher-thread": 20,
    "prefetcher-process": 20,
    "prefetcher-thread-unordered": 20,
    "prefetcher-process-unordered": 20,
    "stateful": 6,
}

#: One epoch of 240 samples (60 for a DataLoader) in batches of 4; the job saves its state (where it has
#: one: the journal is written as it is taken) after each batch, and kills itself
#: with SIGKILL after batch ``KILL`` (of this run), without a state once the journal
#: (written each second) has had the time to take it.
JOB = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from itertools import islice
    from pathlib import Path

    kind, state_file, kill = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    SAMPLES, BATCH = (60 if kind in ("islice", "restart", "lost") else 240), 4

    def handed(count, stateful=True):
        time.sleep(0.05)  # a training step
        if count == kill:
            if not stateful:  # no state taken: the journal has its second to write
                time.sleep(1.6)
            os.kill(os.getpid(), signal.SIGKILL)

    if kind.startswith("two-epochs"):  # a Prefetcher's two epochs, each batch noted as it is handed over
        from queuetune import Prefetcher

        mode = kind.split("-")[2]
        with Prefetcher(list(range(120)), max_bytes="4MiB", batch_size=BATCH, shuffle=True, seed=5,
                        workers=2, mode=mode, ordered=not kind.endswith("unordered")) as p:
            if state_file.exists():
                p.load_state_dict(json.loads(state_file.read_text()))
            count = 0
            while p.state_dict()["epoch"] < 2:
                for batch in p:
                    count += 1
                    with open(state_file.with_suffix(".seen"), "a") as seen:
                        seen.write(json.dumps([int(i) for i in batch]) + "\\n")
                    state_file.write_text(json.dumps(p.state_dict()))
                    handed(count)
    elif kind.startswith("prefetcher"):
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
    elif kind == "lost":  # a DistributedSampler's epochs; the resumed run begins one epoch too far
        from torch.utils.data import DataLoader, DistributedSampler

        sampler = DistributedSampler(range(SAMPLES), num_replicas=1, rank=0, shuffle=True)
        loader = DataLoader(range(SAMPLES), batch_size=BATCH, sampler=sampler)
        resumed = state_file.exists()
        epoch = int(state_file.read_text()) + 2 if resumed else 0
        sampler.set_epoch(epoch)
        for batch in loader:
            time.sleep(0.05)
        state_file.write_text(str(epoch))
        if not resumed:
            handed(kill, stateful=False)
    else:
        import torch
        from torch.utils.data import DataLoader

        # "islice": unseeded, the batches already taken skipped; "restart": seeded, the epoch begun again.
        seeded = torch.Generator().manual_seed(5) if kind == "restart" else None
        loader = DataLoader(range(SAMPLES), batch_size=BATCH, shuffle=True, generator=seeded)
        skip = int(state_file.read_text()) if state_file.exists() and kind == "islice" else 0
        for n, batch in enumerate(islice(loader, skip, None), start=1):
            state_file.write_text(str(skip + n))
            handed(n, stateful=False)
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


def killed_and_resumed(tmp_path: Path, kind: str, kills: list[int], every_restart: bool = True) -> list[dict[str, Any]]:
    """The spans the last run found, each run before it killed after its ``kills[i]``
    batches (with ``every_restart``, each within an epoch: a span each)."""
    for n, kill in enumerate(kills):
        code, summary = run(tmp_path, kind, kill, f"resume-{n}" if n else ".", resume=n > 0)
        assert code == -9 and summary is None, code  # killed outright: no report, its journal alone
        folder = tmp_path / "job" / (f"resume-{n}" if n else ".")
        assert list(folder.glob("01-*.journal.jsonl")), list(folder.iterdir())
    code, summary = run(tmp_path, kind, 0, f"resume-{len(kills)}", resume=True)
    assert code == 0 and summary is not None, code
    (loader,) = summary["loaders"]
    spans = loader["resumes"]
    assert len(spans) == len(kills) or not every_restart, (kills, spans)
    # The headline carries the first span that is not every sample once, else the first.
    shown = next((span for span in spans if span["twice"] or span["never"] or span["lost"]), spans[0])
    assert shown["text"] in loader["headline"]["text"], loader["headline"]["text"]
    return spans


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", list(KILLS))
def test_a_job_resumed_from_its_state_hands_over_every_sample_once(tmp_path, kind):
    """Killed at random batches of its one epoch (:data:`KILLS` times), each time resumed from its state."""
    if kind == "stateful":
        pytest.importorskip("torchdata")
    kills = [random.Random(f"{kind}{n}").randint(1, 2) for n in range(KILLS[kind])]
    spans = killed_and_resumed(tmp_path, kind, kills)
    for n, span in enumerate(spans, start=1):
        assert (span["twice"], span["never"], span["runs"]) == (0, 0, [n, n + 1]), span
        assert span["before"] == sum(kills[:n]), (kills, span)
        assert span["text"].startswith(f"epoch 0 spans runs {n} and {n + 1}: every sample once"), span
        assert not span["assumed"], span  # the loader said it resumed
    assert spans[-1]["before"] + spans[-1]["after"] == 60 and spans[-1]["not_reached"] == 0, spans[-1]
    assert sum(kills) < 60
    assert_nothing_left_running()


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "kind", ["two-epochs-thread", "two-epochs-process", "two-epochs-thread-unordered", "two-epochs-process-unordered"]
)
def test_a_prefetcher_killed_across_two_epochs_continues_them_bit_equal(tmp_path, kind):
    """Two epochs of 30 batches, killed 20 times after 1-2 batches of each run: the
    batches handed over across the runs are those of an uninterrupted run (in its
    order, where ordered), and every restart within an epoch reads every sample once."""
    from queuetune.prefetch.resume import epoch_order

    kills = [random.Random(f"{kind}{n}").randint(1, 2) for n in range(20)]
    spans = killed_and_resumed(tmp_path, kind, kills, every_restart=False)
    assert spans and all(span["twice"] == span["never"] == 0 and not span["assumed"] for span in spans), spans
    seen = [json.loads(line) for line in (tmp_path / "state.seen").read_text().splitlines()]
    order = [epoch_order(120, True, 5, epoch) for epoch in (0, 1)]
    expected = [order[e][i : i + 4] for e in (0, 1) for i in range(0, 120, 4)]
    if kind.endswith("unordered"):  # each epoch's batches once, in any order
        assert sorted(seen[:30]) == sorted(expected[:30]) and sorted(seen[30:]) == sorted(expected[30:])
    else:
        assert seen == expected
    assert_nothing_left_running()


#: The kill points of a DataLoader resumed the wrong way: 2 batches of each run (one step
#: after the batches a resumed run drops at once tells them apart), 12 of its 15.
WRONG_KILLS = [2] * 6


@pytest.mark.timeout(600)
def test_a_dataloader_that_skips_batches_of_another_order_is_named(tmp_path):
    spans = killed_and_resumed(tmp_path, "islice", WRONG_KILLS)
    for n, span in enumerate(spans, start=1):
        assert span["dropped"] == 2 * n and span["before"] == 2 * n and span["assumed"], span
    last = spans[-1]
    assert last["twice"] > 0 and last["twice"] == last["never"], last
    assert last["cause"] == REORDERED and last["before"] + last["after"] == 15, last
    assert_nothing_left_running()


@pytest.mark.timeout(600)
def test_a_dataloader_that_begins_the_epoch_again_is_named(tmp_path):
    spans = killed_and_resumed(tmp_path, "restart", WRONG_KILLS)
    for span in spans:
        assert span["twice"] > 0 and span["dropped"] == 0, span  # each run hands over the epoch's first again
    last = spans[-1]
    assert (last["twice"], last["never"], last["after"]) == (4 * 12, 0, 15), last
    assert last["cause"] == RESTARTED, last
    assert_nothing_left_running()


@pytest.mark.timeout(300)
def test_an_epoch_lost_between_runs_is_named(tmp_path):
    (span,) = killed_and_resumed(tmp_path, "lost", [1])
    assert (span["lost"], span["before"], span["after"], span["twice"], span["never"]) == (1, 15, 15, 0, 0), span
    assert span["text"].startswith("run 1 ended its epoch 0, and run 2 began the next with 1 epoch lost"), span
    assert span["cause"] == LOST.format(drew=0, draws=2), span
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


TORCHRUN_JOB = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from itertools import islice
    from pathlib import Path
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    set_epoch, folder, kill = sys.argv[1] == "set_epoch", Path(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    state = folder / f"state{rank}.json"
    sampler = DistributedSampler(range(64), shuffle=True)
    loader = DataLoader(range(64), batch_size=4, sampler=sampler)
    resumed = state.exists()
    epoch, step = json.loads(state.read_text()) if resumed else (0, 0)
    for epoch in range(epoch, 2):
        if set_epoch or not resumed:  # "no_set_epoch": forgotten after the resume
            sampler.set_epoch(epoch)
        for step, batch in enumerate(islice(loader, step, None), start=step + 1):
            total = batch.sum()
            dist.all_reduce(total)
            time.sleep(0.05)  # a training step
            state.write_text(json.dumps([epoch, step]))
            if epoch == 1 and step == kill:
                dist.barrier()
                time.sleep(1.6)  # the journal's second
                if rank == 1:
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(60)  # torchrun ends this rank
        step = 0
    dist.barrier()
    dist.destroy_process_group()
    """
)


def torchrun(tmp_path: Path, mode: str, kill: int, resume: bool) -> int:
    job = tmp_path / "job.py"
    job.write_text(TORCHRUN_JOB)
    where = ["--resume", str(tmp_path / "job")] if resume else ["--out", str(tmp_path / "job")]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command += ["-m", "queuetune", "run", "--no-live", "--no-html", *where, str(job), mode, str(tmp_path), str(kill)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    return done.returncode


@pytest.mark.torch
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["set_epoch", "no_set_epoch"])
def test_torchrun_ranks_resumed_are_each_checked(tmp_path, mode):
    assert torchrun(tmp_path, mode, 3, resume=False) != 0  # a rank killed: the launch fails
    assert torchrun(tmp_path, mode, 0, resume=True) == 0
    for rank in (0, 1):
        summary = json.loads((tmp_path / "job" / "resume-1" / f"summary.rank{rank}.json").read_text())
        (loader,) = summary["loaders"]
        (span,) = loader["resumes"]
        assert (span["epoch"], span["runs"], span["before"], span["dropped"], span["total"]) == (1, [1, 2], 3, 3, 32)
        if mode == "set_epoch":  # the sampler draws epoch 1 again: known to continue it
            assert (span["twice"], span["never"], span["assumed"]) == (0, 0, False), span
        else:  # the resumed run skipped 3 batches of epoch 0's order, where epoch 1's were taken
            assert span["twice"] == span["never"] > 0, span
            assert span["cause"] == UNSET.format(drew=1, draws=0), span
    assert_nothing_left_running()
