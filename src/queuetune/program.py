"""``queuetune run``: a program run under a :class:`~queuetune.probing.session.Session`,
each loader's trace saved, analysed and given a recommendation."""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

from .analysis.report import analyze
from .analysis.resumes import JOURNAL_SUFFIX, Part, Span, spans
from .common.jsonio import dumps
from .common.launch import Launch
from .probing.session import Session
from .record.trace import Trace
from .run.endings import TERMINATED, Endings, Terminated
from .run.result import LoaderResult, ProgramResult
from .run.runner import Target, run
from .sinks.journal import journaling
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
    show: Callable[[ProgramResult], None] | None = None,
    resume: str | os.PathLike[str] | None = None,
) -> ProgramResult:
    """Run ``target`` with every loader it iterates watched; save each trace to
    ``out`` (default: a new ``queuetune-run-<time>`` folder) as
    ``NN-<kind>.json``; analyse each and recommend a setting, and write what
    it found as ``summary.json`` (:meth:`ProgramResult.to_dict`). Under a launcher
    (torchrun: ``RANK`` and ``WORLD_SIZE`` set), every rank writes into one
    folder (default ``queuetune-run-<job>``), its files named ``...rank<R>...``.
    ``while_running(session)``: a context the program runs in (the live line);
    ``html``: also write ``report.html`` there (see :mod:`queuetune.render.html`),
    where a loader was watched; ``show(result)``: called with what was found once
    it is written (the CLI prints it).

    ``resume``: the folder of a run this one resumes (stopped, or killed: each
    loader's journal there, written as it ran, stands in for its trace); this
    run writes into a new ``resume-<K>`` folder inside it, and each epoch that
    spans a restart is counted across the runs (:mod:`queuetune.analysis.resumes`):
    the loader's ``resumes`` and its headline say whether it handed over every
    sample once. ``out`` is then not given.

    However the program ends, the report is written: by returning, raising,
    ``sys.exit``, Ctrl-C, ``os._exit(n)`` (then the process exits with ``n``
    after ``show``) or SIGTERM (see :mod:`queuetune.run.endings`;
    ``result.terminated`` says so). A process the program forks saves the
    loaders it iterates itself as ``NN-<kind>.pid<PID>.json`` as it ends; the
    summary, page and result list those of every such process that ended before
    the program did, after the program's own.

    >>> # run_program(Target("train.py")).loaders[0].report.verdict
    """
    target.check()
    launch = Launch.from_environment()
    # Every rank of a launch writes into the same folder: its files carry its rank.
    tag = f".rank{launch.rank}" if launch is not None else ""
    folder, earlier = _folders(out, resume, launch, tag)
    session = Session(sample_memory=sample_memory).start()
    this_run = _Run(target, folder, tag, session, html, show)
    this_run.earlier = [path.resolve() for path in earlier]
    try:
        terminated = this_run.watch(while_running)
    finally:
        session.stop()  # also where the live line failed to start
    assert this_run.result is not None
    this_run.result.terminated = terminated
    return this_run.result


def _folders(
    out: str | os.PathLike[str] | None, resume: str | os.PathLike[str] | None, launch: Launch | None, tag: str
) -> tuple[Path, list[Path]]:
    """The folder a run writes into, made, and the folders of the runs it resumes, oldest first."""
    earlier: list[Path] = []
    if resume is not None:
        if out is not None:
            raise ValueError("give the folder to resume or the folder to write into, not both")
        earlier = earlier_runs(resume, tag)
        out = earlier[0] / f"resume-{len(earlier)}"
    if out is None:
        out = Path(launch.folder_name()) if launch is not None else default_out()
    return prepare_out(out).resolve(), earlier  # the paths it prints are absolute


class _Run:
    """One ``queuetune run``: what it writes when the program ends, in its own
    process (:meth:`finish`) or in a process the program forked (:meth:`save_own`)."""

    def __init__(
        self,
        target: Target,
        folder: Path,
        tag: str,
        session: Session,
        html: bool,
        show: Callable[[ProgramResult], None] | None,
    ) -> None:
        self.target, self.folder, self.tag, self.session = target, folder, tag, session
        self.html, self.show = html, show
        self.owner = os.getpid()
        self.contexts = ExitStack()
        #: The folders of the runs this one resumes, oldest first.
        self.earlier: list[Path] = []
        self.result: ProgramResult | None = None
        # A child's traces found at the end must be this run's, not an earlier run's in the same folder.
        self._before = set(os.listdir(folder))

    def watch(self, while_running: Callable[[Session], AbstractContextManager[Any]] | None) -> bool:
        """Run the program with the journal and ``while_running``'s context
        entered, and finish the run however it ends; whether a SIGTERM ended it."""
        with Endings(self.finish, self.save_own) as endings:
            try:
                with endings.program_running(), self.contexts:
                    self.contexts.enter_context(journaling(self.session, self.journal_path))
                    if while_running is not None:
                        self.contexts.enter_context(while_running(self.session))
                    code = run(self.target)
                    if os.getpid() != self.owner:  # a forked child returned: the contexts are its parent's
                        self.contexts.pop_all()
            except Terminated:  # SIGTERM after the program's end, before the live line's
                code = TERMINATED
            endings.finish_once(code)
        return endings.terminated

    def finish(self, code: int) -> None:
        """End the run with the program's exit ``code``: in the run's own process,
        write every trace, the summary and the page, and show them; in a forked
        child, save its own traces."""
        if os.getpid() != self.owner:
            self.save_own()
            self.session.stop()
            self.result = ProgramResult(code, self.folder)
            return
        self.contexts.close()  # the live line goes before the report is printed
        self.session.stop()
        result = ProgramResult(code, self.folder, left_alone=dict(self.session.left_alone))
        traces = []
        kinds = []
        for number, (watched, trace) in enumerate(self.session.traces(), start=1):
            path = self.trace_path(number, watched.kind)
            trace.save(path)
            traces.append((watched.label, path, trace))
            kinds.append(watched.kind)
        traces += self._children()
        for number, (label, path, trace) in enumerate(traces, start=1):
            report = analyze(trace)
            recommendation, line = advise(trace, report)
            loader = LoaderResult(label, path, report, recommendation, line)
            if number <= len(kinds) and self.earlier:
                loader.resumes = self._spans(number, kinds[number - 1], label, trace)
                trouble = [span for span in loader.resumes if not span.once] or loader.resumes
                if trouble:
                    loader.headline = dataclasses.replace(line, resume=trouble[0].text())
            result.loaders.append(loader)
        if result.loaders:  # no report of nothing
            result.summary = self.folder / f"{SUMMARY}{self.tag}.json"
            result.summary.write_text(dumps(result.to_dict()) + "\n", encoding="utf-8")
        if self.html and result.loaders:
            from .render.html import Section, html_report

            sections = [
                Section(loader.label, trace, loader.report, loader.recommendation.text(), loader.headline.text())
                for loader, (_, _, trace) in zip(result.loaders, traces)
            ]
            result.html = self.folder / f"report{self.tag}.html"
            title = f"queuetune run {' '.join(self.target.argv())}"
            result.html.write_text(html_report(sections, title), encoding="utf-8")
        self.result = result
        if self.show is not None:
            self.show(result)

    def trace_path(self, number: int, kind: str, folder: Path | None = None, suffix: str = ".json") -> Path:
        """Where loader ``number`` (from 1) of ``kind`` is saved in ``folder`` (this run's)."""
        return (folder or self.folder) / f"{number:02d}-{_slug(kind)}{self.tag}{suffix}"

    def journal_path(self, number: int, kind: str) -> Path:
        return self.trace_path(number, kind, suffix=JOURNAL_SUFFIX)

    def _spans(self, number: int, kind: str, label: str, trace: Trace) -> list[Span]:
        """The epochs of loader ``number`` that span a restart, across the earlier
        runs (each one's trace of it, else its journal) and this one."""
        parts = []
        for folder in self.earlier:
            saved, journal = (
                self.trace_path(number, kind, folder),
                self.trace_path(number, kind, folder, JOURNAL_SUFFIX),
            )
            try:
                parts.append(Part.of_trace(Trace.load(saved)) if saved.exists() else Part.of_journal(journal))
            except (OSError, ValueError):
                continue  # a run that never reached this loader
        return spans([*parts, Part.of_trace(trace)], label)

    def save_own(self) -> None:
        """In a process the program forked: save the loaders it iterated itself
        as ``NN-<kind>.pid<PID>.json`` (written whole, then renamed, so that the
        run's process never reads half a file)."""
        pid = os.getpid()
        if pid == self.owner:
            return
        for number, (watched, trace) in enumerate(self.session.traces(), start=1):
            trace.meta = dataclasses.replace(trace.meta, name=watched.label)
            path = self.folder / f"{number:02d}-{_slug(watched.kind)}{self.tag}.pid{pid}.json"
            partial = path.with_name(path.name + ".partial")
            trace.save(partial)
            os.replace(partial, path)

    def _children(self) -> list[tuple[str, Path, Trace]]:
        """The traces forked processes saved during this run, by process, then number."""
        pattern = re.compile(rf"(\d+)-.+{re.escape(self.tag)}\.pid(\d+)\.json")
        found = []
        for name in os.listdir(self.folder):
            matched = pattern.fullmatch(name)
            if matched is not None and name not in self._before:
                found.append((int(matched[2]), int(matched[1]), self.folder / name))
        traces = []
        for _, _, path in sorted(found):
            try:
                trace = Trace.load(path)
            except ValueError:  # not a trace after all: another program's file of the same name
                continue
            traces.append((trace.meta.name or path.name, path, trace))
        return traces


#: The JSON summary's name in a run's folder (``summary.json``, ``summary.rank<R>.json``).
SUMMARY = "summary"


def earlier_runs(folder: str | os.PathLike[str], tag: str = "") -> list[Path]:
    """The folders of the runs of the job that began in ``folder``, oldest first:
    it, then its ``resume-1``, ``resume-2``, ... that hold a journal of this
    process (``tag``: its rank's, under a launcher; the ranks of a launch make
    the same folder theirs, whichever makes it first); a ValueError where it
    holds no run.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as top:
    ...     (Path(top) / "01-dataloader.journal.jsonl").touch()
    ...     (Path(top) / "resume-1").mkdir()
    ...     (Path(top) / "resume-1" / "01-dataloader.journal.jsonl").touch()
    ...     (Path(top) / "resume-2").mkdir()  # another rank's, begun now
    ...     [p.name for p in earlier_runs(top)][1:]
    ['resume-1']
    """
    first = Path(folder)
    if not first.is_dir():
        raise ValueError(f"no run to resume in {str(first)!r}: not a folder")
    if not any(first.glob(f"*{JOURNAL_SUFFIX}")) and not any(first.glob("*.json")):
        raise ValueError(f"no run to resume in {str(first)!r}: no trace or journal of queuetune run there")
    own = re.compile(rf"\d+-.+{re.escape(tag)}{re.escape(JOURNAL_SUFFIX)}")
    runs = [first]
    while True:
        later = first / f"resume-{len(runs)}"
        if not later.is_dir() or not any(
            own.fullmatch(name) and (tag or ".rank" not in name) for name in os.listdir(later)
        ):
            return runs
        runs.append(later)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "loader"
