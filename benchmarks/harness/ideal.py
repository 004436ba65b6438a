"""The throughput an ideal in-order loader reaches, simulated."""

from __future__ import annotations

import heapq


def ceiling(loads: list[float], steps: list[float], depth: int, workers: int, warmup: int) -> float:
    """Batches per second of an ideal in-order loader, simulated (``ideal_in_order.py``):
    ``workers`` workers take the batches in order; batch ``i`` starts once a worker is
    free and batch ``i - depth`` is taken (``depth`` + 1 started and not released, with
    the one in the step) and takes ``loads[i]`` seconds; the consumer takes it once it
    is built and the step on the batch before (``steps[i - 1]``) has ended. Counted
    from batch ``warmup`` on.

    >>> ceiling([0.01] * 200, [0.001] * 200, depth=4, workers=1, warmup=20)  # one 10 ms build at a time
    100.0
    >>> ceiling([0.001] * 200, [0.005] * 200, depth=4, workers=4, warmup=20)  # the consumer is slower
    200.0
    """
    free = [0.0] * workers
    taken: list[float] = []
    for i, load in enumerate(loads):
        start = max(heapq.heappop(free), taken[i - depth] if i >= depth else 0.0)
        built = start + load
        heapq.heappush(free, built)
        taken.append(max(built, taken[-1] + steps[i - 1]) if taken else built)
    return round((len(taken) - 1 - warmup) / (taken[-1] - taken[warmup]), 1)
