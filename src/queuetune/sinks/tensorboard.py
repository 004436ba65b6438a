"""TensorBoard scalars of a loader's live readings: per loader its input wait,
bytes in flight and batches a second, each ``every`` seconds, at the step of
the batches taken so far. Written as TensorBoard's own writer writes them (an
event file of scalar summaries), with its record writer and protocol buffers
alone: ``tensorboard.summary.Writer`` would import TensorFlow where it is
installed (seconds, and its log lines) to write a file."""

from __future__ import annotations

import itertools
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..probing.session import Session
    from ..record.recorder import Live

#: The scalars written for each loader, under ``queuetune/<loader>/``.
SCALARS: dict[str, Callable[[Live], float]] = {
    "input_wait": lambda live: live.waiting,
    "in_flight_bytes": lambda live: float(live.in_flight_bytes),
    "batches_per_s": lambda live: live.rate,
}


def tag_prefix(label: str) -> str:
    """A loader's label as a TensorBoard tag prefix: its kind and number.

    >>> tag_prefix("dataloader 1 (train.py:42)")
    'queuetune/dataloader_1'
    """
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", label.split(" (")[0]).strip("_") or "loader"
    return f"queuetune/{name}"


def writer_class() -> type[ScalarWriter]:
    """The writer of scalars, or an ImportError naming the extra where tensorboard
    is missing (so that a command fails before its program runs, not at the first batch)."""
    _tensorboard()
    return ScalarWriter


def _tensorboard() -> tuple[Any, Any, Any, Any]:
    """TensorBoard's event and summary protocol buffers, its record writer and its
    tensor helpers (none of them imports TensorFlow)."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter
        from tensorboard.util import tensor_util
    except ImportError as exc:
        why = f"TensorBoard scalars need tensorboard: pip install 'queuetune[tensorboard]' ({exc})"
        raise ImportError(why) from None
    return event_pb2, summary_pb2, RecordWriter, tensor_util


#: Numbers the event files one process writes in the same second apart.
_FILES = itertools.count()


class ScalarWriter:
    """Writes :data:`SCALARS` of one or more loaders to ``logdir``, in an event
    file of its own, flushed at each :meth:`write`.

    >>> import tempfile
    >>> from queuetune.record.recorder import Live
    >>> writer = ScalarWriter(tempfile.mkdtemp())  # doctest: +SKIP
    >>> writer.write("dataloader 1", Live(20.0, 0.1, 2, 2048, None, batches=40))  # doctest: +SKIP
    >>> writer.close()  # doctest: +SKIP
    """

    def __init__(self, logdir: str | os.PathLike[str]) -> None:
        self._events, summaries, records, self._tensors = _tensorboard()
        os.makedirs(logdir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILES)}"
        self._records = records(open(os.path.join(logdir, name), "wb"))  # closed by close()
        self._metadata = summaries.SummaryMetadata(
            plugin_data=summaries.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summaries.DataClass.DATA_CLASS_SCALAR,
        )
        self._lock = threading.Lock()
        self._closed = False
        self._records.write(self._events.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def write(self, label: str, live: Live) -> None:
        """One point of each scalar of ``label``, at step ``live.batches``."""
        import numpy as np

        prefix = tag_prefix(label)
        with self._lock:
            if self._closed:
                return
            for name, value in SCALARS.items():
                event = self._events.Event(wall_time=time.time(), step=live.batches)
                tensor = self._tensors.make_tensor_proto(np.float32(value(live)))
                event.summary.value.add(tag=f"{prefix}/{name}", tensor=tensor, metadata=self._metadata)
                self._records.write(event.SerializeToString())
            self._records.flush()

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._records.close()


@contextmanager
def session_scalars(session: Session, logdir: str | os.PathLike[str], every: float = 1.0) -> Iterator[ScalarWriter]:
    """Write every loader of ``session`` to ``logdir`` each ``every`` seconds
    while the block runs, and once more at its end (``queuetune run --tensorboard``)."""
    writer = ScalarWriter(logdir)
    stop = threading.Event()

    def write_all() -> None:
        for label, live in session.live():
            writer.write(label, live)

    def loop() -> None:
        while not stop.wait(every):
            write_all()

    thread = threading.Thread(target=loop, name="queuetune-tensorboard", daemon=True)
    thread.start()
    try:
        yield writer
    finally:
        stop.set()
        thread.join()
        write_all()
        writer.close()
