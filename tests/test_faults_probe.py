"""Fault injection over the probe (``queuetune.watch``) and the tuner's trial runner
(``queuetune.tune.run_trial``), for each loader the probe watches: a generator, a
plain iterable, a torch DataLoader (in the main process and in worker processes),
a Keras PyDataset under ``fit`` (threads and processes) and a tf.data Dataset.

Each case checks that the original error reaches the caller, that the trace up to
the fault is kept and reads back from disk, and (through the autouse fixture in
conftest.py) that no queuetune thread and no child process is left running.
"""

from __future__ import annotations

import gc
import os
import random
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import queuetune
from helpers import OUTCOMES, assert_nothing_left_running
from queuetune import Trace
from queuetune.terminal import print_report

pytestmark = [pytest.mark.faults]

ROWS, WIDTH = 4, 3
SEEDS = [3, 11]


class Injected(Exception):
    """The fault: a type of its own, so a test can tell it is the original."""


def batch_of(i: int, rows: int = ROWS) -> np.ndarray:
    return np.full((rows, WIDTH), i, dtype="float32")


def bytes_of(rows: int) -> int:
    return rows * WIDTH * 4


def fault_at(seed: int, n: int) -> int:
    """A random batch index, never the first nor the last."""
    return random.Random(seed).randrange(1, n - 1)


def ident(batch) -> int:
    """The index of the item a batch was built from (every row holds it)."""
    return int(np.asarray(batch)[0, 0])


def saved(probe, tmp_path: Path) -> Trace:
    """The probe's trace, written to disk and read back."""
    path = tmp_path / "trace.json"
    probe.trace().save(path)
    return Trace.load(path)


def marks(trace: Trace, kind: str) -> list:
    return [m.value for m in trace.marks if m.kind == kind]


# --- the loaders -----------------------------------------------------------------------


class Plan:
    """What a loader does for item ``i``: how many rows, whether it fails, whether it is slow."""

    def __init__(
        self, n: int, fail_at: int | None = None, rows=None, slow_from: int | None = None, delay: float = 0.0, item=None
    ) -> None:
        self.n, self.fail_at, self.rows = n, fail_at, rows or (lambda i: ROWS)
        self.slow_from, self.delay, self.item = slow_from, delay, item

    def get(self, i: int):
        if i == self.fail_at:
            raise Injected(f"injected at batch {i}")
        if self.slow_from is not None and i >= self.slow_from:
            time.sleep(self.delay)
        if self.item is not None:
            return self.item(i)
        return batch_of(i, self.rows(i))


class Source:
    """A plain iterable (not an iterator) over a plan."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __iter__(self):
        return (self.plan.get(i) for i in range(self.plan.n))

    def __len__(self) -> int:
        return self.plan.n


def torch_loader(plan: Plan, workers: int, **options):
    torch = pytest.importorskip("torch")

    class Items(torch.utils.data.Dataset):
        def __len__(self):
            return plan.n

        def __getitem__(self, i):
            return plan.get(i)

    # batch_size=None: each item is one batch, so batch i is item i
    return torch.utils.data.DataLoader(Items(), batch_size=None, num_workers=workers, **options)


def tf_dataset(plan: Plan):
    tf = pytest.importorskip("tensorflow")

    def gen():
        for i in range(plan.n):
            yield plan.get(i)

    return tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec((None, WIDTH), tf.float32))


LOOP_KINDS = [
    "generator",
    "iterable",
    pytest.param("torch-0", marks=pytest.mark.torch),
    pytest.param("torch-2", marks=pytest.mark.torch),
    pytest.param("tfdata", marks=pytest.mark.tf),
]


def loader(kind: str, plan: Plan, **options):
    """The unwatched loader of one integration that a plain loop consumes."""
    if kind == "generator":
        return (plan.get(i) for i in range(plan.n))
    if kind == "iterable":
        return Source(plan)
    if kind == "torch-0":
        return torch_loader(plan, 0, **options)
    if kind == "torch-2":
        return torch_loader(plan, 2, **options)
    if kind == "tfdata":
        return tf_dataset(plan)
    raise AssertionError(kind)


def expected_error(kind: str) -> type[BaseException]:
    """What the loop sees when the loader raises ``Injected``: tf.data turns a
    Python error into its own UnknownError, naming the original."""
    if kind == "tfdata":
        import tensorflow as tf

        return tf.errors.UnknownError
    return Injected


def loop(watched, on_batch=None) -> tuple[list[int], BaseException | None]:
    """Consume ``watched`` in a plain loop: the items seen and what was raised.

    The exception comes back without its traceback, whose frames would keep the
    loader's iterator (and so its pass) alive.
    """
    got: list[int] = []
    try:
        for batch in watched:
            got.append(ident(batch))
            if on_batch is not None and on_batch(len(got)) == "break":
                break
    except OUTCOMES:
        raise
    except BaseException as exc:
        return got, exc.with_traceback(None)
    return got, None


def close(watched) -> None:
    gc.collect()
    queuetune.probe_of(watched).close()


# --- 1. the loader raises at a random batch ---------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_a_loader_error_reaches_the_loop_and_the_batches_before_it_are_kept(kind, seed, tmp_path):
    n = 12
    k = fault_at(seed, n)
    watched = queuetune.watch(loader(kind, Plan(n, fail_at=k)))
    got, error = loop(watched)
    assert type(error) is expected_error(kind)
    assert f"injected at batch {k}" in str(error)
    assert got == list(range(k))
    gc.collect()
    probe = queuetune.probe_of(watched)
    probe.settle(quiet=0.1)
    trace = saved(probe, tmp_path)
    assert len(trace.consumed) == k
    assert [c.nbytes for c in trace.consumed] == [bytes_of(ROWS)] * k
    if kind.startswith("torch"):
        assert [c.samples for c in trace.consumed] == [[i] for i in range(k)]
    built = sorted(p.index if p.index is not None else p.key for p in trace.produced)
    if kind == "torch-2":
        # the other worker may have built batches past the fault; the failed one was never built
        assert set(range(k)) <= set(built) and k not in built
    else:
        assert len(trace.produced) == k
    errors = marks(trace, "error")
    assert len(errors) == 1 and f"injected at batch {k}" in errors[0]
    assert errors[0].startswith(expected_error(kind).__name__ + ":")
    assert marks(trace, "run_end") == [0]  # the pass ended with the error
    close(watched)


# --- 2. a worker process killed mid-epoch ------------------------------------------------


def worker_pids() -> list[int]:
    """This process's children but Python's multiprocessing helpers (the resource
    tracker an earlier test's spawn context started outlives that test)."""
    import psutil

    from queuetune.record.recorder import multiprocessing_helpers

    helpers = multiprocessing_helpers()
    return [c.pid for c in psutil.Process().children(recursive=True) if c.pid not in helpers]


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_a_torch_worker_killed_mid_epoch_gives_torchs_error_and_keeps_the_trace(tmp_path):
    watched = queuetune.watch(loader("torch-2", Plan(200, slow_from=0, delay=0.01)))
    got, victim = [], None
    with pytest.raises(RuntimeError) as info:
        for batch in watched:
            got.append(ident(batch))
            if len(got) == 3:
                victim = worker_pids()[0]
                os.kill(victim, signal.SIGKILL)
                time.sleep(30)  # torch's SIGCHLD handler raises here, or the next batch does
    message = str(info.value)
    assert "DataLoader worker" in message and str(victim) in message
    assert 3 <= len(got) < 200
    assert got == list(range(len(got)))
    gc.collect()
    assert_nothing_left_running(threads=False)  # torch stopped the other worker
    probe = queuetune.probe_of(watched)
    trace = saved(probe, tmp_path)
    assert [c.samples for c in trace.consumed] == [[i] for i in got]
    assert marks(trace, "run_end") == [0]
    close(watched)


# --- 3. the consumer raises, breaks out, is interrupted ---------------------------------


class StepError(Exception):
    pass


def interrupt(how: str) -> None:
    """Fault the consumer the way ``how`` says, from inside its step."""
    if how == "raise":
        raise StepError("the step failed")
    if how == "keyboard":
        raise KeyboardInterrupt
    if how == "sigint":
        signal.raise_signal(signal.SIGINT)
        for _ in range(3000):  # the handler runs at the next bytecode; never gets far
            time.sleep(0.01)
        raise AssertionError("SIGINT did not interrupt the step")
    raise AssertionError(how)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["raise", "keyboard", "sigint", "break"])
@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_a_consumer_that_raises_breaks_or_is_interrupted(kind, how, tmp_path):
    n, stop = 20, 5
    watched = queuetune.watch(loader(kind, Plan(n)))

    def step(count: int):
        if count == stop:
            return "break" if how == "break" else interrupt(how)

    got, raised = loop(watched, step)
    expected = {"raise": StepError, "keyboard": KeyboardInterrupt, "sigint": KeyboardInterrupt}
    if how == "break":
        assert raised is None
    else:
        assert type(raised) is expected[how]
    assert got == list(range(stop))
    if kind == "generator":
        # the caller still holds the generator, which could go on: its pass
        # ends when it is closed (or collected)
        assert marks(queuetune.probe_of(watched).trace(), "run_end") == []
        watched.close()
    gc.collect()
    probe = queuetune.probe_of(watched)
    # the pass ended when the loop let go of it, before the probe was closed
    assert marks(probe.trace(), "run_end") == [0]
    assert_nothing_left_running(threads=False)
    probe.settle(quiet=0.1)
    trace = saved(probe, tmp_path)
    assert len(trace.consumed) == stop
    assert marks(trace, "error") == []  # the loader did not fail
    close(watched)


# --- the tuner's trial runner ------------------------------------------------------------


def kept_trace(error: BaseException) -> Trace:
    """The trace a failed trial saved, from the note it added to the error."""
    import re

    notes = [n for n in getattr(error, "__notes__", []) if n.startswith("queuetune:")]
    assert len(notes) == 1, notes
    found = re.search(r"saved in (\S+\.json)$", notes[0])
    assert found, notes[0]
    path = Path(found.group(1))
    assert path.name.startswith(f"queuetune-trial-{os.getpid()}-")
    try:
        return Trace.load(path)
    finally:
        path.unlink()


def python_factory(plan: Plan, step):
    def make():
        return (plan.get(i) for i in range(plan.n)), step

    return make


def torch_factory(plan: Plan, step):
    def make(num_workers=2, prefetch_factor=2):
        return torch_loader(plan, num_workers, prefetch_factor=prefetch_factor), step

    return make


TRIAL_KINDS = [
    ("python", {"buffer": 0}),
    ("python", {"buffer": 2}),
    pytest.param("torch", {"num_workers": 2, "prefetch_factor": 2}, marks=pytest.mark.torch),
    pytest.param("torch", {"num_workers": 0, "prefetch_factor": None}, marks=pytest.mark.torch),
]


def trial_factory(framework: str, plan: Plan, step):
    return (python_factory if framework == "python" else torch_factory)(plan, step)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("framework,settings", TRIAL_KINDS)
def test_a_trial_whose_loader_raises_keeps_its_trace(framework, settings, seed):
    from queuetune.tune import run_trial

    n = 12
    k = fault_at(seed, n)
    taken = []
    factory = trial_factory(framework, Plan(n, fail_at=k), lambda b: taken.append(ident(b)))
    with pytest.raises(Injected, match=f"injected at batch {k}") as info:
        run_trial(factory, settings, framework, steps=n, warmup=0)
    assert taken == list(range(k))
    trace = kept_trace(info.value)
    assert len(trace.consumed) == k
    assert len(marks(trace, "error")) == 1 and f"injected at batch {k}" in marks(trace, "error")[0]
    assert marks(trace, "run_end") == [0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["raise", "keyboard", "sigint"])
@pytest.mark.parametrize("framework,settings", TRIAL_KINDS)
def test_a_trial_whose_consumer_fails_keeps_its_trace(framework, settings, how):
    from queuetune.tune import run_trial

    stop, taken = 4, []

    def step(batch):
        taken.append(ident(batch))
        if len(taken) == stop:
            try:
                interrupt(how)
            except BaseException as exc:
                raised.append(exc)
                raise

    raised: list[BaseException] = []
    factory = trial_factory(framework, Plan(20), step)
    with pytest.raises(StepError if how == "raise" else KeyboardInterrupt) as info:
        run_trial(factory, settings, framework, steps=20, warmup=0)
    assert info.value is raised[0]  # the very exception the step raised
    assert taken == list(range(stop))
    trace = kept_trace(info.value)
    assert len(trace.consumed) == stop
    assert marks(trace, "run_end") == [0]
    assert marks(trace, "error") == []


# --- Keras: a PyDataset under fit ---------------------------------------------------------

KERAS_KINDS = [
    pytest.param({"workers": 1}, id="keras-1", marks=pytest.mark.keras),
    pytest.param({"workers": 2}, id="keras-2-threads", marks=pytest.mark.keras),
    pytest.param({"workers": 2, "use_multiprocessing": True}, id="keras-2-processes", marks=pytest.mark.keras),
]


def keras_dataset(plan: Plan, **options):
    keras = pytest.importorskip("keras")

    class Items(keras.utils.PyDataset):
        def __init__(self):
            super().__init__(max_queue_size=3, **options)

        @property
        def num_batches(self):
            return plan.n

        def __getitem__(self, i):
            x = plan.get(i)
            return x, np.zeros((len(x), 1), "float32")

    return Items()


def keras_model(on_step=None):
    """A model that notes the item of every batch a training step receives
    (the ground truth of consumption) and calls ``on_step`` with the count."""
    keras = pytest.importorskip("keras")
    seen: list[int] = []

    class Recording(keras.Model):
        def train_step(self, data):
            seen.append(int(data[0][0, 0]))
            if on_step is not None:
                on_step(len(seen))
            return super().train_step(data)

    inp = keras.Input((WIDTH,))
    model = Recording(inp, keras.layers.Dense(1)(inp))
    model.compile("sgd", "mse")
    return model, seen


def fit(model, watched, callbacks=()) -> BaseException | None:
    """``model.fit`` over the watched dataset with the probe's callback last; what it raised."""
    probe = queuetune.probe_of(watched)
    try:
        model.fit(
            watched,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[*callbacks, probe.keras_callback(print_report=False)],
        )
    except OUTCOMES:
        raise
    except BaseException as exc:
        return exc.with_traceback(None)
    return None


def stop_keras_enqueuers() -> int:
    """Stop the Keras enqueuers still running (Keras leaves one running when fit
    raises); return how many there were."""
    stopped = 0
    for thread in threading.enumerate():
        enqueuer = getattr(getattr(thread, "_target", None), "__self__", None)
        if type(enqueuer).__name__ == "OrderedEnqueuer" and enqueuer.is_running():
            enqueuer.stop(drain_queue_and_join=True)
            stopped += 1
    return stopped


def has_enqueuer(options) -> bool:
    return options["workers"] > 1 or options.get("use_multiprocessing", False)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("options", KERAS_KINDS)
def test_a_pydataset_error_reaches_fit_and_the_steps_before_it_are_kept(options, seed, tmp_path):
    n = 12
    k = fault_at(seed, n)
    watched = queuetune.watch(keras_dataset(Plan(n, fail_at=k), **options))
    model, seen = keras_model()
    error = fit(model, watched)
    assert type(error) is Injected and str(error) == f"injected at batch {k}"
    assert stop_keras_enqueuers() == 0  # Keras stops its workers on a loader error
    probe = queuetune.probe_of(watched)
    probe.settle(quiet=0.1)
    trace = saved(probe, tmp_path)
    assert len(trace.consumed) == len(seen)  # every step that ran, counted once
    # Keras serves the batches its model build read ahead first, so steps may
    # repeat an item; none reached a step past the fault
    assert all(i < k for i in seen)
    built = {p.index for p in trace.produced}
    assert set(range(k)) <= built and k not in built
    if options.get("use_multiprocessing"):
        # the batch failed in a worker process: only fit sees the error
        assert marks(trace, "error") == []
    else:
        assert marks(trace, "error") == [f"Injected: injected at batch {k}"]
    close(watched)
    # Keras may meet the error while building the model, before fit's run begins
    assert marks(probe.trace(), "run_end") == marks(probe.trace(), "run_begin")


class CallbackError(Exception):
    pass


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["raise", "callback", "keyboard", "sigint", "stop_training"])
@pytest.mark.parametrize("options", KERAS_KINDS)
def test_a_training_step_or_callback_that_fails_or_stops(options, how, tmp_path):
    keras = pytest.importorskip("keras")
    stop, raised = 5, []

    def on_step(count: int) -> None:
        if count == stop and how in ("raise", "keyboard", "sigint"):
            try:
                interrupt(how)
            except BaseException as exc:
                raised.append(exc)
                raise

    class Stopper(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 == stop:
                if how == "callback":
                    raised.append(CallbackError("the callback failed"))
                    raise raised[-1]
                if how == "stop_training":
                    self.model.stop_training = True

    watched = queuetune.watch(keras_dataset(Plan(40), **options))
    model, seen = keras_model(on_step)
    error = fit(model, watched, callbacks=[Stopper()])
    if how == "stop_training":
        assert error is None
    else:
        assert error is raised[0]  # the very exception, unchanged
    assert len(seen) == stop
    # Keras leaves its enqueuer (worker threads or processes) running when fit
    # raises, and also when a callback stops training early
    assert stop_keras_enqueuers() == (1 if has_enqueuer(options) else 0)
    probe = queuetune.probe_of(watched)
    trace = saved(probe, tmp_path)
    assert len(trace.consumed) == stop
    if how == "stop_training":
        assert marks(trace, "run_end") == [0]  # on_train_end ran
    else:
        assert marks(trace, "run_end") == []  # no callback sees fit fail
    close(watched)
    assert marks(probe.trace(), "run_end") == [0]  # closing the probe ends the run
    assert_nothing_left_running()


# --- 4. batches whose size changes mid-run -----------------------------------------------


def growing(i: int) -> int:
    return 2 if i < 6 else 200


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_batches_that_grow_mid_run_are_counted_at_their_real_size(kind):
    n = 12
    watched = queuetune.watch(loader(kind, Plan(n, rows=growing)))
    got, error = loop(watched)
    assert error is None and got == list(range(n))
    probe = queuetune.probe_of(watched)
    probe.settle(quiet=0.1)
    trace = probe.trace()
    assert [c.nbytes for c in trace.consumed] == [bytes_of(growing(i)) for i in range(n)]
    assert sorted(p.nbytes for p in trace.produced) == sorted(bytes_of(growing(i)) for i in range(n))
    report = probe.report()
    big = bytes_of(200)
    assert report.peak_in_flight_bytes >= big
    assert report.peak_in_flight_bytes <= (trace.meta.depth + 2) * big
    close(watched)


@pytest.mark.keras
@pytest.mark.timeout(120)
def test_batches_that_grow_mid_run_under_keras_fit():
    n = 12
    watched = queuetune.watch(keras_dataset(Plan(n, rows=growing), workers=2))
    model, seen = keras_model()
    assert fit(model, watched) is None
    probe = queuetune.probe_of(watched)
    probe.settle(quiet=0.1)
    produced = probe.trace().produced
    # Keras may feed the epoch batches read ahead for its first peek (its enqueuer's
    # stop() keeps them for the next start), so an index can be built twice and the
    # last ones never: compare each build with its own index, and with what trained.
    assert len(seen) == n and set(seen) <= {p.index for p in produced}
    # each batch is (x, y): y holds one float32 per row
    assert [p.nbytes for p in produced] == [bytes_of(growing(p.index)) + 4 * growing(p.index) for p in produced]
    assert {growing(p.index) for p in produced} == {2, 200}
    assert probe.report().peak_in_flight_bytes >= bytes_of(200)
    close(watched)


# --- 5. batches that are not arrays ------------------------------------------------------


class Opaque:
    """An object with no ``nbytes``, no shape and no dtype."""

    def __init__(self, i: int) -> None:
        self.i = i


ODD = [
    ("a string", 0),
    ({"x": batch_of(1), "y": np.zeros(2, "int64")}, bytes_of(ROWS) + 16),
    (None, 0),
    (((batch_of(3), (batch_of(3, rows=1),)), "label"), bytes_of(ROWS) + bytes_of(1)),
    (Opaque(4), 0),
    ([b"raw", 7, 2.5], 3),
]

ODD_KINDS = [
    "generator",
    "iterable",
    pytest.param("torch-0", marks=pytest.mark.torch),
    pytest.param("torch-2", marks=pytest.mark.torch),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ODD_KINDS)
def test_batches_that_are_not_arrays_are_handed_over_and_counted_where_they_can_be(kind, tmp_path):
    plan = Plan(len(ODD), item=lambda i: ODD[i][0])
    watched = queuetune.watch(loader(kind, plan))
    got = list(watched)
    assert len(got) == len(ODD)
    assert got[0] == "a string" and got[2] is None
    probe = queuetune.probe_of(watched)
    probe.settle(quiet=0.1)
    trace = saved(probe, tmp_path)
    assert [c.nbytes for c in trace.consumed] == [size for _, size in ODD]
    assert sorted(p.nbytes for p in trace.produced) == sorted(size for _, size in ODD)
    report = probe.report()
    assert report.produced_batches == report.consumed_batches == len(ODD)
    report.to_json()
    close(watched)


# --- 6. an epoch of zero batches ---------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_an_epoch_of_zero_batches_gives_an_empty_report(kind, tmp_path):
    import io

    from rich.console import Console

    watched = queuetune.watch(loader(kind, Plan(0)))
    got, error = loop(watched)
    assert error is None and got == []
    probe = queuetune.probe_of(watched)
    trace = saved(probe, tmp_path)
    assert trace.produced == [] and trace.consumed == []
    report = probe.report()
    assert report.produced_batches == 0 and report.consumed_batches == 0
    assert report.peak_in_flight_batches == 0 and report.peak_in_flight_bytes == 0
    assert report.input_bound_fraction in (None, 0.0)
    report.to_json()
    out = io.StringIO()
    print_report(report, Console(file=out, width=120))
    assert "0 batches" in out.getvalue()
    close(watched)


def stop_a_finished_enqueuer(deadline: float) -> None:
    """Stop the first Keras enqueuer found running whose feeder thread has finished."""
    while time.monotonic() < deadline:
        for enqueuer in [o for o in gc.get_objects() if type(o).__name__ == "OrderedEnqueuer"]:
            feeder = enqueuer.run_thread
            if enqueuer.is_running() and feeder is not None and not feeder.is_alive():
                enqueuer.stop(drain_queue_and_join=True)
                return
        time.sleep(0.05)


@pytest.mark.keras
@pytest.mark.timeout(120)
@pytest.mark.parametrize("options", [{"workers": 1}, {"workers": 2}])
def test_an_empty_pydataset_is_refused_by_keras_and_the_probe_stays_empty(options):
    """Keras 3.15 refuses an empty PyDataset read without an enqueuer (workers=1).
    With one (workers=2), its ``fit`` waits for ever: the enqueuer's reader polls a
    queue that its finished feeder will never fill. Stopping that enqueuer from
    another thread ends ``fit`` with Keras's own error. The probe changes neither."""
    watched = queuetune.watch(keras_dataset(Plan(0), **options))
    model, seen = keras_model()
    watchdog = None
    if has_enqueuer(options):
        watchdog = threading.Thread(target=stop_a_finished_enqueuer, args=(time.monotonic() + 60,))
        watchdog.start()
    error = fit(model, watched)
    if watchdog is not None:
        watchdog.join()
    assert isinstance(error, ValueError)  # Keras's own
    assert "queuetune" not in type(error).__module__
    assert seen == []
    report = queuetune.report(watched)
    assert report.produced_batches == 0
    stop_keras_enqueuers()
    close(watched)


# --- 7. a very slow producer -------------------------------------------------------------


class TooSlow(Exception):
    pass


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_a_consumer_gives_up_on_a_slow_producer_and_nothing_waits_for_it(kind, tmp_path):
    # batch 2 on takes 2 s; the consumer gives up after waiting more than 0.5 s for one
    watched = queuetune.watch(loader(kind, Plan(50, slow_from=2, delay=2.0)))
    last = [time.monotonic()]

    def step(count: int):
        now = time.monotonic()
        waited, last[0] = now - last[0], now
        if count > 1 and waited > 0.5:
            raise TooSlow(f"waited for batch {count - 1}")

    got, error = loop(watched, step)
    assert type(error) is TooSlow
    assert got == [0, 1, 2]
    if kind == "generator":
        watched.close()
    gc.collect()
    probe = queuetune.probe_of(watched)
    probe.close()  # must not wait for the producer
    trace = saved(probe, tmp_path)
    assert len(trace.consumed) == 3 and marks(trace, "run_end") == [0]


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_a_torch_loader_timeout_gives_up_on_a_stuck_worker(tmp_path):
    # from batch 2 on, a worker takes a minute: torch's own timeout gives up first
    watched = queuetune.watch(loader("torch-2", Plan(20, slow_from=2, delay=60.0), timeout=2))
    got, error = loop(watched)
    assert type(error) is RuntimeError and "DataLoader timed out" in str(error)
    assert got == [0, 1]
    gc.collect()
    assert_nothing_left_running(threads=False)  # torch stopped the stuck workers
    probe = queuetune.probe_of(watched)
    probe.close()
    trace = saved(probe, tmp_path)
    assert len(trace.consumed) == 2
    assert marks(trace, "error") == [f"RuntimeError: {error}"]
