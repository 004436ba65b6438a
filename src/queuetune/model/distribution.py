"""Distribution: durations in seconds, measured or synthetic, sampled with a numpy ``Generator``."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..common.units import nonnegative_int

__all__ = ["Distribution"]


def _duration(value: Any, what: str, unit: str = "seconds") -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number of {unit}, got {value!r}")
    number = float(value)
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise ValueError(f"{what} must be a finite number of {unit} of at least 0, got {number}")
    return number


class Distribution:
    """Durations in seconds, sampled with a numpy ``Generator``.

    ``Distribution(values)`` resamples measured values (in shuffled passes,
    see :meth:`sample`); :meth:`replay` gives them back in their order. The
    class methods build synthetic ones for tests and benchmarks.

    >>> rng = np.random.default_rng(0)
    >>> d = Distribution([0.01, 0.02, 0.03])
    >>> d.mean, d.minimum, sorted(set(d.sample(rng, 50).tolist()))
    (0.02, 0.01, [0.01, 0.02, 0.03])
    >>> Distribution.constant(0.5).sample(rng, 3).tolist()
    [0.5, 0.5, 0.5]
    """

    kind: str
    params: dict[str, float]
    mean: float
    minimum: float
    _values: np.ndarray | None

    def __init__(self, values: Iterable[float]) -> None:
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise TypeError(f"durations must be an iterable of numbers, got {values!r}")
        items = [_duration(v, "a duration") for v in values]
        if not items:
            raise ValueError("durations are empty: a distribution needs at least one value")
        arr = np.asarray(items, dtype=float)
        self._set("empirical", {"n": float(len(arr))}, float(arr.mean()), float(arr.min()), arr)

    def _set(self, kind: str, params: dict[str, float], mean: float, minimum: float, values: np.ndarray | None) -> None:
        if not mean > 0:
            raise ValueError(f"a {kind} distribution of durations must have a positive mean, got {mean}")
        self.kind, self.params, self.mean, self.minimum, self._values = kind, params, mean, minimum, values

    @classmethod
    def _synthetic(cls, kind: str, params: dict[str, float], mean: float, minimum: float) -> Distribution:
        dist = cls.__new__(cls)
        dist._set(kind, params, mean, minimum, None)
        return dist

    @classmethod
    def replay(cls, values: Iterable[float]) -> Distribution:
        """The values in the order given, again and again: a model run on the very
        times a run measured (how much of a short run's throughput was the luck
        of where its long builds fell).

        >>> Distribution.replay([0.1, 0.3]).sample(np.random.default_rng(0), 5).tolist()
        [0.1, 0.3, 0.1, 0.3, 0.1]
        """
        dist = cls(values)
        dist.kind = "replay"
        return dist

    @classmethod
    def constant(cls, seconds: float) -> Distribution:
        """Always ``seconds``.

        >>> Distribution.constant(0.02).mean
        0.02
        """
        x = _duration(seconds, "seconds")
        return cls._synthetic("constant", {"seconds": x}, x, x)

    @classmethod
    def exponential(cls, mean: float) -> Distribution:
        """Exponentially distributed with the given mean (memoryless, as tf.data's model assumes).

        >>> Distribution.exponential(0.01).minimum
        0.0
        """
        m = _duration(mean, "mean")
        return cls._synthetic("exponential", {"mean": m}, m, 0.0)

    @classmethod
    def lognormal(cls, mean: float, sigma: float) -> Distribution:
        """Log-normal with the given mean and shape ``sigma`` (the standard
        deviation of the log); a larger ``sigma`` gives a heavier right tail.

        >>> draws = Distribution.lognormal(0.01, 1.0).sample(np.random.default_rng(0), 200_000)
        >>> round(float(draws.mean()), 3)
        0.01
        """
        m = _duration(mean, "mean")
        s = _duration(sigma, "sigma")
        return cls._synthetic("lognormal", {"mean": m, "sigma": s}, m, 0.0)

    @classmethod
    def stalls(cls, base: float, stall: float, probability: float) -> Distribution:
        """``base`` seconds, plus ``stall`` seconds with the given probability
        (a slow disk read, a cache miss, a garbage collection).

        >>> d = Distribution.stalls(0.01, 0.5, 0.05)
        >>> round(d.mean, 6), d.minimum
        (0.035, 0.01)
        """
        b = _duration(base, "base")
        s = _duration(stall, "stall")
        p = _duration(probability, "probability")
        if p > 1:
            raise ValueError(f"probability must be between 0 and 1, got {p}")
        return cls._synthetic("stalls", {"base": b, "stall": s, "probability": p}, b + p * s, b if p < 1 else b + s)

    @property
    def values(self) -> np.ndarray | None:
        """The measured values of an empirical distribution (a copy); ``None`` for a synthetic one."""
        return None if self._values is None else self._values.copy()

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` durations: independent draws, or for an empirical distribution
        shuffled passes over the measured values, each used as often as the
        others (so that a rare long value is drawn as often as it was measured).

        >>> Distribution.exponential(1.0).sample(np.random.default_rng(1), 4).shape
        (4,)
        >>> sorted(Distribution([1.0, 2.0, 3.0]).sample(np.random.default_rng(1), 6).tolist())
        [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
        """
        size = nonnegative_int(size, "size")
        p = self.params
        if self.kind == "replay":
            assert self._values is not None
            return np.resize(self._values, size)
        if self.kind == "empirical":
            assert self._values is not None
            passes = -(-size // len(self._values))
            return np.concatenate([rng.permutation(self._values) for _ in range(passes)])[:size]
        if self.kind == "constant":
            return np.full(size, p["seconds"])
        if self.kind == "exponential":
            return rng.exponential(p["mean"], size)
        if self.kind == "lognormal":
            mu = math.log(p["mean"]) - p["sigma"] ** 2 / 2
            return rng.lognormal(mu, p["sigma"], size)
        return p["base"] + p["stall"] * (rng.random(size) < p["probability"])

    def __repr__(self) -> str:
        if self.kind == "empirical":
            count = 0 if self._values is None else len(self._values)
            return f"Distribution(<{count} values, mean {self.mean:.6g} s>)"
        args = ", ".join(f"{k}={v:.6g}" for k, v in self.params.items())
        return f"Distribution.{self.kind}({args})"
