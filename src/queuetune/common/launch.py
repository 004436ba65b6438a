"""What a launcher tells a process about the job it belongs to: torchrun (and
torch.distributed's other launchers) set ``RANK``, ``WORLD_SIZE`` and
``TORCHELASTIC_RUN_ID`` for each rank it starts."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Launch:
    """This process's ``rank`` of ``world_size``, and ``job``: a name every rank of
    the same launch shares (torchrun's run id, or its agent's pid and start
    time where the run id is the default ``none``).

    >>> Launch.from_environment({"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "abc"})
    Launch(rank=1, world_size=2, job='abc')
    >>> Launch.from_environment({}) is None
    True
    """

    rank: int
    world_size: int
    job: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Launch | None:
        """The launch described by ``environ`` (default ``os.environ``); None
        outside a launcher, or where its variables are not integers."""
        env = os.environ if environ is None else environ
        try:
            rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
        except (KeyError, ValueError):
            return None
        if world_size < 1 or not 0 <= rank < world_size:
            return None
        job = env.get("TORCHELASTIC_RUN_ID", "none")
        if job in ("", "none"):
            job = _agent(environ is None)
        return cls(rank, world_size, job)

    def folder_name(self) -> str:
        """The folder every rank of this launch writes into, by default.

        >>> Launch(0, 2, "a1b2").folder_name()
        'queuetune-run-a1b2'
        """
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in self.job)
        return f"queuetune-run-{safe}"


def _agent(here: bool) -> str:
    """The launcher's pid and start time: the parent of every rank on this machine."""
    if not here:
        return "none"
    try:
        parent = psutil.Process(os.getppid())
        started = time.strftime("%Y%m%d-%H%M%S", time.localtime(parent.create_time()))
    except (psutil.Error, OSError):
        return f"ppid{os.getppid()}"
    return f"{started}-{parent.pid}"
