"""model_accuracy.py's rounds: every setting of every distribution run in turn, the queue
model fitted to each round's baseline run, and its predictions beside the measurements."""

from __future__ import annotations

import dataclasses
import datetime
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import queuetune
from harness.interleave import rotated
from harness.results import machine
from harness.sleepers import CONSUMER_HIGH, CONSUMER_LOW, WORKLOADS, Loader, Workload
from queuetune import frameworks
from queuetune.model import Distribution, fit, fit_unbuffered, kept_by_consumer, simulate, transit_time
from queuetune.record.matching import match
from queuetune.record.trace import Trace
from queuetune.tune import after_warmup, run_trial

BAND_DRAWS = 200  # simulated runs per setting for the band of one run's throughput


TARGET = 0.05


def steady_peak(trace: Trace, warmup: int) -> int:
    """Peak batches built and not yet released by the consumer, from the hand-over
    of batch ``warmup`` to the last hand-over: ``peak_in_flight_batches``
    without the start-up (Keras serves the model-building call's read-ahead
    first, which can briefly hold up to about twice the bound)."""
    consumed = trace.consumed
    if len(consumed) <= warmup + 1:
        return 0
    matching = match(trace)
    matches = matching.consumed
    deltas: dict[float, int] = {}
    for i, (c, j) in enumerate(zip(consumed, matches)):
        if j is None:
            continue
        nxt = consumed[i + 1] if i + 1 < len(consumed) else None
        release = nxt.requested if nxt is not None and nxt.run == c.run else trace.end
        end = trace.produced[j].end
        deltas[end] = deltas.get(end, 0) + 1
        deltas[release] = deltas.get(release, 0) - 1
    used = {j for j in matches if j is not None} | {k for _, k in matching.hidden}
    for k, p in enumerate(trace.produced):
        if k not in used:  # built and never handed over in a step: held to the end
            deltas[p.end] = deltas.get(p.end, 0) + 1
    begin, finish = consumed[warmup].consumed, consumed[-1].consumed
    count = peak = 0
    for t in sorted(deltas):
        count += deltas[t]
        if begin <= t <= finish:
            peak = max(peak, count)
    return peak


def versions(loaders: list[Loader]) -> dict[str, str]:
    import torch

    found = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "queuetune": queuetune.__version__,
    }
    if any(loader.framework == "keras" for loader in loaders):
        import keras

        found["keras"] = f"{keras.__version__} ({keras.backend.backend()} backend)"
    if any(loader.framework == "tfdata" for loader in loaders):
        import tensorflow as tf

        found["tensorflow"] = tf.__version__
    return found


def _entry(loader: Loader, workload: Workload, producer: np.ndarray) -> dict[str, Any]:
    """A loader and distribution: a row per setting, and room for each round's
    model and predictions."""
    rows = [
        {
            "settings": loader.as_settings(workers, knob),
            "workers": workers,
            "depth": loader.depth(workers, knob),
            "predicted": [],
            "replayed": [],
            "predicted_input_wait_fraction": [],
            "predicted_peak_built": [],
            "band": [],
            "measured": [],
            "measured_peak_in_flight": [],
            "measured_steady_peak_in_flight": [],
            "measured_input_bound_fraction": [],
        }
        for workers, knob in loader.settings
    ]
    return {
        "loader": loader.key,
        "distribution": workload.name,
        "description": workload.description,
        "drawn_producer_mean_ms": float(np.mean(producer)) * 1e3,
        "baseline": {"settings": loader.as_settings(*loader.baseline), "depth": loader.depth(*loader.baseline)},
        "models": [],
        "rows": rows,
    }


def _predict_round(
    entry: dict[str, Any], trace: Trace, warmup: int, unbuffered: Trace | None, items: np.ndarray, steps: int
) -> None:
    """The model of this round's baseline run (beside its run at the framework's
    model settings, for tf.data), and its prediction for every setting; and the
    same model replaying the items' own build times in their order (``items``,
    plus the loader's measured overhead per build), which every run measured."""
    trimmed = after_warmup(trace, warmup)
    if unbuffered is not None:
        unbuffered = after_warmup(unbuffered, warmup)
    rules = frameworks.rules_of(trace.meta)
    model = fit(trimmed, rules) if unbuffered is None else fit_unbuffered(unbuffered, trimmed, rules)
    entry["models"].append(
        {
            "workers": model.workers,
            "producer_mean_ms": model.producer.mean * 1e3,
            "producer_median_ms": float(np.median(model.producer.values)) * 1e3,
            "consumer_mean_ms": model.consumer.mean * 1e3,
            # tf.data: the part of each request its iterator keeps (in the step; no place held meanwhile)
            "handover_ms": (model.handover if unbuffered is None else kept_by_consumer(unbuffered, trimmed)) * 1e3,
            "transit_ms": transit_time(trimmed, rules) * 1e3,
            "dispatch_ms": model.dispatch * 1e3,
            "assignment": model.assignment,
            "release": model.release,
            "batch_bytes": model.batch_bytes,
        }
    )
    overhead = model.producer.mean - float(np.mean(items[warmup:]))
    replaying = dataclasses.replace(model, producer=Distribution.replay(np.maximum(items + overhead, 0.0)))
    # Runs as long as the measured one, with its warm-up: in the replay, batch i is
    # built by the worker that built it in the run.
    run = {"batches": steps, "warmup": warmup}
    for row in entry["rows"]:
        p = simulate(model, row["depth"], workers=row["workers"])
        row["predicted"].append(p.throughput)
        runs = [
            simulate(model, row["depth"], workers=row["workers"], seed=seed, **run).throughput
            for seed in range(1, BAND_DRAWS + 1)
        ]
        row["band"].append([float(np.percentile(runs, 5)), float(np.percentile(runs, 95))])
        row["replayed"].append(simulate(replaying, row["depth"], workers=row["workers"], **run).throughput)
        row["predicted_input_wait_fraction"].append(p.input_wait_fraction)
        row["predicted_peak_built"].append(p.peak_built_batches)


def _summarise(entry: dict[str, Any]) -> None:
    for row in entry["rows"]:
        measured = statistics.median(row["measured"])
        predicted = statistics.median(row["predicted"])
        row["measured_throughput"] = measured
        row["predicted_throughput"] = predicted
        row["predicted_peak_built_batches"] = max(row["predicted_peak_built"])
        row["error"] = predicted / measured - 1 if measured else None
        row["replayed_throughput"] = statistics.median(row["replayed"])
        row["replay_error"] = row["replayed_throughput"] / measured - 1 if measured else None
        row["round_errors"] = [p / m - 1 for p, m in zip(row["predicted"], row["measured"]) if m]
        row["measured_peak_in_flight_batches"] = max(row["measured_peak_in_flight"])
        row["measured_steady_peak_in_flight_batches"] = max(row["measured_steady_peak_in_flight"])
        row["measured_spread"] = (max(row["measured"]) - min(row["measured"])) / measured if measured else None
        row["band_low"] = statistics.median(low for low, _ in row["band"])
        row["band_high"] = statistics.median(high for _, high in row["band"])
        row["inside_band"] = row["band_low"] <= measured <= row["band_high"]
    entry["max_abs_error"] = max(abs(r["error"]) for r in entry["rows"] if r["error"] is not None)
    entry["within_target"] = entry["max_abs_error"] <= TARGET
    entry["max_abs_round_error"] = max(abs(e) for r in entry["rows"] for e in r["round_errors"])
    entry["max_abs_replay_error"] = max(abs(r["replay_error"]) for r in entry["rows"] if r["replay_error"] is not None)
    entry["inside_band"] = sum(r["inside_band"] for r in entry["rows"])
    entry["widest_band"] = max((r["band_high"] - r["band_low"]) / r["predicted_throughput"] for r in entry["rows"])
    models = entry["models"]
    entry["model"] = {  # the rounds' medians
        key: statistics.median(m[key] for m in models) if isinstance(value, float) else value
        for key, value in models[0].items()
    }
    base = next(r for r in entry["rows"] if r["settings"] == entry["baseline"]["settings"])
    entry["error_at_baseline"] = base["error"]


def run(
    loaders: list[Loader], steps: int, warmup: int, rounds: int, seed: int, log: Callable[[str], None]
) -> dict[str, Any]:
    started = time.perf_counter()
    consumer = np.random.default_rng(seed).uniform(CONSUMER_LOW, CONSUMER_HIGH, steps)
    producers = {w.name: w.draw(np.random.default_rng([seed, number]), steps) for number, w in enumerate(WORKLOADS)}
    factories = {
        (loader.key, w.name): loader.make_factory(producers[w.name] * loader.build_scale, consumer)
        for loader in loaders
        for w in WORKLOADS
    }
    for loader in loaders:  # a discarded run per loader: imports, first fork, first model build
        warm = factories[(loader.key, WORKLOADS[0].name)]
        run_trial(warm, loader.as_settings(*loader.baseline), loader.framework, min(steps, 100), min(warmup, 10))
    log(f"warm-up runs done ({time.perf_counter() - started:.0f} s)")
    entries = [_entry(loader, w, producers[w.name] * loader.build_scale) for loader in loaders for w in WORKLOADS]
    by_key = {loader.key: loader for loader in loaders}
    for round_ in range(rounds):
        for entry in entries:
            loader = by_key[entry["loader"]]
            factory = factories[(loader.key, entry["distribution"])]
            modelled = frameworks.get(loader.framework).model_settings(entry["baseline"]["settings"])
            kept: dict[str, Trace] = {}
            for row in rotated(entry["rows"], round_):
                trace, report, rate = run_trial(factory, row["settings"], loader.framework, steps, warmup)
                row["measured"].append(rate)
                row["measured_peak_in_flight"].append(report.peak_in_flight_batches)
                row["measured_steady_peak_in_flight"].append(steady_peak(trace, warmup))
                row["measured_input_bound_fraction"].append(report.input_bound_fraction)
                if row["settings"] == entry["baseline"]["settings"]:
                    kept["baseline"] = trace
                if row["settings"] == modelled:
                    kept["unbuffered"] = trace
            items = producers[entry["distribution"]] * loader.build_scale
            _predict_round(entry, kept["baseline"], warmup, kept.get("unbuffered"), items, steps)
        log(f"round {round_ + 1}/{rounds} done ({time.perf_counter() - started:.0f} s)")
    for entry in entries:
        _summarise(entry)
    return {
        "benchmark": "model_accuracy",
        "workload": (
            f"sleep-timed items of 64 KiB float32, step sleeps uniform "
            f"{CONSUMER_LOW * 1e3:.0f}-{CONSUMER_HIGH * 1e3:.0f} ms (seeded); {steps} steps per run, "
            f"throughput after {warmup}; {rounds} interleaved rounds; each round's model comes from that "
            f"round's traced run at the baseline setting"
        ),
        "loaders": {
            loader.key: {
                "description": loader.label,
                "assignment": loader.rule,
                "baseline": loader.as_settings(*loader.baseline),
            }
            for loader in loaders
        },
        "steps": steps,
        "warmup": warmup,
        "rounds": rounds,
        "seed": seed,
        "target_abs_error": TARGET,
        "versions": versions(loaders),
        "machine": machine(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - started,
        "results": entries,
    }
