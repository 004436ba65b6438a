"""How a built batch's record reaches the recorder: appended directly in the
recorder's process, written to a pipe in a worker process (:class:`Channel`)."""

from __future__ import annotations

import contextlib
import math
import os
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple


class Built(NamedTuple):
    """A batch built: when (on the machine's monotonic clock), its bytes, its
    index and matching key (see :func:`key_of`), where (process, native thread),
    and ``busy``: the seconds its thread was busy on it (see :func:`busy_time`;
    None where not measured)."""

    start: float
    end: float
    nbytes: int
    batch_index: int | None
    key: int | None
    pid: int
    thread: int
    samples: tuple[int, ...] | None = None
    busy: float | None = None


class Live(NamedTuple):
    """What a loader is doing lately, cheap enough to read twice a second while
    it runs: batches a second the consumer took and the share of the time it
    waited over the last ``window`` seconds, batches built and not yet taken
    (and their bytes), the process's resident memory (None until sampled),
    and the batches taken so far.

    >>> Live(10.0, 0.5, 2, 64, None).in_flight
    2
    """

    rate: float
    waiting: float
    in_flight: int
    in_flight_bytes: int
    rss: int | None
    batches: int = 0


def built_here(
    start: float,
    end: float,
    nbytes: int,
    index: int | None = None,
    key: Any = None,
    samples: tuple[int, ...] | None = None,
    busy: float | None = None,
) -> Built:
    """The record of a batch built in this thread, keyed by ``key``, with the
    64-bit keys of its ``samples`` when they are known and the thread's busy
    seconds on it (:func:`busy_time` at its end less at its start).

    >>> record = built_here(0.0, 1.0, 8, index=3, key=3, samples=(5, 6), busy=0.25)
    >>> record.nbytes, record.batch_index, record.key, record.samples, record.busy, record.pid == os.getpid()
    (8, 3, 3, (5, 6), 0.25, True)
    """
    return Built(start, end, nbytes, index, key_of(key), os.getpid(), threading.get_native_id(), samples, busy)


# A Built on the pipe, and its flags (1: index set, 2: key set), then its busy
# seconds (NaN: not measured). A batch's sample keys go before it, four to a
# record of the same size (flag 4, in the same place), which the reader holds
# for the next Built of the same process and thread.
_RECORD = struct.Struct("<ddqqqqqqd")
_KEYS = struct.Struct("<qqqqqqqqq")
_HAS_INDEX, _HAS_KEY, _SAMPLE_KEYS = 1, 2, 4
_KEYS_PER_RECORD = 4
# Whole records, at most PIPE_BUF bytes, so that each write stays in one piece.
_RECORDS_PER_WRITE = 4096 // _RECORD.size
# pids of control records: a real record always carries a worker's pid (> 0)
_STOP, _FLUSH = 0, -1
_INT64 = (-(2**63), 2**63 - 1)


class Channel:
    """Carries produced-batch records from wherever batches are built to the recorder.

    In the process that created it, a record is appended directly. In a worker
    process (forked, or spawned: the pipe's write end follows the pickled
    dataset), each record is one fixed-size ``os.write`` to a pipe, which the
    kernel keeps whole (it is smaller than PIPE_BUF), so workers need no lock
    and a worker that dies cannot block the others. A reader thread in the
    creating process drains the pipe.
    """

    def __init__(self, sink: Callable[[Built], None], processes: bool) -> None:
        self._pid = os.getpid()
        self._sink: Callable[[Built], None] | None = sink
        self._r: int | None = None
        self._w: int | None = None
        self._reader: threading.Thread | None = None
        self._flushed = threading.Condition()
        self._flush_seq = self._flushed_seq = 0
        if processes:
            self._r, self._w = os.pipe()
            self._start_reader()

    def _start_reader(self) -> None:
        if self._r is None or self._sink is None or self._reader is not None:
            return
        self._reader = threading.Thread(
            target=self._read, args=(self._r, self._sink), name="queuetune-channel", daemon=True
        )
        self._reader.start()

    def _stop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is None or self._w is None:
            return
        try:
            os.write(self._w, _RECORD.pack(0.0, 0.0, 0, 0, 0, _STOP, 0, 0, 0.0))
        except OSError:
            return
        reader.join(timeout=5)

    @contextlib.contextmanager
    def reader_paused(self) -> Iterator[None]:
        """No reader thread while the block runs: a process forked in it copies no
        thread of this channel's, nor a lock one holds. Records written meanwhile
        wait in the pipe for the next reader. Use it only where no other thread
        flushes or closes the channel.
        """
        if os.getpid() != self._pid:
            yield
            return
        self._stop_reader()
        try:
            yield
        finally:
            self._start_reader()

    def emit(self, record: Built) -> None:
        if os.getpid() == self._pid:
            if self._sink is not None:
                self._sink(record)
        elif self._w is not None:
            records = [*_pack_samples(record), _pack(record)]
            for i in range(0, len(records), _RECORDS_PER_WRITE):
                os.write(self._w, b"".join(records[i : i + _RECORDS_PER_WRITE]))

    def _read(self, fd: int, sink: Callable[[Built], None]) -> None:
        pending = b""
        keys: dict[tuple[int, int], list[int]] = {}
        while True:
            try:
                chunk = os.read(fd, _RECORD.size * 1024)
            except OSError:
                return
            if not chunk:
                return
            pending += chunk
            whole = len(pending) - len(pending) % _RECORD.size
            for offset in range(0, whole, _RECORD.size):
                if _KEYS.unpack_from(pending, offset)[7] & _SAMPLE_KEYS:
                    *values, count, pid, tid, _, _ = _KEYS.unpack_from(pending, offset)
                    keys.setdefault((pid, tid), []).extend(values[:count])
                    continue
                fields = _RECORD.unpack_from(pending, offset)
                if fields[5] == _STOP:
                    return
                if fields[5] == _FLUSH:
                    with self._flushed:
                        self._flushed_seq = fields[3]
                        self._flushed.notify_all()
                    continue
                record = _unpack(fields)
                held = keys.pop((record.pid, record.thread), None)
                sink(record if held is None else record._replace(samples=tuple(held)))
            pending = pending[whole:]

    def flush(self, timeout: float = 2.0) -> None:
        """Return once every record written to the pipe before this call is stored.

        A marker goes down the pipe behind them; the reader stores records in
        pipe order, so when it reaches the marker the earlier records are in.
        """
        if self._reader is None or self._w is None or os.getpid() != self._pid:
            return
        with self._flushed:
            self._flush_seq += 1
            seq = self._flush_seq
        try:
            os.write(self._w, _RECORD.pack(0.0, 0.0, 0, seq, 0, _FLUSH, 0, 0, 0.0))
        except OSError:
            return
        with self._flushed:
            self._flushed.wait_for(lambda: self._flushed_seq >= seq, timeout=timeout)

    def close(self) -> None:
        """Stop the reader thread and close the pipe (idempotent)."""
        if os.getpid() != self._pid:
            return
        if self._w is not None:
            try:
                os.write(self._w, _RECORD.pack(0.0, 0.0, 0, 0, 0, _STOP, 0, 0, 0.0))
            except OSError:
                pass
        if self._reader is not None:
            self._reader.join(timeout=5)
            self._reader = None
        for fd in (self._r, self._w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._r = self._w = None

    def __reduce__(self) -> tuple[Callable[..., Channel], tuple[int] | tuple[int, Any]]:
        from multiprocessing import context, reduction

        if context.get_spawning_popen() is None or self._w is None:
            return (_detached_channel, (self._pid,))
        # Pickled for a process being started: the start method carries the pipe's
        # write end across (spawn keeps its number, the fork server passes it).
        return (_child_channel, (self._pid, reduction.DupFd(self._w)))


def _detached_channel(pid: int) -> Channel:
    channel = Channel.__new__(Channel)
    channel._pid, channel._sink, channel._r, channel._w, channel._reader = pid, None, None, None, None
    return channel


def _child_channel(pid: int, fd: Any) -> Channel:
    channel = _detached_channel(pid)
    channel._w = fd.detach()
    return channel


def _pack(record: Built) -> bytes:
    start, end, nbytes, index, key, pid, tid, _, busy = record
    flags = 0
    if index is not None:
        flags |= _HAS_INDEX
    if key is not None:
        flags |= _HAS_KEY
    return _RECORD.pack(start, end, nbytes, index or 0, key or 0, pid, tid, flags, math.nan if busy is None else busy)


def _pack_samples(record: Built) -> list[bytes]:
    samples = record.samples or ()
    records = []
    for i in range(0, len(samples), _KEYS_PER_RECORD):
        chunk = [_int64(k) for k in samples[i : i + _KEYS_PER_RECORD]]
        values = chunk + [0] * (_KEYS_PER_RECORD - len(chunk))
        records.append(_KEYS.pack(*values, len(chunk), record.pid, record.thread, _SAMPLE_KEYS, 0))
    return records


def _unpack(fields: tuple[float, float, int, int, int, int, int, int, float]) -> Built:
    start, end, nbytes, index, key, pid, tid, flags, busy = fields
    return Built(
        start,
        end,
        nbytes,
        index if flags & _HAS_INDEX else None,
        key if flags & _HAS_KEY else None,
        pid,
        tid,
        busy=None if math.isnan(busy) else busy,
    )


def _int64(value: int) -> int:
    return (value - _INT64[0]) % 2**64 + _INT64[0]


def key_of(value: Any) -> Any:
    """The matching key that survives the trip through a worker's pipe."""
    return None if value is None else _int64(hash(value))
