"""``queuetune run``: a program run under a :class:`~queuetune.session.Session`,
each loader's trace saved, analysed and given a recommendation."""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from .analysis import analyze
from .jsonio import dumps
from .launch import Launch
from .program_result import LoaderResult, ProgramResult
from .runner import Target, run
from .session import Session
from .tune.headline import advise


def default_out(now: float | None = None) -> Path:
    """A new folder name in the working directory, from the time.

    >>> default_out(0.0).name.startswith("queuetune-run-1970")
    True
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now) if now is not None else time.localtime())
    path = Path(f"queuetune-run-{stamp}")
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path(f"queuetune-run-{stamp}-{suffix}")
    return path


def prepare_out(out: str | os.PathLike[str], what: str = "traces") -> Path:
    """Make ``out`` (parents too) and check that files can be written in it; a
    ValueError naming the problem if not.

    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     prepare_out(os.path.join(folder, "a", "b")).is_dir()
    True
    """
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write {what} to {str(path)!r}: {exc.strerror or exc}") from None
    return path


def run_program(
    target: Target,
    out: str | os.PathLike[str] | None = None,
    sample_memory: bool = True,
    while_running: Callable[[Session], AbstractContextManager[Any]] | None = None,
    html: bool = True,
) -> ProgramResult:
    """Run ``target`` with every loader it iterates watched; save each trace to
    ``out`` (default: a new ``queuetune-run-<time>`` folder) as
    ``NN-<kind>.json``; analyse each and recommend a setting, and write what
    it found as ``summary.json`` (:meth:`ProgramResult.to_dict`). Under a launcher
    (torchrun: ``RANK`` and ``WORLD_SIZE`` set), every rank writes into one
    folder (default ``queuetune-run-<job>``), its files named ``...rank<R>...``.
    ``while_running(session)``: a context the program runs in (the live line);
    ``html``: also write ``report.html`` there (see :mod:`queuetune.render.html`),
    where a loader was watched.

    >>> # run_program(Target("train.py")).loaders[0].report.verdict
    """
    target.check()
    launch = Launch.from_environment()
    if out is None:
        out = Path(launch.folder_name()) if launch is not None else default_out()
    folder = prepare_out(out).resolve()  # the paths it prints are absolute
    # Every rank of a launch writes into the same folder: its files carry its rank.
    tag = f".rank{launch.rank}" if launch is not None else ""
    session = Session(sample_memory=sample_memory).start()
    try:
        with while_running(session) if while_running is not None else nullcontext():
            code = run(target)
    finally:
        session.stop()
    result = ProgramResult(code, folder, left_alone=dict(session.left_alone))
    traces = session.traces()
    for number, (watched, trace) in enumerate(traces, start=1):
        path = folder / f"{number:02d}-{_slug(watched.kind)}{tag}.json"
        trace.save(path)
        report = analyze(trace)
        recommendation, line = advise(trace, report)
        result.loaders.append(LoaderResult(watched.label, path, report, recommendation, line))
    if result.loaders:  # no report of nothing
        result.summary = folder / f"{SUMMARY}{tag}.json"
        result.summary.write_text(dumps(result.to_dict()) + "\n", encoding="utf-8")
    if html and result.loaders:
        from .render.html import Section, html_report

        sections = [
            Section(loader.label, trace, loader.report, loader.recommendation.text(), loader.headline.text())
            for loader, (_, trace) in zip(result.loaders, traces)
        ]
        result.html = folder / f"report{tag}.html"
        title = f"queuetune run {' '.join(target.argv())}"
        result.html.write_text(html_report(sections, title), encoding="utf-8")
    return result


#: The JSON summary's name in a run's folder (``summary.json``, ``summary.rank<R>.json``).
SUMMARY = "summary"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "loader"
