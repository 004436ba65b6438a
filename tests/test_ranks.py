"""Ranks of a torchrun launch: one trace per rank in one folder, merged by
``queuetune report DIR``: each rank's figures, the straggler, and coverage
across ranks (no DistributedSampler, its padding, set_epoch forgotten)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from queuetune.analysis.ranks import analyze_ranks
from queuetune.cli import main
from queuetune.common.launch import Launch
from queuetune.record.trace import Consumed, Mark, Produced, Trace, TraceMeta


def rank_trace(
    rank: int, epochs: list[list[int]], wait: float = 0.0, world: int = 2, job: str = "j", step: float = 0.1
) -> Trace:
    """A rank that consumed batches of 4 samples (``epochs``: each run's samples
    in order), each batch waited for ``wait`` seconds then stepped ``step`` seconds."""
    produced, consumed, marks, t = [], [], [], 0.0
    for run, samples in enumerate(epochs):
        marks += [Mark(t, "run_begin", run), Mark(t, "epoch_begin", 0)]
        for b in range(0, len(samples), 4):
            batch = samples[b : b + 4]
            key = tuple(batch)
            produced.append(Produced(t, t + wait, 8, key=hash(key)))
            consumed.append(Consumed(t, t + wait, run=run, epoch=0, key=hash(key), samples=batch))
            t += wait + step
        marks += [Mark(t, "epoch_end", 0), Mark(t, "run_end", run)]
    meta = TraceMeta(name="dataloader 1 (job.py:9)", rank=rank, world_size=world, job=job)
    return Trace(meta=meta, start=0.0, end=t, produced=produced, consumed=consumed, marks=marks)


def test_the_launch_is_read_from_torchruns_environment():
    env = {"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "abc/1"}
    launch = Launch.from_environment(env)
    assert launch == Launch(1, 2, "abc/1") and launch.folder_name() == "queuetune-run-abc-1"
    assert Launch.from_environment({"RANK": "2", "WORLD_SIZE": "2"}) is None
    assert Launch.from_environment({"RANK": "x", "WORLD_SIZE": "2"}) is None
    assert Launch.from_environment({"WORLD_SIZE": "2"}) is None


def test_every_sample_on_every_rank_is_a_loader_without_distributed_sampler():
    everything = list(range(16))
    merged = analyze_ranks([rank_trace(0, [everything]), rank_trace(1, [everything])])
    [loader] = merged.loaders
    [cov] = loader.coverage
    assert (cov.items, cov.seen_by_several, cov.per_rank) == (16, 16, {0: 16, 1: 16})
    assert "no DistributedSampler" in cov.cause
    assert loader.straggler is None and loader.same_order_ranks == [] and merged.missing_ranks == []


def test_padding_and_a_forgotten_set_epoch_are_named():
    # 15 samples on 2 ranks: DistributedSampler gives each 8, sample 3 to both; the
    # same shuffled order in both epochs.
    zero, one = [9, 3, 14, 0, 7, 11, 5, 1], [2, 12, 8, 4, 13, 6, 10, 3]
    merged = analyze_ranks([rank_trace(0, [zero, zero]), rank_trace(1, [one, one])])
    [loader] = merged.loaders
    assert [c.seen_by_several for c in loader.coverage] == [1, 1]
    assert loader.coverage[0].examples == [3] and "padding" in loader.coverage[0].cause
    assert loader.same_order_ranks == [0, 1]
    # Sorted order (shuffle=False) is the same every epoch by design: not flagged.
    ordered = analyze_ranks([rank_trace(0, [sorted(zero)] * 2), rank_trace(1, [sorted(one)] * 2)])
    assert ordered.loaders[0].same_order_ranks == []
    # set_epoch called: each epoch its own order.
    moved = analyze_ranks([rank_trace(0, [zero, zero[::-1]]), rank_trace(1, [one, one[::-1]])])
    assert moved.loaders[0].same_order_ranks == []


def test_the_rank_that_waits_for_input_is_the_straggler():
    samples = list(range(32))
    traces = [rank_trace(0, [samples[:16]], wait=0.001), rank_trace(1, [samples[16:]], wait=0.2)]
    traces.append(rank_trace(2, [samples[:0]], world=3))
    for t in traces:
        t.meta.world_size = 3
    merged = analyze_ranks(traces)
    straggler = merged.loaders[0].straggler
    assert straggler is not None and straggler.rank == 1
    assert straggler.cost_seconds == pytest.approx(0.2 * 3 - 0.001 * 3, abs=0.01)
    assert "rank 1 holds the others" in straggler.text
    assert straggler.by == "input wait"
    even = analyze_ranks([rank_trace(0, [samples[:16]], wait=0.01), rank_trace(1, [samples[16:]], wait=0.011)])
    assert even.loaders[0].straggler is None
    # Loading alike, one rank's steps slower (ranks not synchronised every step).
    slow = analyze_ranks([rank_trace(0, [samples[:16]], step=0.1), rank_trace(1, [samples[16:]], step=0.3)])
    compute = slow.loaders[0].straggler
    assert compute is not None and (compute.rank, compute.by) == (1, "step time")
    assert compute.cost_seconds == pytest.approx(0.2 * 4, abs=0.01) and "not its loading" in compute.text


@pytest.mark.timeout(60)
def test_report_of_a_folder_merges_ranks_and_names_what_is_missing_or_mixed(tmp_path, capsys):
    everything = list(range(8))
    rank_trace(0, [everything]).save(tmp_path / "01-dataloader.rank0.json")
    world3 = rank_trace(1, [everything], world=3)
    world3.save(tmp_path / "01-dataloader.rank1.json")
    assert main(["report", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in data["ranks"]] == [0, 1] and data["missing_ranks"] == [2]
    assert data["loaders"][0]["coverage"][0]["seen_by_several"] == 8 and len(data["reports"]) == 2
    assert main(["report", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "no trace of rank 2 (of 3)" in text and "read by more than one rank" in text
    page = tmp_path / "page.html"
    assert main(["report", str(tmp_path), "--html", str(page)]) == 0
    html = page.read_text()
    assert '<section id="ranks">' in html and "rank 1: dataloader 1" in html
    # The ranks of a loader side by side, in rank order.
    assert '<div class="ranks" style="--ranks: 2">' in html
    assert html.index("rank 0: dataloader 1") < html.index("rank 1: dataloader 1")
    rank_trace(0, [everything], job="other").save(tmp_path / "02-dataloader.rank0.json")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "traces of different runs mixed" in err and "job j" in err and "job other" in err
    assert err.count("\n") == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 2
    assert "no traces (*.json) in" in capsys.readouterr().err


TORCHRUN_SCRIPT = """
import sys, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

mode = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()

class Numbers(Dataset):
    def __init__(self, n, slow):
        self.n, self.slow = n, slow
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        time.sleep(self.slow)
        return torch.tensor([float(i)])

data = Numbers(63 if mode == "padded" else 64, 0.03 if mode == "straggler" and rank == 1 else 0.0)
sampler = DistributedSampler(data, shuffle=True) if mode == "padded" else None
loader = DataLoader(data, batch_size=8, sampler=sampler)
for epoch in range(2):
    for batch in loader:
        total = batch.sum()
        dist.all_reduce(total)
dist.barrier()
dist.destroy_process_group()
"""


def torchrun(tmp_path: Path, mode: str) -> dict:
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(TORCHRUN_SCRIPT))
    out = tmp_path / f"D-{mode}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "queuetune",
            "run",
            "--out",
            str(out),
            "--no-html",
            str(job),
            mode,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in out.glob("[0-9]*.json")) == ["01-dataloader.rank0.json", "01-dataloader.rank1.json"]
    assert sorted(p.name for p in out.glob("summary*.json")) == ["summary.rank0.json", "summary.rank1.json"]
    report = subprocess.run(
        [sys.executable, "-m", "queuetune", "report", str(out), "--json"], capture_output=True, text=True, timeout=60
    )
    assert report.returncode == 0, report.stderr
    return json.loads(report.stdout)


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_torchrun_without_distributed_sampler_shows_every_sample_on_both_ranks(tmp_path):
    data = torchrun(tmp_path, "plain")
    assert len(data["ranks"]) == 2 and data["world_size"] == 2 and data["missing_ranks"] == []
    [loader] = data["loaders"]
    assert [c["seen_by_several"] for c in loader["coverage"]] == [64, 64]
    assert all(c["per_rank"] == {"0": 64, "1": 64} for c in loader["coverage"])
    assert "no DistributedSampler" in loader["coverage"][0]["cause"]


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_torchrun_with_distributed_sampler_shows_only_its_padding_and_the_same_order(tmp_path):
    data = torchrun(tmp_path, "padded")
    [loader] = data["loaders"]
    # 63 samples over 2 ranks: 32 each, one sample given to both; set_epoch never called.
    assert [c["seen_by_several"] for c in loader["coverage"]] == [1, 1]
    assert all(c["items"] == 63 for c in loader["coverage"]) and "padding" in loader["coverage"][0]["cause"]
    assert loader["same_order_ranks"] == [0, 1]


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_torchrun_names_the_rank_slow_in_loading(tmp_path):
    data = torchrun(tmp_path, "straggler")
    [loader] = data["loaders"]
    assert loader["straggler"]["rank"] == 1 and loader["straggler"]["cost_seconds"] > 1.0
    waits = {r["rank"]: r["loaders"][0]["input_wait_fraction"] for r in data["ranks"]}
    assert waits[1] > 0.5 > waits[0]
