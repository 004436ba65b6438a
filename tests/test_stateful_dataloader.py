"""torchdata's ``StatefulDataLoader`` watched like a ``DataLoader`` (issue 60, part
2): by ``queuetune.watch`` and by ``queuetune run``, its ``state_dict`` and
``load_state_dict`` passing through untouched. A state taken from a watched
loader resumes an unwatched one and the other way round; the resumed pass hands
over exactly the batches an uninterrupted one would have, and what queuetune
records of it is what was handed over."""

from __future__ import annotations

import gc
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.helpers import assert_nothing_left_running

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")
StatefulDataLoader = stateful.StatefulDataLoader

import queuetune  # noqa: E402
from queuetune.frameworks.torch.watch import WatchedDataLoader  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def make(count: int, batch: int, workers: int, seed: int, sampler: str = "shuffle") -> Any:
    """A StatefulDataLoader over samples ``0..count-1``, shuffled with ``seed``: by
    torchdata's own stateful sampler (``"shuffle"``), by torch's ``RandomSampler``
    given as the sampler, which has no state (``"plain"``: torchdata's batch sampler
    fast-forwards it), or by torch's ``BatchSampler`` over it given as the batch
    sampler (``"batches"``: torchdata fast-forwards the loader's index lists)."""
    generator = torch.Generator().manual_seed(seed)
    options: dict[str, Any] = {"batch_size": batch, "num_workers": workers}
    if workers:
        options["multiprocessing_context"] = "fork"
    if sampler == "plain":
        options["sampler"] = torch.utils.data.RandomSampler(range(count), generator=generator)
    elif sampler == "batches":
        shuffled = torch.utils.data.RandomSampler(range(count), generator=generator)
        options = {"num_workers": workers, "multiprocessing_context": options.get("multiprocessing_context")}
        options["batch_sampler"] = torch.utils.data.BatchSampler(shuffled, batch, drop_last=False)
    else:
        options.update(shuffle=True, generator=generator)
    return StatefulDataLoader(range(count), **options)


def batches(loader: Any, stop: int | None = None) -> tuple[list[list[int]], Any]:
    """The batches of one pass (as sample lists), and the state after ``stop`` of them."""
    out: list[list[int]] = []
    state = None
    it = iter(loader)
    for batch in it:
        out.append(batch.tolist())
        if stop is not None and len(out) == stop:
            state = loader.state_dict()
            break
    return out, state


def saved_and_loaded(state: Any) -> Any:
    """``state`` through ``torch.save`` and ``torch.load``, as a checkpoint keeps it
    (torchdata's states hold the generator's state as a tensor)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def recorded(loader: Any) -> list[list[int] | None]:
    """The samples queuetune recorded of each batch handed over."""
    probe = queuetune.probe_of(loader)
    trace = probe.trace()
    probe.close()
    return [c.samples for c in trace.consumed]


@pytest.mark.timeout(60)
def test_a_watched_stateful_dataloader_is_one_and_keeps_its_settings():
    original = StatefulDataLoader(range(10), batch_size=3, snapshot_every_n_steps=4)
    watched = queuetune.watch(original)
    try:
        assert isinstance(watched, StatefulDataLoader) and isinstance(watched, WatchedDataLoader)
        assert watched.snapshot_every_n_steps == 4 and len(watched) == 4
        assert [b.tolist() for b in watched] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    finally:
        queuetune.probe_of(watched).close()
    assert_nothing_left_running()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("sampler", ["shuffle", "plain", "batches"])
@pytest.mark.parametrize(("watch_first", "watch_second"), [(True, True), (True, False), (False, True)])
def test_a_state_taken_mid_epoch_resumes_exactly_the_rest(workers, sampler, watch_first, watch_second):
    count, batch, stop, seed = 23, 4, 3, 7
    everything, _ = batches(make(count, batch, workers, seed, sampler))
    first = make(count, batch, workers, seed, sampler)
    first = queuetune.watch(first) if watch_first else first
    taken, state = batches(first, stop)
    state = saved_and_loaded(state)
    # torchdata's sampler keeps its generator's state (another seed: the state's wins);
    # torch's is fast-forwarded, and resumes only where it draws the same order again.
    second = make(count, batch, workers, seed + 1 if sampler == "shuffle" else seed, sampler)
    second = queuetune.watch(second) if watch_second else second
    second.load_state_dict(state)
    rest, _ = batches(second)
    assert taken == everything[:stop]
    assert rest == everything[stop:]
    # What queuetune recorded of the resumed pass is what it handed over: the batches
    # fast-forwarded past are not among them.
    if watch_second:
        assert recorded(second) == rest
    if watch_first:
        assert recorded(first) == taken
    # A StatefulDataLoader keeps its iterator, and so the workers of a pass left
    # early, as long as it lives.
    del first, second
    gc.collect()
    assert_nothing_left_running()


@pytest.mark.timeout(240)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.integers(1, 40),
    batch=st.integers(1, 7),
    workers=st.sampled_from([0, 1, 2]),
    sampler=st.sampled_from(["shuffle", "plain", "batches"]),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_any_stop_point_resumes_to_the_uninterrupted_pass(count, batch, workers, sampler, seed, data):
    everything, _ = batches(make(count, batch, workers, seed, sampler))
    stop = data.draw(st.integers(1, len(everything)), label="stop")
    first = queuetune.watch(make(count, batch, workers, seed, sampler))
    taken, state = batches(first, stop)
    recorded(first)
    second = queuetune.watch(make(count, batch, workers, seed, sampler))
    second.load_state_dict(state)
    rest, _ = batches(second)
    assert taken + rest == everything
    assert recorded(second) == rest
    del first, second
    gc.collect()
    assert_nothing_left_running()


JOB = textwrap.dedent(
    """
    import json, sys
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    def as_tensors(state):  # the generator's state, kept in JSON as a list
        if isinstance(state, dict):
            tensor = lambda v: torch.tensor(v, dtype=torch.uint8)
            return {k: tensor(v) if k == "generator" else as_tensors(v) for k, v in state.items()}
        return state

    state_file, stop = sys.argv[1], int(sys.argv[2])
    loader = StatefulDataLoader(
        range(30), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3),
        num_workers=2, multiprocessing_context="fork",
    )
    try:
        with open(state_file) as f:
            loader.load_state_dict(as_tensors(json.load(f)))
    except FileNotFoundError:
        pass
    seen = []
    for batch in loader:
        seen.append(batch.tolist())
        if len(seen) == stop:
            with open(state_file, "w") as f:
                json.dump(loader.state_dict(), f, default=lambda t: t.tolist())
            break
    print("SEEN", json.dumps(seen))
    """
)


@pytest.mark.timeout(180)
def test_queuetune_run_watches_a_stateful_dataloader_and_its_state_passes_through(tmp_path):
    job, state = tmp_path / "job.py", tmp_path / "state.json"
    job.write_text(JOB)

    def run(stop: int, *, watched: bool) -> list[list[int]]:
        prefix = [sys.executable, "-m", "queuetune", "run", "--out", str(tmp_path / f"out{stop}"), "--no-live"]
        command = (prefix if watched else [sys.executable]) + [str(job), str(state), str(stop)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=150, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
        line = next(line for line in done.stdout.splitlines() if line.startswith("SEEN "))
        return json.loads(line[5:])

    everything = run(0, watched=False)
    state.unlink(missing_ok=True)
    first = run(3, watched=True)
    rest = run(0, watched=True)
    assert first + rest == everything and len(everything) == 8
    for stop, handed in ((3, 3), (0, 5)):
        summary = json.loads((tmp_path / f"out{stop}" / "summary.json").read_text())
        (loader,) = summary["loaders"]
        assert loader["report"]["consumed_batches"] == handed, loader["report"]
    assert_nothing_left_running()
