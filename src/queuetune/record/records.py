"""The records of a trace: batches produced and consumed, marks, memory
readings, and what the trace says of its loader."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypedDict

from ..common import units
from ..common.kinds import Settings

_shown = functools.partial(units._shown, limit=40)


@dataclass
class Produced:
    """A batch the loader finished building, counted where it was built.

    ``rows``: samples in it, when batches are matched to consumed ones by rows
    (``meta.match == "rows"``: Ray Data builds blocks, the trainer takes
    batches of another size). ``worker`` may name a node before a colon
    (``"node:pid"``), for the report's bytes per node. ``samples``: the keys
    of its samples where the batch carries no index (an iterable dataset's
    content fingerprints, or a user's key), for coverage. ``busy``: the seconds
    the building thread was on a CPU or waiting for one while it built it (less
    than ``end - start`` where the build waited, on I/O or a lock), where measured.
    """

    start: float
    end: float
    nbytes: int
    index: int | None = None
    key: Any = None
    worker: str = ""
    rows: int | None = None
    samples: list[int] | None = None
    busy: float | None = None


@dataclass
class Consumed:
    """A batch handed to the model: asked for at ``requested``, received at ``consumed``."""

    requested: float
    consumed: float
    run: int = 0
    epoch: int = 0
    nbytes: int | None = None
    key: Any = None
    samples: list[int] | None = None
    rows: int | None = None


#: What a :class:`Mark` marks.
MarkKind = Literal[
    "run_begin",
    "run_end",
    "epoch_begin",
    "epoch_end",
    "error",
    "pause_begin",
    "pause_end",
    "depth",
    "workers",
    "pool",
    "samples_capped",
    "cut_short",
    "resumed",
    "checkpoint",
    "sampler_epoch",
    "device_copy",
    "pinned_bytes",
    "device_bytes",
    "pin_copy",
    "step_copy",
]


@dataclass
class Mark:
    """A point in time on the consumer's side: ``run_begin``, ``run_end``,
    ``epoch_begin``, ``epoch_end``, ``error``, ``pause_begin``, ``pause_end``; and a
    Prefetcher's ``depth``, ``workers`` and ``pool`` (the bytes of its shared-memory
    segments) as they change; ``samples_capped`` where a run's sample keys reached
    the most it keeps; ``cut_short`` (its value the epoch) where an epoch ended
    before its loader was exhausted; ``resumed`` where a Prefetcher resumed an
    epoch another process had begun (its value ``{"epoch": e, "batches": k}``:
    this trace's epoch ``e``, ``k`` batches of it handed over before); and
    ``checkpoint`` where the loader's state was taken (what it hands over after
    is replayed where a run resumes from that state); ``sampler_epoch`` where an
    epoch began with a sampler that draws by epoch (``{"epoch": e, "sampler": s}``:
    this trace's epoch ``e`` drew the sampler's epoch ``s``, as ``set_epoch`` set it);
    and a Prefetcher's device stage: ``device_copy`` as a batch is handed over
    (``{"batch": n, "seconds": s}``: batch ``n`` of the epoch, ``s`` seconds from the
    start of its staging to its copy found ready), ``pinned_bytes`` (its pinned
    staging buffers) and ``device_bytes`` (its batches on the device ahead of the
    step) as they change; a watched torch loader's ``pin_copy`` as it pins a batch
    (``{"seconds": s}``) and ``step_copy`` after each step that copied its batch to a
    device (``{"batch": n, "seconds": s, "bytes": b, "pageable": p}``: the run's batch
    ``n``, the seconds the step waited in its copies, the bytes copied, those read
    from pageable memory)."""

    t: float
    kind: MarkKind
    value: Any = None


@dataclass
class MemorySample:
    """Resident memory of the process and the unique memory of its children
    (``children``, of ``n_children`` processes). Where the whole tree was read
    at that moment (version 2; see :mod:`queuetune.record.real_memory`), also the
    process's ``pss`` and ``uss``, each child's ``[pid, pss, uss, shm]``
    (``workers``; its ``shm``: the bytes of shared-memory files it maps), the
    bytes of the tree's shared-memory files that none of it maps (``shm``) and
    of all of them (``shared``); None in the samples between such readings, and
    in traces of version 1. With the tree, ``cpu`` and ``idle`` (see below;
    None where not read), from which :mod:`queuetune.tune.machine` tells what
    the run took of the machine's cores."""

    t: float
    rss: int
    children: int = 0
    n_children: int = 0
    pss: int | None = None
    uss: int | None = None
    shm: int | None = None
    shared: int | None = None
    workers: list[list[int]] | None = None
    #: CPU seconds the tree has used so far (this process, its children that ended
    #: and were reaped, and those alive), and idle seconds of the cores this process
    #: may run on, summed over them: both since boot, read with the tree (None between).
    cpu: float | None = None
    idle: float | None = None
    #: Of ``cpu``, the seconds queuetune's own sampling took so far (its reading of
    #: the tree, in this process): not the loader's, and gone where it runs plainly.
    probe: float | None = None

    @property
    def total(self) -> int | None:
        """What the tree costs the machine: PSS summed over it, plus the shared
        memory none of it maps (None where the tree was not read)."""
        if self.pss is None or self.workers is None:
            return None
        return self.pss + sum(w[1] for w in self.workers) + (self.shm or 0)


@dataclass
class TraceMeta:
    """What a trace says about the loader it recorded; every entry is optional.

    ``loader``: how it was watched (``generator``, ``iterable``, ``pydataset``,
    ``dataloader``, ``ray dataset``, ``prefetcher``...); ``framework``: a name of
    :mod:`queuetune.frameworks`; ``type``: the class of its dataset;
    ``settings``: the knobs that bound its queue; ``depth``: that bound, in
    batches. ``match_scope="run"``: a batch built before a run began is never
    handed over in it (the loader's workers start afresh each run);
    ``pre_run_consumes=k``: batches built between two runs belong to the next,
    and the framework takes the first ``k`` of them itself (Keras builds the
    model with one); ``match="rows"``: consumed batches are cut from produced
    ones by rows (Ray Data's blocks). ``rank``, ``world_size``, ``job``: the
    process's place in a distributed launch (torchrun), where it had one.
    ``extra``: entries this version does not know, kept as they were.

    >>> meta = TraceMeta.from_dict({"loader": "generator", "depth": 0, "from_the_future": 1})
    >>> meta.loader, meta.extra, meta.to_dict()
    ('generator', {'from_the_future': 1}, {'loader': 'generator', 'depth': 0, 'from_the_future': 1})
    """

    name: str | None = None
    loader: str | None = None
    framework: str | None = None
    type: str | None = None
    settings: dict[str, Any] | None = None
    depth: int | None = None
    num_batches: int | None = None
    num_samples: int | None = None
    match_scope: str | None = None
    match: str | None = None
    pre_run_consumes: int | None = None
    versions: dict[str, Any] | None = None
    nodes: dict[str, str] | None = None
    forgotten_runs: int | None = None
    rank: int | None = None
    world_size: int | None = None
    job: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceMeta:
        """Known entries into fields, the others into ``extra`` (no checks: see :meth:`Trace.from_dict`)."""
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            **{k: v for k, v in data.items() if k in known},
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_dict(self) -> dict[str, Any]:
        """The entries that are set, as plain data (``extra`` merged in)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**{k: v for k, v in data.items() if v is not None}, **self.extra}


#: How consumed batches are matched to produced ones, beside one by one: cut by
#: rows (Ray Data's blocks); and a batch built before a run began is never
#: handed over in it (a loader whose workers start afresh each run).
MatchBy = Literal["rows"]
MatchScope = Literal["run"]


class MetaFields(TypedDict, total=False):
    """Entries of a :class:`TraceMeta`, each optional: what a framework's adapter
    says of the loader it watches, for its caller to merge (:func:`with_fields`)."""

    name: str | None
    loader: str | None
    framework: str | None
    type: str | None
    settings: Settings | None
    depth: int | None
    num_batches: int | None
    num_samples: int | None
    match_scope: MatchScope | None
    match: MatchBy | None
    pre_run_consumes: int | None
    versions: dict[str, Any] | None
    nodes: dict[str, str] | None
    forgotten_runs: int | None
    rank: int | None
    world_size: int | None
    job: str | None
    extra: dict[str, Any]


def with_fields(meta: TraceMeta, added: MetaFields) -> TraceMeta:
    """A new meta: ``meta`` with ``added``'s entries, their ``extra`` merged into
    its own; ``meta`` itself is left as it was.

    >>> base = TraceMeta(name="a", extra={"x": 1})
    >>> new = with_fields(base, {"depth": 2, "extra": {"y": 2}})
    >>> new.name, new.depth, new.extra, base.depth, base.extra
    ('a', 2, {'x': 1, 'y': 2}, None, {'x': 1})
    """
    entries: dict[str, Any] = {k: v for k, v in added.items() if k != "extra"}
    return dataclasses.replace(meta, **entries, extra={**meta.extra, **added.get("extra", {})})
