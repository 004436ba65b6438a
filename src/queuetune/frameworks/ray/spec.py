"""What queuetune knows of Ray Data without importing it: ``map_batches`` tasks
building blocks into the object store, read by ``iter_batches``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from ...common import cores
from ...common.kinds import Settings
from ...common.units import format_bytes, nonnegative_int, parse_bytes, positive_int
from ..base import Framework, Lines, Setting, has_base

# Ray 2.60 constants, read from its source (paths under site-packages/ray/).
#: Share of a node's available memory its object store takes by default
#: (_private/ray_constants.py:110-113, DEFAULT_OBJECT_STORE_MEMORY_PROPORTION).
RAY_OBJECT_STORE_PROPORTION = Fraction(3, 10)
#: Cap on a node's default object store, 200 GB (_private/ray_constants.py:106-108).
RAY_OBJECT_STORE_CAP = 200 * 10**9
#: Share of the cluster's object store the streaming executor allows itself
#: (data/_internal/execution/resource_manager.py:108-110, 0.5 with operator
#: reservation, which is on by default: data/context.py:330-332).
RAY_DATA_BUDGET_FRACTION = Fraction(1, 2)
#: The iterators a tuning job may read a dataset with.
RAY_METHODS = ("iter_batches", "iter_torch_batches")


def is_ray_dataset(obj: Any) -> bool:
    """A Ray Data ``Dataset``.

    >>> is_ray_dataset([])
    False
    """
    return has_base(obj, "Dataset", "ray.data")


def ray_object_store_bytes(ram_bytes: int | str) -> int:
    """The object store Ray 2.60 gives a node by default, from the node's memory.

    30% of ``ram_bytes`` (Ray takes the memory *available* when the node
    starts, total minus used), capped at 200 GB. On Linux Ray also caps it at
    95% of the free space in ``/dev/shm`` (never below 10 GB), which is not
    known here; pass ``object_store_bytes`` to :func:`~queuetune.estimate.memory.footprint`
    when that cap applies.

    >>> ray_object_store_bytes("16GiB")
    5153960755
    >>> ray_object_store_bytes("2TB")
    200000000000
    """
    ram = _ray_bytes(ram_bytes, "ram_bytes")
    return min(int(ram * RAY_OBJECT_STORE_PROPORTION), RAY_OBJECT_STORE_CAP)


@dataclass(frozen=True)
class Ray(Framework):
    """Ray Data: ``concurrency`` tasks build blocks, the executor holds built blocks
    within its object-store budget (``object_store_memory``), and the trainer's
    iterator prefetches ``prefetch_batches``. A depth counts blocks being built or
    built and not yet taken: ``concurrency + held + prefetch_batches``.

    ``held`` is half the budget in blocks (:meth:`held`), the one rule of both the
    estimate and the tuner. A budget of ``None`` is Ray's default,
    ``store_budget`` (half the cluster's object store); ``concurrency`` ``None``
    is every CPU of the cluster (``cpus``). The tuner binds ``block_bytes``,
    ``store_budget`` and ``cpus`` to the cluster and the dataset it measured.

    >>> k = replace(RAY, block_bytes=100, cpus=2)
    >>> k.settings_for(6, 2)
    {'prefetch_batches': 1, 'object_store_memory': 600, 'concurrency': 2}
    >>> k.depth({'prefetch_batches': 1, 'object_store_memory': 600, 'concurrency': 2})
    6
    """

    block_bytes: int = 0
    store_budget: int = 0
    cpus: int = 1

    def recognises(self, loader: Any) -> bool:
        return is_ray_dataset(loader)

    def held(self, budget: int | None) -> int:
        """Blocks the executor holds ahead under ``budget`` bytes (None: Ray's default).

        The budget bounds what the executor holds; Ray 2.60's downstream-capacity
        backpressure (ratio 2.0, ``data/context.py:443``) stops a one-stage
        pipeline at about half of it (measured: 10, 21 and 42 blocks of 12 MiB
        held at budgets of 256 MiB, 512 MiB and 1 GiB). A budget above Ray's
        default (``store_budget``, when bound) is cut to it, as Ray's executor does.

        >>> replace(RAY, block_bytes=12, store_budget=0).held(512)
        21
        """
        budget = self.store_budget if budget is None else min(int(budget), self.store_budget or int(budget))
        return budget // (2 * self.block_bytes) if self.block_bytes > 0 else 0

    def depth(self, settings: Settings) -> int:
        prefetch = int(settings.get("prefetch_batches", 1))
        return self.workers(settings) + self.held(settings.get("object_store_memory")) + prefetch

    def settings_for(self, depth: int, workers: int | None) -> Settings | None:
        workers = self.cpus if workers is None else workers
        held = depth - workers - 1
        if held < 1 or self.block_bytes <= 0 or workers < 1:
            return None
        if self.store_budget and 2 * held * self.block_bytes > self.store_budget:
            return None  # Ray cuts a budget to its default
        return {"prefetch_batches": 1, "object_store_memory": 2 * held * self.block_bytes, "concurrency": workers}

    def workers(self, settings: Settings) -> int:
        return max(1, int(settings.get("concurrency") or self.cpus))

    def read_ahead(self, settings: dict[str, Any], batch_bytes: int) -> tuple[dict[str, Any], Lines, int]:
        """Facts from Ray 2.60's source (paths under ``site-packages/ray/``):

        - A node's default object store is 30% of its available memory, capped at
          200 GB and on Linux at 95% of ``/dev/shm`` (``_private/utils.py:595-650``).
        - The streaming executor's object-store budget is
          ``min(resource_limits.object_store_memory, 0.5 x cluster object store)``
          (``data/_internal/execution/resource_manager.py:108-115,280-310``).
        - Every live block an operator produced counts against the budget until
          its last reference goes, fetched ones included (``block_ref_counter.py``);
          a task is launched while the remaining budget covers one task's output
          (``resource_manager.py:865-871``).
        - ``map_batches`` without ``concurrency`` runs an uncapped task pool, each
          task taking 1 CPU (``operators/map_operator.py:943-948``).
        - ``iter_batches(prefetch_batches=N)`` fetches N batches of blocks ahead
          (``_internal/block_batching/iter_batches.py:31,78,212-220``).
        """
        prefetch = nonnegative_int(settings.get("prefetch_batches", 1), "prefetch_batches")
        concurrency = settings.get("concurrency")
        concurrency = cores.available() if concurrency is None else positive_int(concurrency, "concurrency")
        budget, store, ram = _object_store(settings)
        if budget < batch_bytes:
            raise ValueError(
                f"Ray Data's object store budget ({format_bytes(budget)}) is smaller than one batch "
                f"({format_bytes(batch_bytes)}): Ray then still builds blocks a task at a time to make progress, "
                "so the budget no longer bounds the read-ahead; give a budget of at least one batch"
            )
        resolved = {
            "prefetch_batches": prefetch,
            "concurrency": concurrency,
            "object_store_memory": budget,
            "object_store_bytes": store,
            "ram_bytes": ram,
        }
        bound = replace(self, block_bytes=batch_bytes, store_budget=0)
        held = bound.held(budget)
        lines = _read_ahead_lines(budget, batch_bytes, held, concurrency, prefetch)
        return resolved, lines, bound.depth(resolved)

    def check_job(self, model: Any, method: str) -> None:
        if model is not None:
            raise TypeError("a Ray dataset is read by a step function, not a Keras model")
        if method not in ("fit", *RAY_METHODS):
            raise ValueError(f"method must be 'iter_batches' or 'iter_torch_batches', got {method!r}")

    def factory_kwargs(self, settings: Settings) -> dict[str, Any]:
        # queuetune sets the budget and the prefetch itself; the factory may take concurrency
        return {k: v for k, v in settings.items() if k == "concurrency" and v is not None}


def _object_store(settings: dict[str, Any]) -> tuple[int, int | None, int | None]:
    """Ray Data's object-store budget from the one of its three settings given,
    with the cluster's object store and the node's memory where they gave it."""
    given = [
        name for name in ("object_store_memory", "object_store_bytes", "ram_bytes") if settings.get(name) is not None
    ]
    if len(given) > 1:
        raise ValueError(f"give one of object_store_memory, object_store_bytes, ram_bytes, not {' and '.join(given)}")
    if not given:
        raise ValueError(
            "ray needs the object store: object_store_memory (Ray Data's budget), "
            "object_store_bytes (the cluster's object store) or ram_bytes (one node's memory)"
        )
    if given[0] == "object_store_memory":
        return _ray_bytes(settings["object_store_memory"], "object_store_memory"), None, None
    ram = None
    if given[0] == "ram_bytes":
        ram = _ray_bytes(settings["ram_bytes"], "ram_bytes")
        store = ray_object_store_bytes(ram)
    else:
        store = _ray_bytes(settings["object_store_bytes"], "object_store_bytes")
    return int(store * RAY_DATA_BUDGET_FRACTION), store, ram


def _read_ahead_lines(budget: int, batch_bytes: int, held: int, concurrency: int, prefetch: int) -> Lines:
    """The blocks held in the object store, being built and prefetched, each with why."""
    return [
        (
            "held ahead",
            held,
            f"budget // (2 x batch) = {format_bytes(budget)} // (2 x {format_bytes(batch_bytes)}): blocks Ray "
            "holds in the object store (fetched ones included), stopped at half the budget by its "
            f"downstream-capacity backpressure; the budget bounds them at {budget // batch_bytes}",
        ),
        ("being built", concurrency, f"{concurrency} map_batches task(s) at once, each building a block"),
        ("prefetched", prefetch, f"prefetch_batches={prefetch}: batches iter_batches formats ahead in the driver"),
    ]


def _ray_bytes(value: Any, what: str) -> int:
    try:
        return parse_bytes(value)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"{what}: {exc}") from None


RAY = Ray(
    "ray",
    depth_knob="object_store_memory",
    workers_knob="concurrency",
    tuned_knobs=("prefetch_batches", "object_store_memory", "concurrency"),
    settings=(
        Setting("prefetch_batches", "count", "iter_batches prefetch_batches (default 1)"),
        Setting(
            "concurrency",
            "positive",
            "map_batches tasks at once (default: Ray's one per CPU, counted as this machine's CPUs)",
        ),
        Setting(
            "object_store_memory", "bytes", "Ray Data's object store budget, e.g. 2GiB (or give one of the next two)"
        ),
        Setting(
            "object_store_bytes", "bytes", "the cluster's object store, e.g. 8GiB; Ray Data's budget is half of it"
        ),
        Setting(
            "ram_bytes",
            "bytes",
            "one node's memory, e.g. 64GiB; its default object store is 30% of it (at most 200 GB)",
        ),
    ),
    extra="ray",
    job_methods=("fit", *RAY_METHODS),
    autowatch_module="ray.data",
    unmodelled="the model of Ray Data needs its cluster's settings; `queuetune tune` measures them",
)
