"""The Prefetcher stops and resumes mid-epoch (issue 60, part 1): a state taken
between any two batches, loaded by a new Prefetcher over the same source (in
this process, or in a new one after the old was killed with SIGKILL, with
another worker count, mode or budget), hands over exactly what an
uninterrupted run would have: the same batches in the same order (with
``ordered=False``, each batch not yet handed over once), then every later epoch."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
from tests.helpers import assert_nothing_left_running  # noqa: E402

from queuetune import Prefetcher  # noqa: E402
from queuetune.prefetch import shm  # noqa: E402


class Samples:
    """``count`` samples; sample ``i`` is ``i`` repeated ``width`` times, of ``dtype``."""

    def __init__(self, count: int, width: int = 4, dtype: str = "int64") -> None:
        self.count, self.width, self.dtype = count, width, dtype

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.count:
            raise IndexError(i)
        return np.full(self.width, i, dtype=self.dtype)


def ids(batch: Any) -> list[int]:
    """The samples a batch holds, by their first column."""
    return [int(row[0]) for row in np.atleast_2d(np.asarray(batch))]


def epochs_of(p: Prefetcher, epochs: int) -> list[list[list[int]]]:
    """Each epoch's batches (as sample ids) until the prefetcher's state reaches epoch ``epochs``."""
    out = []
    while p.state_dict()["epoch"] < epochs:
        out.append([ids(b) for b in p])
    return out


def flat(epochs: list[list[list[int]]]) -> list[list[int]]:
    return [b for e in epochs for b in e]


shapes = st.fixed_dictionaries(
    {
        "count": st.integers(1, 40),
        "batch_size": st.integers(1, 7),
        "drop_last": st.booleans(),
        "seed": st.integers(0, 2**32),
        "ordered": st.booleans(),
    }
)
machines = st.fixed_dictionaries({"workers": st.integers(1, 4), "max_bytes": st.sampled_from([256, 4096, 1 << 20])})


@pytest.mark.timeout(300)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes, machines, machines, st.data())
def test_a_state_taken_between_any_two_batches_resumes_exactly(shape, before, after, data):
    source = Samples(shape.pop("count"))
    ordered = shape.pop("ordered")
    with Prefetcher(source, max_bytes=1 << 20, shuffle=True, **shape) as reference:
        whole = epochs_of(reference, 2)
    batches = sum(len(e) for e in whole)
    stop = data.draw(st.integers(0, batches), label="batches handed over before the state is taken")
    seen: list[list[int]] = []
    with Prefetcher(source, shuffle=True, ordered=ordered, **shape, **before) as first:
        state = first.state_dict()
        while len(seen) < stop:
            it = iter(first)
            for batch in it:
                seen.append(ids(batch))
                if len(seen) == stop:
                    state = first.state_dict()  # between this batch and the next
                    break
            it.close()
    state = json.loads(json.dumps(state))  # plain data, as a file holds it
    with Prefetcher(source, shuffle=True, ordered=ordered, **shape, **after) as resumed:
        resumed.load_state_dict(state)
        rest = epochs_of(resumed, 2)
    assert_nothing_left_running()
    if ordered:
        assert seen + flat(rest) == flat(whole)
    else:
        # Each epoch's batches once each, whatever the order they were handed over in.
        first_epoch = len(whole[0]) if whole else 0
        handed = seen + flat(rest)
        assert sorted(handed[:first_epoch]) == sorted(whole[0] if whole else [])
        assert sorted(handed) == sorted(flat(whole))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_resumed_epoch_then_every_later_one_is_the_same_bit_for_bit(mode):
    source = Samples(50, width=3, dtype="float32")
    with Prefetcher(source, max_bytes="1MiB", batch_size=4, shuffle=True, seed=11) as reference:
        whole = [[np.asarray(b).tobytes() for b in reference] for _ in range(3)]
    with Prefetcher(source, max_bytes="1MiB", batch_size=4, shuffle=True, seed=11, mode=mode, workers=3) as first:
        it = iter(first)
        head = [np.asarray(next(it)).tobytes() for _ in range(5)]
        state = first.state_dict()
    with Prefetcher(source, max_bytes="64KiB", batch_size=4, shuffle=True, seed=99, workers=1) as resumed:
        resumed.load_state_dict(state)  # the state's seed, not the one given here
        rest = [np.asarray(b).tobytes() for b in resumed]
        later = [[np.asarray(b).tobytes() for b in resumed] for _ in range(2)]
    assert_nothing_left_running()
    assert head + rest == whole[0] and later == whole[1:]


@pytest.mark.timeout(60)
def test_a_state_taken_from_another_thread_while_batches_are_handed_over_is_whole():
    states: list[dict[str, Any]] = []
    stop = threading.Event()
    with Prefetcher(Samples(400), max_bytes="1MiB", batch_size=2, shuffle=True, seed=3, workers=4, ordered=False) as p:

        def take() -> None:
            while not stop.is_set():
                states.append(p.state_dict())

        taker = threading.Thread(target=take)
        taker.start()
        handed = sum(1 for _ in p)
        stop.set()
        taker.join(timeout=10)
    assert handed == 200 and states
    ends = [(s["epoch"], s["done"]) for s in states]
    assert ends == sorted(ends)  # never goes back
    for state in states[:: max(1, len(states) // 40)]:
        with Prefetcher(Samples(400), max_bytes="1MiB", batch_size=2, shuffle=True) as resumed:
            resumed.load_state_dict(state)  # each one whole: `also` after `done`, none past the epoch
            rest = sum(1 for _ in resumed)
        assert rest == 200 - state["done"] - len(state["also"]) if state["epoch"] == 0 else rest == 200
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_the_state_is_small_plain_and_holds_nothing_of_the_machine():
    with Prefetcher(Samples(100_000), max_bytes="4MiB", batch_size=32, shuffle=True, seed=1, workers=3) as p:
        it = iter(p)
        for _ in range(10):
            next(it)
        state = p.state_dict()
        it.close()
    assert json.loads(json.dumps(state)) == state
    assert len(json.dumps(state)) < 400
    assert not {"workers", "mode", "max_bytes", "depth"} & set(state)
    assert (state["epoch"], state["done"], state["also"]) == (0, 10, [])


@pytest.mark.timeout(60)
def test_a_state_of_another_source_or_shape_is_a_clear_error():
    with Prefetcher(Samples(30), max_bytes="1MiB", batch_size=4, shuffle=True, seed=1) as p:
        state = p.state_dict()
    cases = [
        (Samples(31), {"batch_size": 4, "shuffle": True}, "source of 30 items, and this one has 31"),
        (Samples(30), {"batch_size": 5, "shuffle": True}, "batch_size=4"),
        (Samples(30), {"batch_size": 4, "shuffle": False}, "shuffle=True"),
        (Samples(30), {"batch_size": 4, "shuffle": True, "drop_last": True}, "drop_last=False"),
    ]
    for source, kwargs, words in cases:
        with Prefetcher(source, max_bytes="1MiB", **kwargs) as other, pytest.raises(ValueError, match=words):
            other.load_state_dict(state)
    with Prefetcher(Samples(30), max_bytes="1MiB", batch_size=4, shuffle=True) as same:
        for bad, error in (
            ([1, 2], TypeError),
            ({"epoch": 1}, ValueError),
            ({**state, "queuetune_prefetcher": 99}, ValueError),
            ({**state, "done": -1}, ValueError),
            ({**state, "done": 9}, ValueError),
            ({**state, "also": [0]}, ValueError),
        ):
            with pytest.raises(error):
                same.load_state_dict(bad)
        it = iter(same)
        next(it)
        with pytest.raises(ValueError, match="between epochs"):
            same.load_state_dict(state)
        it.close()
    with Prefetcher(iter(range(5)), max_bytes="1MiB") as plain, pytest.raises(TypeError, match="plain iterable"):
        plain.state_dict()
    with pytest.raises(TypeError, match="seed must be an integer"):
        Prefetcher(Samples(3), max_bytes="1MiB", seed="1")
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_the_report_counts_a_resumed_epoch_as_resumed_not_as_samples_never_seen():
    with Prefetcher(Samples(40), max_bytes="1MiB", batch_size=4, shuffle=True, seed=2) as first:
        it = iter(first)
        for _ in range(3):
            next(it)
        state = first.state_dict()
        it.close()
    with Prefetcher(Samples(40), max_bytes="1MiB", batch_size=4, shuffle=True, seed=2) as resumed:
        resumed.load_state_dict(state)
        assert len(list(resumed)) == 7
        cov = resumed.report().coverage[0]
    assert_nothing_left_running()
    assert cov.resumed_after == 3 and cov.never_count is None and cov.not_reached == 12
    assert cov.consumed == 28 and cov.duplicates == []


# -- killed with SIGKILL, resumed in a new process ---------------------------------------------


def child(mode: str, ordered: bool, state_path: Path, epochs: int) -> None:
    """Hand over every batch of ``epochs`` epochs, printing each, and after each
    write the checkpoint (the state, and the batches the job has handed over)
    atomically; resume from the checkpoint where there is one, with a worker
    count of its own."""
    workers = random.Random(os.getpid()).randint(1, 3)
    shape = {"batch_size": 3, "shuffle": True, "seed": 5}
    p = Prefetcher(Samples(150), max_bytes="256KiB", mode=mode, ordered=ordered, workers=workers, **shape)
    handed = 0
    if state_path.exists():
        saved = json.loads(state_path.read_text())
        p.load_state_dict(saved["state"])
        handed = saved["handed"]
    while p.state_dict()["epoch"] < epochs:
        for batch in p:
            handed += 1
            print(json.dumps(ids(batch)), flush=True)
            partial = state_path.with_suffix(".partial")
            partial.write_text(json.dumps({"state": p.state_dict(), "handed": handed}))
            partial.replace(state_path)
            time.sleep(0.005)
    p.close()
    print("END", flush=True)


def reference(epochs: int) -> list[list[list[int]]]:
    with Prefetcher(Samples(150), max_bytes="256KiB", batch_size=3, shuffle=True, seed=5) as p:
        return epochs_of(p, epochs)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_killed_with_sigkill_at_20_random_batches_and_resumed_in_a_new_process_each_time(tmp_path, mode, ordered):
    state_path = tmp_path / "checkpoint.json"
    rng = random.Random(f"{mode}{ordered}")
    job: list[list[int]] = []  # what the job handed over, as its checkpoints keep it
    killed = []
    while True:
        base = len(job)
        proc = subprocess.Popen(
            [sys.executable, __file__, mode, str(ordered), str(state_path), "2"],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        at = rng.randint(1, 3) if len(killed) < 20 else None
        lines: list[str] = []
        for line in proc.stdout:
            lines.append(line)
            if at is not None and len(lines) == at:
                proc.send_signal(signal.SIGKILL)
                break
        lines += proc.stdout.read().splitlines(keepends=True)  # what it printed before it died
        proc.wait(timeout=30)
        printed = [json.loads(line) for line in lines if line.strip() not in ("", "END")]
        if proc.returncode == 0:
            assert lines and lines[-1].strip() == "END"
            job += printed
            break
        assert proc.returncode == -signal.SIGKILL and at is not None
        killed.append(proc.pid)
        # A batch printed after the last checkpoint it wrote is handed over again.
        saved = json.loads(state_path.read_text())["handed"] if state_path.exists() else 0
        assert base <= saved <= base + len(printed)
        job += printed[: saved - base]
    assert len(killed) == 20
    whole = reference(2)
    if ordered:
        assert job == flat(whole)
    else:
        assert sorted(job[: len(whole[0])]) == sorted(whole[0])
        assert sorted(job) == sorted(flat(whole))
    assert_nothing_left_running()
    if shm.available():
        left = [name for name in os.listdir("/dev/shm") if any(name.startswith(f"queuetune-{pid}-") for pid in killed)]
        assert left == [], left


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2] == "True", Path(sys.argv[3]), int(sys.argv[4]))
