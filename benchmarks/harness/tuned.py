"""A Keras workload tuned by ``queuetune.tune``, then the default and the tuned settings
run in interleaved rounds, with the process's resident memory."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np

import queuetune
from harness.interleave import Tunable, interleaved_comparison, tune_logged
from queuetune.frameworks import KERAS
from queuetune.render.explain import explain
from queuetune.tune import TuneResult, run_trial

DEFAULT = {"workers": 4, "max_queue_size": 10}


KNEE = 0.98


def rss_rise(trace: Any) -> int | None:
    """Peak resident memory of the process during a run minus its first sample."""
    samples = trace.memory
    if not samples:
        return None
    return max(s.rss for s in samples) - samples[0].rss


def knee(curve: list[dict[str, Any]]) -> int | None:
    """The shallowest predicted depth within ``KNEE`` of the curve's best throughput:
    where the predicted throughput stops rising."""
    if not curve:
        return None
    best = max(p["throughput"] for p in curve)
    return min(p["depth"] for p in curve if p["throughput"] >= KNEE * best)


def compare(workload: Tunable, tuned: dict[str, Any], rounds: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Default and tuned settings, interleaved A B, B A, A B ..., with the process's resident memory."""

    def run(settings: dict[str, Any]) -> dict[str, Any]:
        trace, report, rate = run_trial(workload.make, settings, "keras", workload.steps, workload.warmup)
        return {
            "throughput": rate,
            "peak_in_flight_batches": report.peak_in_flight_batches,
            "peak_in_flight_bytes": report.peak_in_flight_bytes,
            "peak_rss_bytes": report.peak_rss_bytes,
            "rss_rise_bytes": rss_rise(trace),
            "input_bound_fraction": report.input_bound_fraction,
        }

    summary = interleaved_comparison(
        {"default": DEFAULT, "tuned": tuned},
        rounds,
        run,
        lambda done: log(f"  {workload.name}: comparison round {done}/{rounds}"),
    )
    for name in ("default", "tuned"):
        rows, row = summary["runs"][name], summary[name]
        rss = [r["peak_rss_bytes"] for r in rows if r["peak_rss_bytes"] is not None]
        rises = [r["rss_rise_bytes"] for r in rows if r["rss_rise_bytes"] is not None]
        row.update(
            depth=KERAS.depth(row["settings"]),
            median_peak_in_flight_bytes=statistics.median(r["peak_in_flight_bytes"] for r in rows),
            peak_rss_bytes=max(rss) if rss else None,
            rss_rise_bytes=max(rises) if rises else None,
        )
    d, t = summary["default"], summary["tuned"]
    summary["peak_rss_ratio"] = t["peak_rss_bytes"] / d["peak_rss_bytes"] if d["peak_rss_bytes"] else None
    return summary


def run_workload(
    workload: Tunable, tune_rounds: int, rounds: int, log: Callable[[str], None]
) -> tuple[dict[str, Any], TuneResult]:
    started = time.perf_counter()

    result = tune_logged(workload, tune_rounds, log)
    tuned_seconds = time.perf_counter() - started
    tuned = {**DEFAULT, **result.kwargs()}
    tuned = {k: tuned[k] for k in DEFAULT}
    comparison = compare(workload, tuned, rounds, log)
    curve = [
        {
            "depth": p.depth,
            "throughput": p.throughput,
            "input_wait_fraction": p.input_wait_fraction,
            "peak_built_batches": p.peak_built_batches,
            "peak_built_bytes": p.peak_built_bytes,
        }
        for p in sorted(result.predictions, key=lambda p: p.depth)
    ]
    chosen = result.chosen
    entry = {
        "workload": workload.name,
        "description": workload.description,
        "steps": workload.steps,
        "warmup": workload.warmup,
        "recommended": result.kwargs(),
        "recommended_depth": chosen.depth if chosen else None,
        "predicted_knee_depth": knee(curve),
        "predicted_curve": curve,
        "tune": {**result.to_dict(), "explanation": explain(result)},
        "tune_seconds": tuned_seconds,
        "comparison": comparison,
        "seconds": time.perf_counter() - started,
    }
    return entry, result


def versions() -> dict[str, str]:
    import PIL
    import torch

    return {
        "python": platform.python_version(),
        "keras": f"{keras.__version__} ({keras.backend.backend()} backend)",
        "torch": torch.__version__,
        "numpy": np.__version__,
        "pillow": PIL.__version__,
        "queuetune": queuetune.__version__,
    }
