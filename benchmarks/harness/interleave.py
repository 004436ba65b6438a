"""Rounds interleaved so that no setting always runs first; the tuned setting against the
default, paired by round; a workload tuned by ``queuetune.tune``, its trials logged."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queuetune.tune import TuneResult


def rotated(items: list[Any], round_: int) -> list[Any]:
    """``items`` starting one later each round, so that none always runs first.

    >>> rotated(["a", "b", "c"], 4)
    ['b', 'c', 'a']
    """
    shift = round_ % len(items)
    return items[shift:] + items[:shift]


def interleaved_comparison(
    settings: dict[str, dict[str, Any]],
    rounds: int,
    run: Callable[[dict[str, Any]], dict[str, Any]],
    log: Callable[[int], None],
) -> dict[str, Any]:
    """``settings["default"]`` and ``settings["tuned"]``, each run once a round,
    the first of each round alternating (A B, B A, A B ...) so that neither
    always starts after the other's run: ``run(settings)`` gives a run's row (``throughput``,
    ``peak_in_flight_batches``, ``peak_in_flight_bytes``, ``input_bound_fraction``
    and what else the benchmark keeps); ``log(round)`` after each round. Returns
    the rows, each setting's summary (median throughput, highest peaks, median
    input-bound fraction) and the tuned/default ratios, medians and paired."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    names = list(settings)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            runs[name].append(run(settings[name]))
        log(round_ + 1)
    summary: dict[str, Any] = {"rounds": rounds, "runs": runs}
    for name, rows in runs.items():
        fractions = [r["input_bound_fraction"] for r in rows if r["input_bound_fraction"] is not None]
        summary[name] = {
            "settings": dict(settings[name]),
            "throughput": statistics.median(r["throughput"] for r in rows),
            "throughputs": [r["throughput"] for r in rows],
            "peak_in_flight_batches": max(r["peak_in_flight_batches"] for r in rows),
            "peak_in_flight_bytes": max(r["peak_in_flight_bytes"] for r in rows),
            "input_bound_fraction": statistics.median(fractions) if fractions else None,
        }
    d, t = summary["default"], summary["tuned"]
    summary["throughput_ratio"] = t["throughput"] / d["throughput"] if d["throughput"] else None
    summary["peak_bytes_ratio"] = (
        t["peak_in_flight_bytes"] / d["peak_in_flight_bytes"] if d["peak_in_flight_bytes"] else None
    )
    add_paired(summary)
    return summary


def add_paired(comparison: dict[str, Any]) -> None:
    """Ratios of each round's tuned run to the default run of the same round,
    and their medians: the interleaved design's estimate, robust to drift over the
    rounds (the ratio of the medians is not)."""
    pairs = list(zip(comparison["runs"]["default"], comparison["runs"]["tuned"]))
    throughput = [t["throughput"] / d["throughput"] for d, t in pairs if d["throughput"]]
    peak = [t["peak_in_flight_bytes"] / d["peak_in_flight_bytes"] for d, t in pairs if d["peak_in_flight_bytes"]]
    comparison["paired_throughput_ratios"] = throughput
    comparison["paired_throughput_ratio"] = statistics.median(throughput) if throughput else None
    comparison["paired_peak_bytes_ratios"] = peak
    comparison["paired_peak_bytes_ratio"] = statistics.median(peak) if peak else None


def throughput_ratios(comparison: dict[str, Any]) -> str:
    """The tuned/default throughput ratios of a comparison, for a table."""
    c = comparison
    return (
        f"throughput {c['throughput_ratio']:.3f} (paired rounds: median {c['paired_throughput_ratio']:.3f}, "
        + ", ".join(f"{x:.2f}" for x in c["paired_throughput_ratios"])
        + ")"
    )


def throughput_target(name: str, comparison: dict[str, Any], least: float = 0.98) -> dict[str, Any]:
    """Issue 16's check of a tuner benchmark's final comparison: the tuned
    setting keeps ``least`` of the default's throughput by the median of the
    paired rounds (the ratio of medians is shown beside it). None (n/a) where
    the tuner kept the default: the comparison then runs one setting twice and
    measures only its own noise."""
    a, b = comparison["throughput_ratio"], comparison["paired_throughput_ratio"]
    rounds = comparison.get("paired_throughput_ratios") or []
    spread = f" (rounds {min(rounds):.3f} to {max(rounds):.3f})" if rounds else ""
    same = comparison["tuned"]["settings"] == comparison["default"]["settings"]
    return {
        "target": f"{name}: tuned throughput >= {least} x default (median of paired rounds)",
        "value": f"median of paired rounds {b:.3f}, ratio of medians {a:.3f}{spread}"
        + (" (the default kept: the same setting twice)" if same else ""),
        "met": None if same else b is not None and b >= least,
    }


@dataclass
class Tunable:
    """A workload the tuner runs: its name, what it is, ``make`` (the factory of a
    fresh loader and its step or model, the loader's settings as keywords), and its
    runs' steps and warm-up."""

    name: str
    description: str
    make: Callable[..., Any]
    steps: int
    warmup: int


def tune_logged(workload: Tunable, rounds: int, log: Callable[[str], None]) -> TuneResult:
    """``queuetune.tune.tune`` of ``workload`` in ``rounds`` rounds, each trial logged."""

    from queuetune.tune import tune

    def progress(done: int, total: int, label: str) -> None:
        log(f"  {workload.name}: tune trial {done}/{total} ({label})")

    return tune(workload.make, steps=workload.steps, warmup=workload.warmup, rounds=rounds, progress=progress)
