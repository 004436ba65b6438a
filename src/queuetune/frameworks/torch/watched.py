"""The parts of a watched ``DataLoader`` that run where its batches are built: its
dataset (each fetch noted), its collate function (each batch recorded with the
fetch's start and busy time) and its sampler (each pass's indices)."""

from __future__ import annotations

import operator
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ..base import require

require("torch", "torch")

from torch.utils.data import Dataset, IterableDataset  # noqa: E402

from ...record.fingerprint import KeyBudget, SampleKey  # noqa: E402
from ...record.nbytes import nbytes  # noqa: E402
from ...record.recorder import Channel, built_here, busy_time, clock  # noqa: E402

# Per thread (a worker process's fetch loop, or the main thread with
# num_workers=0): the batch whose items were fetched and not yet collated, by
# loader token. The fetcher always calls the dataset and then collate_fn in the
# same thread, so the collate wrapper finds what the dataset wrapper noted.
_LOCAL = threading.local()


#: What a fetch notes for :class:`WatchedCollate`: when it began (the clock, and the
#: thread's :func:`~queuetune.record.recorder.busy_time`), its indices, whether they are a
#: batch's, and its samples' keys.
_Note = tuple[float, float, Any, bool, "list[int] | None"]


def _pending() -> dict[str, _Note]:
    try:
        pending: dict[str, _Note] = _LOCAL.pending
    except AttributeError:
        _LOCAL.pending = pending = {}
    return pending


def batch_key(indices: Any, batched: bool = True) -> tuple[Any, list[int] | None]:
    """The matching key and the sample indices of one batch.

    ``indices`` is the list a batch sampler yields (``batched=True``) or the
    single index of an unbatched loader. Integer indices give a tuple key and
    the list of samples; other indices (a dict dataset's string keys) give a key
    that is the same in every process and no samples.

    >>> batch_key([3, 1, 2])
    ((3, 1, 2), [3, 1, 2])
    >>> batch_key(7, batched=False)
    (7, [7])
    """
    try:
        if batched:
            samples = [operator.index(i) for i in indices]
            return tuple(samples), samples
        index = operator.index(indices)
        return index, [index]
    except TypeError:
        return zlib.crc32(repr(indices).encode()), None


class _Watched:
    """Forwards attribute reads and writes to the wrapped dataset, so that user
    code (``worker_init_fn`` setting ``get_worker_info().dataset.start``, say)
    still reaches it."""

    _OWN = frozenset({"_inner", "_channel", "_token", "_keyer"})

    def __init__(self, inner: Any, channel: Channel, token: str, keyer: SampleKey | None = None) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_token", token)
        object.__setattr__(self, "_keyer", keyer)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _Watched._OWN:
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _Watched._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._inner!r})"


class WatchedMapDataset(_Watched, Dataset[Any]):
    """A map-style dataset that notes when the loader starts fetching a batch and
    which indices it holds; :class:`WatchedCollate` records the batch."""

    def __getitem__(self, index: Any) -> Any:
        start, busy = clock(), busy_time()
        item = self._inner[index]
        _pending()[self._token] = (start, busy, index, False, None)
        return item

    def __getitems__(self, indices: list[Any]) -> list[Any]:
        start, busy = clock(), busy_time()
        getitems = getattr(self._inner, "__getitems__", None)
        items = getitems(indices) if getitems else [self._inner[i] for i in indices]
        _pending()[self._token] = (start, busy, indices, True, None)
        return items


class WatchedIterableDataset(_Watched, IterableDataset[Any]):
    """An iterable-style dataset that notes when the loader starts fetching each
    batch (its first item) and each item's key, where it has a keyer;
    :class:`WatchedCollate` records the batch.

    Fingerprints (a keyer without a user's key) stop for the rest of a pass in
    a worker where its :class:`~queuetune.record.fingerprint.KeyBudget` says their
    price (what they take on a reference machine, whatever this one's load)
    is too much of the consumer's step (which the consumer notes in the
    :class:`~queuetune.record.fingerprint.SampleKey`, shared with the workers).
    """

    def __iter__(self) -> Iterator[Any]:
        token = self._token
        keyer = self._keyer
        _pending().pop(token, None)
        source = iter(self._inner)
        budget = KeyBudget(keyer) if keyer is not None else None
        price, keyed = 0.0, 0
        while True:
            # A batch's first item: its fetch begins (the busy time read once a batch).
            first = token not in _pending()
            start, busy = clock(), busy_time() if first else 0.0
            try:
                item = next(source)
            except StopIteration:
                return
            pending = _pending()
            if token not in pending and keyed and budget is not None:
                if not budget.batch_keyed(price, keyed):
                    keyer = budget = None
                price, keyed = 0.0, 0
            note = pending.setdefault(token, (start, busy, None, False, [] if keyer is not None else None))
            if keyer is not None and note[4] is not None:
                key, cost = keyer.priced(item)
                note[4].append(key)
                price += cost
                keyed += 1
            yield item


class _Sized:
    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[attr-defined]


class WatchedSizedMapDataset(_Sized, WatchedMapDataset):
    """A :class:`WatchedMapDataset` whose dataset has a length."""


class WatchedSizedIterableDataset(_Sized, WatchedIterableDataset):
    """A :class:`WatchedIterableDataset` whose dataset has a length."""


class WatchedCollate:
    """Calls the loader's ``collate_fn`` and records the finished batch where it was
    built: from the fetch's start to now, its bytes, and its key."""

    def __init__(self, inner: Callable[[Any], Any], channel: Channel, token: str) -> None:
        self._inner = inner
        self._channel = channel
        self._token = token

    def __call__(self, data: Any) -> Any:
        note = _pending().pop(self._token, None)
        batch = self._inner(data)
        end = clock()
        busy = None if note is None else busy_time() - note[1]
        start, _, indices, batched, keys = note if note is not None else (end, 0.0, None, False, None)
        key: Any = None
        index: int | None = None
        if indices is not None:
            key, _ = batch_key(indices, batched)
            if not batched and isinstance(key, int):
                index = key
        samples = tuple(keys) if keys else None
        self._channel.emit(built_here(start, end, nbytes(batch), index, key, samples, busy))
        return batch

    def __repr__(self) -> str:
        return f"WatchedCollate({self._inner!r})"


class RecordingSampler:
    """The loader's index sampler, unchanged, keeping the key and samples of each
    index list it yields, in order, for the pass that asked for them."""

    def __init__(self, inner: Any, batched: bool) -> None:
        self._inner = inner
        self._batched = batched
        self.latest: deque[tuple[Any, list[int] | None]] = deque()
        #: Index lists the passes begun now skip unrecorded: those a resumed
        #: ``StatefulDataLoader`` fast-forwards past (handed over before its restart).
        self.skip = 0

    def __iter__(self) -> Iterator[Any]:
        taken: deque[tuple[Any, list[int] | None]] = deque()
        self.latest = taken
        return _RecordingIterator(iter(self._inner), taken, self._batched, self.skip)

    def load_state_dict(self, state: Any) -> None:
        # Its own state puts a stateful sampler where it was: nothing to fast-forward past.
        self.skip = 0
        self._inner.load_state_dict(state)

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        # A stateful sampler's state_dict and load_state_dict pass through (torchdata reads them).
        if name.startswith("__") or name in ("_inner", "_batched", "latest", "skip"):
            raise AttributeError(name)
        return getattr(self._inner, name)


class _RecordingIterator:
    """One pass of a :class:`RecordingSampler`: each index list, recorded unless
    among the first ``skip``. A stateful iterator's ``state_dict`` and
    ``load_state_dict`` pass through (torchdata keeps a sampler's place there)."""

    def __init__(self, source: Iterator[Any], taken: deque[tuple[Any, list[int] | None]], batched: bool, skip: int):
        self._source, self._taken, self._batched, self._skip = source, taken, batched, skip

    def __iter__(self) -> _RecordingIterator:
        return self

    def __next__(self) -> Any:
        indices = next(self._source)
        if self._skip:
            self._skip -= 1
        else:
            self._taken.append(batch_key(indices, self._batched))
        return indices

    def load_state_dict(self, state: Any) -> None:
        self._skip = 0
        self._source.load_state_dict(state)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_source", "_taken", "_batched", "_skip"):
            raise AttributeError(name)
        return getattr(self._source, name)


def wrap_dataset(dataset: Any, channel: Channel, token: str, iterable: bool, keyer: SampleKey | None) -> _Watched:
    sized = hasattr(dataset, "__len__")
    if iterable:
        kind: type[_Watched] = WatchedSizedIterableDataset if sized else WatchedIterableDataset
    else:
        kind = WatchedSizedMapDataset if sized else WatchedMapDataset
    return kind(dataset, channel, token, keyer)
