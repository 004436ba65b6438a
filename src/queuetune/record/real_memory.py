"""The memory a process tree really costs, as the kernel counts it (Linux's /proc).

The RSS of forked workers counts every page they share once per process, so
the RSS summed over a tree of twelve workers reads four times what the machine
gives it. The proportional set size (PSS) divides each shared page among the
processes that map it, so PSS summed over the tree counts each page once; the
unique set size (USS) is what a process alone holds (its copy-on-write copies:
what a worker copies of a dataset it reads). Shared-memory files (``/dev/shm``)
are in the PSS of the processes that map them; those that the tree holds open
or names, mapped by none of it, are added apart. The sum is what the tree
costs the machine: what ``free`` or a cgroup's ``memory.current`` sees of it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

#: Where POSIX shared memory lives on Linux.
SHM = "/dev/shm"


@dataclass(frozen=True)
class ProcessMemory:
    """One process's resident, proportional and unique bytes, and the bytes of
    the shared-memory files it maps (``shm``: a file only it maps is in its
    USS, though it is not its own heap)."""

    pid: int
    rss: int
    pss: int
    uss: int
    shm: int = 0
    #: CPU seconds it has used so far (user and system, all its threads).
    cpu: float = 0.0


@dataclass(frozen=True)
class TreeMemory:
    """A process (``consumer``) and its descendants (``workers``), with the bytes
    of shared-memory files they hold that none of them maps (``shm``: not in
    any PSS) and of those they map (``shm_mapped``: in their PSS already).

    >>> t = TreeMemory(ProcessMemory(1, 10, 8, 6), [ProcessMemory(2, 10, 4, 2)], shm=5, shm_mapped=3)
    >>> t.total, t.workers_pss, t.workers_uss, t.shared
    (17, 4, 2, 8)
    """

    consumer: ProcessMemory
    workers: list[ProcessMemory] = field(default_factory=list)
    shm: int = 0
    shm_mapped: int = 0

    @property
    def shared(self) -> int:
        """Every shared-memory file of the tree, mapped or not."""
        return self.shm + self.shm_mapped

    @property
    def workers_pss(self) -> int:
        return sum(w.pss for w in self.workers)

    @property
    def workers_uss(self) -> int:
        return sum(w.uss for w in self.workers)

    @property
    def total(self) -> int:
        """PSS summed over the tree, plus the shared memory no process of it maps."""
        return self.consumer.pss + self.workers_pss + self.shm


#: A container of at least this many items, held by a dataset, is named as a likely
#: cause of copy-on-read (each item a Python object with its own reference count).
MANY_OBJECTS = 10_000


def containers_of(obj: Any, least: int = MANY_OBJECTS) -> dict[str, str]:
    """The attributes of ``obj`` (and of the dicts among them, one level down)
    that hold at least ``least`` Python objects, each in words: what a forked
    worker slowly copies as it reads them (their reference counts change).

    >>> class Data:
    ...     def __init__(self):
    ...         self.names = [str(i) for i in range(20_000)]
    ...         self.meta = {"ids": list(range(20_000)), "tag": "x"}
    >>> containers_of(Data())
    {'names': 'a list of 20,000 str', 'meta["ids"]': 'a list of 20,000 int'}
    """
    found: dict[str, str] = {}
    try:
        attributes = dict(vars(obj))
    except TypeError:
        return found
    for name, value in attributes.items():
        if _many(value, least):
            found[name] = _described(value)
        elif isinstance(value, dict) and len(value) < least:
            for key, inner in list(value.items())[:100]:
                if _many(inner, least):
                    found[f"{name}[{key!r}]".replace("'", '"')] = _described(inner)
    return found


def objects_bytes(obj: Any, least: int = MANY_OBJECTS) -> int:
    """About how many bytes the Python objects in ``obj``'s large containers
    (those :func:`containers_of` names) take: ``sys.getsizeof`` of a sample of
    up to 1,000 items of each, scaled to its length; what each forked worker
    ends up copying once it has read them all.

    >>> class Data:
    ...     def __init__(self):
    ...         self.names = ["x" * 10 for _ in range(20_000)]
    >>> 20_000 * 50 < objects_bytes(Data()) < 20_000 * 70
    True
    """
    total = 0
    try:
        attributes = list(vars(obj).values())
    except TypeError:
        return 0
    for value in attributes:
        inner = [value, *(value.values() if isinstance(value, dict) and len(value) < least else [])]
        for container in inner:
            if not _many(container, least):
                continue
            items = list(container.values() if isinstance(container, dict) else container)
            sample = items[:: max(1, len(items) // 1000)][:1000]
            total += int(sum(sys.getsizeof(x) for x in sample) / len(sample) * len(items))
    return total


def dataset_facts(dataset: Any, forked: bool) -> dict[str, Any]:
    """What :mod:`queuetune.analysis.memory` needs to know of a dataset read by worker
    processes, for a trace's ``meta.extra``: whether the workers are ``forked``
    (copy-on-read happens only then), the dataset's large ``containers`` of
    Python objects and about how many bytes those take (``objects_bytes``).

    >>> dataset_facts([1, 2], forked=True)
    {'forked': True, 'containers': {}, 'objects_bytes': 0}
    """
    return {"forked": forked, "containers": containers_of(dataset), "objects_bytes": objects_bytes(dataset)}


def _many(value: Any, least: int) -> bool:
    return isinstance(value, (list, tuple, dict, set)) and len(value) >= least


def _described(value: Any) -> str:
    first = next(iter(value.values() if isinstance(value, dict) else value), None)
    return f"a {type(value).__name__} of {len(value):,} {type(first).__name__}"


def supported() -> bool:
    """Whether this system gives PSS and USS (Linux's ``/proc/PID/smaps_rollup``).

    >>> isinstance(supported(), bool)
    True
    """
    return os.path.exists("/proc/self/smaps_rollup")


def read_process(process: psutil.Process) -> ProcessMemory:
    """RSS, PSS and USS of ``process`` (one read of its ``smaps_rollup``).
    A process that has ended and is not yet reaped (a zombie), or is ending,
    holds no pages and reads as holding nothing: it raises
    ``psutil.ZombieProcess``, as one psutil cannot read at all does.

    >>> m = read_process(psutil.Process())
    >>> m.rss >= m.pss >= m.uss > 0
    True
    """
    info = process.memory_full_info()
    if not info.rss:
        raise psutil.ZombieProcess(process.pid)
    times = process.cpu_times()
    pss = int(getattr(info, "pss", info.uss))
    return ProcessMemory(process.pid, int(info.rss), pss, int(info.uss), cpu=times.user + times.system)


def read_tree(
    root: psutil.Process | None = None, exclude: set[int] | None = None, shm: str | Path = SHM
) -> TreeMemory | None:
    """The memory of ``root`` (this process by default) and its descendants but
    ``exclude`` (pids), with the shared-memory files in ``shm`` that belong to
    them and that none of them maps: held open by one of them (deleted or not:
    torch hands tensors over as descriptors of unlinked files) or named with
    one's pid (queuetune's segments ``queuetune-<pid>-...``, torch's
    ``torch_<pid>_...``). Files of other processes are left out. A descendant
    that has ended (a zombie, read as holding nothing) or ends while it is read
    is left out; None when ``root`` cannot be read.

    >>> tree = read_tree()
    >>> tree is not None and tree.total >= tree.consumer.pss > 0
    True
    """
    root = root or psutil.Process()
    try:
        children = [c for c in root.children(recursive=True) if c.pid not in (exclude or set())]
        consumer = read_process(root)
    except psutil.Error:
        return None
    inside = str(shm).rstrip("/") + "/"
    mapped: dict[int, int] = {}
    held: dict[int, int] = {}
    pids = {root.pid}
    workers = []
    _shm_of(root.pid, inside, mapped, held)
    for child in children:
        try:
            memory = read_process(child)
        except (psutil.Error, OSError):
            continue
        own: dict[int, int] = {}
        _shm_of(child.pid, inside, own, held)
        mapped.update({inode: max(size, mapped.get(inode, 0)) for inode, size in own.items()})
        workers.append(dataclasses.replace(memory, shm=sum(own.values())))
        pids.add(child.pid)
    named = _named(inside, pids)
    unmapped = sum(size for inode, size in {**named, **held}.items() if inode not in mapped)
    return TreeMemory(consumer, workers, unmapped, sum(mapped.values()))


def _shm_of(pid: int, inside: str, mapped: dict[int, int], held: dict[int, int]) -> None:
    """Note the files in ``inside`` that ``pid`` maps (inode: the longest
    mapping of it, its size as far as a mapping tells) and the bytes of those
    it holds open."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                if inside in line:
                    span, _, _, _, inode = line.split(None, 5)[:5]
                    begin, end = (int(x, 16) for x in span.split("-"))
                    mapped[int(inode)] = max(mapped.get(int(inode), 0), end - begin)
        fds = f"/proc/{pid}/fd"
        names = os.listdir(fds)
    except OSError:
        return
    for fd in names:
        try:
            if os.readlink(f"{fds}/{fd}").startswith(inside):
                info = os.stat(f"{fds}/{fd}")
                held[info.st_ino] = info.st_blocks * 512
        except OSError:
            continue


def _named(inside: str, pids: set[int]) -> dict[int, int]:
    try:
        entries = list(os.scandir(inside))
    except OSError:
        return {}
    named: dict[int, int] = {}
    for entry in entries:
        tokens = re.split(r"[^0-9A-Za-z]+", entry.name)
        if not any(token.isdigit() and int(token) in pids for token in tokens):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        named[info.st_ino] = info.st_blocks * 512
    return named
