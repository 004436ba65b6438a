"""One measured trial: build the job for some settings, consume it under the probe."""

from __future__ import annotations

from typing import Any

from ..analysis.report import Report, analyze
from ..frameworks import Framework, get, model_framework
from ..frameworks.adapters import adapter_of
from ..prefetch.read_ahead import read_ahead
from ..probing.probe import Probe, probe_of, watch
from ..record.nbytes import nbytes
from ..record.recorder import clock
from ..record.trace import Trace
from .job import Factory, Job, build
from .measures import startup_backlog, throughput


def run_trial(
    factory: Factory,
    settings: dict[str, Any],
    framework: Framework | str,
    steps: int,
    warmup: int,
) -> tuple[Trace, Report, float]:
    """Build the job for ``settings``, consume ``steps`` batches under the probe,
    and return the trace, its report and the throughput after ``warmup`` batches
    and after the :func:`~queuetune.tune.startup_backlog`. ``framework`` is the
    loader's (or its name, see :mod:`queuetune.frameworks`).

    If the trial fails (the loader or the consumer raises, or it is interrupted),
    the exception reaches the caller unchanged, with one note added: the file in
    the system's temporary directory where the trace recorded up to the fault
    was saved (``queuetune-trial-<pid>-<random>.json``, read it with
    :meth:`Trace.load`).

    >>> def make():
    ...     def batches():
    ...         yield from range(3)
    ...         raise OSError("disk gone")
    ...     return batches(), lambda batch: None
    >>> import os
    >>> try:
    ...     run_trial(make, {"buffer": 0}, "python", steps=10, warmup=0)
    ... except OSError as exc:
    ...     path = exc.__notes__[0].split()[-1]
    >>> len(Trace.load(path).consumed)
    3
    >>> os.remove(path)
    """
    if isinstance(framework, str):
        framework = get(framework)
    job = build(factory, framework, settings)
    if framework.read_ahead_by_queuetune:
        assert framework.depth_knob is not None  # queuetune's read-ahead is its depth
        trace = _run_read_ahead(job, settings[framework.depth_knob], steps)
    else:
        watched = watch(job.loader)
        probe = probe_of(watched)
        try:
            _consume(job, framework, watched, probe, steps)
            probe.settle(quiet=0.05, timeout=2.0)
            trace = probe.trace()
        except BaseException as exc:
            probe.close()
            _keep_partial(probe.trace(), exc)
            raise
        finally:
            probe.close()
    return trace, analyze(trace), throughput(trace, max(warmup, startup_backlog(trace)))


def _consume(job: Job, framework: Framework, watched: Any, probe: Probe, steps: int) -> None:
    if job.model is not None:
        reader = model_framework(job.model)
        if reader is None:
            raise TypeError(f"the job's model is not one queuetune can run: {type(job.model).__name__}")
        adapter_of(reader).run_model(job.model, job.method, watched, job.kwargs, probe, steps)
        return
    iterator = adapter_of(framework).batches(watched, job)
    try:
        for _ in range(steps):
            try:
                batch = next(iterator)
            except StopIteration:
                break
            job.step(batch)  # type: ignore[misc]
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def _run_read_ahead(job: Job, buffer: int, steps: int) -> Trace:
    """A plain iterable behind queuetune's read-ahead thread: batches are counted
    as built inside the thread and as consumed by this loop."""
    if job.step is None:
        raise TypeError("a plain iterable needs a step function as its consumer")
    inner = watch(iter(job.loader))
    probe = probe_of(inner)
    recorder = probe.recorder
    recorder.consumer = "loop"
    outer = read_ahead(inner, buffer) if buffer > 0 else inner
    recorder.run_begin()
    failure: BaseException | None = None
    try:
        for seq in range(steps):
            asked = clock()
            try:
                batch = next(outer)
            except StopIteration:
                break
            recorder.consumed(asked, clock(), nbytes=nbytes(batch), key=seq)
            job.step(batch)
    except BaseException as exc:
        failure = exc
        raise
    finally:
        try:
            outer.close()  # type: ignore[union-attr]
        finally:
            recorder.run_end()
            trace = probe.trace()
            probe.close()
            if failure is not None:
                _keep_partial(trace, failure)
    return trace


def _keep_partial(trace: Trace, exc: BaseException) -> None:
    """Save the trace of a failed trial to a temporary file and name it in a note
    on ``exc``; saving never replaces the trial's own error."""
    import os
    import tempfile

    try:
        fd, path = tempfile.mkstemp(prefix=f"queuetune-trial-{os.getpid()}-", suffix=".json")
        with os.fdopen(fd, "w") as file:
            file.write(trace.to_json())
    except Exception as error:
        exc.add_note(f"queuetune: the trial's trace could not be saved ({error})")
        return
    exc.add_note(f"queuetune: the trace recorded up to the fault is saved in {path}")
