"""tf.data's closed-form formulas for a finite prefetch buffer, and a check of the simulation against them."""

from __future__ import annotations

import math

import numpy as np

from ..common.units import nonnegative_int, positive_int
from .distribution import Distribution, _duration
from .pipeline import PipelineModel
from .simulate import _simulate

__all__ = ["compare_with_closed_form", "tfdata_empty_probability", "tfdata_expected_wait"]


def tfdata_empty_probability(x: float, y: float, n: int) -> float:
    """tf.data's chance that the consumer finds its buffer empty:
    ``p = (1 - x/y) / (1 - (x/y)**(n + 1))``, ``1/(n + 1)`` when ``x == y``.

    ``x`` is the consumer's mean time per element, ``y`` the producer's, ``n``
    the buffer size. It applies to one producer and one consumer, independent
    and exponentially distributed (memoryless) times, a buffer that bounds the
    elements being built plus built and not yet taken to ``n`` (the ``depth``
    of :func:`~queuetune.model.simulate`, with ``workers=1``), in steady state.
    There, ``p`` is exactly the share of the consumer's requests that find no
    element ready (:attr:`~queuetune.model.Prediction.empty_fraction`); the
    expected wait per request is ``p * y`` (:func:`tfdata_expected_wait`),
    because the build in progress still has an exponential time left. It is
    not the input-wait fraction of time, and it does not hold for several
    workers, constant or heavy-tailed times.

    >>> tfdata_empty_probability(1.0, 1.0, 3)
    0.25
    >>> round(tfdata_empty_probability(0.5, 1.0, 1), 4)
    0.6667
    """
    x = _duration(x, "x (consumer time)")
    y = _duration(y, "y (producer time)")
    n = nonnegative_int(n, "n (buffer size)")
    if y == 0:
        raise ValueError("y (producer time) must be positive")
    if x == 0:
        return 1.0
    ratio = x / y
    if ratio == 1:
        return 1.0 / (n + 1)
    if ratio > 1:
        # The same value written in 1/ratio, which cannot overflow.
        s = 1.0 / ratio
        return s**n * (1 - s) / -math.expm1((n + 1) * math.log(s))
    return (1 - ratio) / -math.expm1((n + 1) * math.log(ratio))


def tfdata_expected_wait(x: float, y: float, n: int) -> float:
    """tf.data's expected consumer wait per element, ``p * y`` (see
    :func:`tfdata_empty_probability` for when it applies).

    >>> tfdata_expected_wait(1.0, 1.0, 3)
    0.25
    """
    return tfdata_empty_probability(x, y, n) * _duration(y, "y (producer time)")


def compare_with_closed_form(
    x: float, y: float, n: int, batches: int = 20_000, seed: int | None = 0, groups: int = 20
) -> dict[str, float]:
    """Simulate one producer and one consumer with exponential times (means
    ``y`` and ``x``) at depth ``n`` and set the result beside tf.data's formulas.

    ``*_stderr`` are batch-means standard errors of the simulated values: the
    counted requests are cut into ``groups`` consecutive groups, whose means are
    close to independent when each group is much longer than the queue's memory.

    >>> c = compare_with_closed_form(1.0, 1.0, 2, batches=4000)
    >>> abs(c["simulated_empty"] - c["closed_form_empty"]) < 4 * c["empty_stderr"]
    True
    """
    model = PipelineModel(Distribution.exponential(y), Distribution.exponential(x), 1, 0.0)
    depth = positive_int(n, "n (buffer size)")
    groups = positive_int(groups, "groups")
    prediction, run = _simulate(model, depth, 1, batches, seed)
    if groups < 2 or len(run.empty) < 2 * groups:
        raise ValueError(f"{len(run.empty)} counted requests cannot be cut into {groups} groups")
    empty = np.array_split(np.asarray(run.empty, dtype=float), groups)
    waits = np.array_split(np.asarray(run.waits, dtype=float), groups)

    def stderr(parts: list[np.ndarray]) -> float:
        return float(np.std([part.mean() for part in parts], ddof=1) / math.sqrt(groups))

    return {
        "closed_form_empty": tfdata_empty_probability(x, y, depth),
        "simulated_empty": prediction.empty_fraction,
        "empty_stderr": stderr(empty),
        "closed_form_wait": tfdata_expected_wait(x, y, depth),
        "simulated_wait": prediction.mean_wait_seconds,
        "wait_stderr": stderr(waits),
        "requests": float(len(run.empty)),
    }
