"""TensorBoard scalars of a loader's live readings, written with TensorBoard's
own writer (``tensorboard.summary.Writer``): per loader its input wait, bytes
in flight and batches a second, each ``every`` seconds, at the step of the
batches taken so far."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..recorder import Live
    from ..session import Session

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


def writer_class() -> Any:
    """TensorBoard's own ``tensorboard.summary.Writer``, or an ImportError naming the extra."""
    try:
        from tensorboard.summary import Writer
    except ImportError as exc:
        why = f"TensorBoard scalars need tensorboard: pip install 'queuetune[tensorboard]' ({exc})"
        raise ImportError(why) from None
    return Writer


class ScalarWriter:
    """Writes :data:`SCALARS` of one or more loaders to ``logdir``.

    >>> import tempfile
    >>> from queuetune.recorder import Live
    >>> writer = ScalarWriter(tempfile.mkdtemp())  # doctest: +SKIP
    >>> writer.write("dataloader 1", Live(20.0, 0.1, 2, 2048, None, batches=40))  # doctest: +SKIP
    >>> writer.close()  # doctest: +SKIP
    """

    def __init__(self, logdir: str | os.PathLike[str]) -> None:
        try:
            from tensorboard.summary import Writer
        except ImportError as exc:
            raise ImportError(
                f"TensorBoard scalars need tensorboard: pip install 'queuetune[tensorboard]' ({exc})"
            ) from None
        os.makedirs(logdir, exist_ok=True)
        self._writer: Any = Writer(os.fspath(logdir))
        self._lock = threading.Lock()
        self._closed = False

    def write(self, label: str, live: Live) -> None:
        """One point of each scalar of ``label``, at step ``live.batches``."""
        prefix = tag_prefix(label)
        with self._lock:
            if self._closed:
                return
            for name, value in SCALARS.items():
                self._writer.add_scalar(f"{prefix}/{name}", value(live), live.batches)

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._writer.close()


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
