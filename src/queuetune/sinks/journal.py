"""Each loader's journal, appended as the run goes: what ``queuetune run``
needs of a run that was killed before it wrote its traces (a preempted job,
SIGKILL) to count its samples in the job's coverage (see
:mod:`queuetune.analysis.resumes`). One JSON line a batch handed over (its run, epoch
and samples), one a ``resumed``, ``cut_short`` or ``checkpoint`` mark, after a
first line of the epoch's size; written each ``every`` seconds, and as the
loader's state is taken (a Prefetcher's or a ``StatefulDataLoader``'s
``state_dict()``), so a kill loses at most a second of it, and nothing up to
the last state taken."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis.resumes import journal_entries, journal_meta

if TYPE_CHECKING:
    from ..probing.session import Session, Watched

#: Seconds between two writes of the journals.
EVERY = 1.0


class _Journal:
    """One loader's journal file and how far it has been written."""

    def __init__(self, path: Path, watched: Watched) -> None:
        self.path, self.watched = path, watched
        self.consumed = self.marks = 0
        self.started = False
        self.runs: dict[int, int] = {}
        self.pid = os.getpid()
        # Written each second by the journal's thread, and by the thread that took a state or lets runs go.
        self._lock = threading.Lock()
        if watched.recorder is not None:
            watched.recorder.on_flush = self.write_now

    def write_now(self) -> None:
        if os.getpid() != self.pid:  # a forked copy of the recorder: the journal is the parent's
            return
        try:
            self.write()
        except OSError:  # a full disk ends the journal, not the program
            pass

    def write(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        recorder = self.watched.recorder
        if recorder is None:
            return
        consumed, marks = recorder.consumed_from(self.consumed), recorder.marks_from(self.marks)
        lines = []
        if not self.started:
            lines.append(json.dumps(journal_meta(recorder.meta)))
        for c in consumed:
            self.runs[c.epoch] = c.run
        lines += [json.dumps(entry) for entry in journal_entries(consumed, marks, self.runs)]
        if lines:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
        self.started = True
        self.consumed += len(consumed)
        self.marks += len(marks)


@contextmanager
def journaling(session: Session, path_of: Callable[[int, str], Path], every: float = EVERY) -> Iterator[None]:
    """While the context runs, append each loader of ``session`` to its journal
    at ``path_of(number, kind)`` (``number`` from 1, as its trace is numbered)
    each ``every`` seconds, and once more as it ends.

    >>> import tempfile
    >>> from queuetune.probing.session import Session
    >>> with tempfile.TemporaryDirectory() as folder, Session(sample_memory=False) as session:
    ...     with journaling(session, lambda n, kind: Path(folder) / f"{n}.jsonl"):
    ...         pass
    """
    journals: list[_Journal] = []
    stop = threading.Event()
    found = threading.Lock()

    def discover() -> list[_Journal]:
        # As each loader is added (its state may be taken before the next second), and each second.
        with found:
            loaders = list(session.loaders)
            for number, watched in enumerate(loaders[len(journals) :], start=len(journals) + 1):
                journals.append(_Journal(path_of(number, watched.kind), watched))
            return list(journals)

    def write_all() -> None:
        for journal in discover():
            journal.write_now()

    def loop() -> None:
        while not stop.wait(every):
            write_all()

    thread = threading.Thread(target=loop, name="queuetune-journal", daemon=True)
    thread.start()
    session.on_add.append(discover)
    try:
        yield
    finally:
        session.on_add.remove(discover)
        stop.set()
        thread.join(timeout=5)
        write_all()
