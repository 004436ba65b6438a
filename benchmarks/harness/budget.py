"""prefetcher.py's targets for a Prefetcher row: throughput against the best other loader,
bytes against the others and the physical minimum, the budget held through a pause."""

from __future__ import annotations

import statistics
from typing import Any

from harness.ideal import ceiling
from harness.synthetic import BUDGET_BATCHES, NUMPY_PASS_S, MiB, Workload, simulated_loads

# The prefetcher's throughput target, and the share of the best that makes a loader count as keeping it.
TARGET = 0.99


TOLERANCE = 0.98


def in_order_ceiling(w: Workload, step_ms: float, best: float) -> dict[str, Any]:
    """What an ideal in-order loader held to the prefetcher's budget (depth
    ``BUDGET_BATCHES``) reads at the best other loader's step of ``step_ms``:
    whether the throughput target can be reached in order at all."""
    reads = ceiling(simulated_loads(w, NUMPY_PASS_S), [step_ms / 1000] * w.steps, BUDGET_BATCHES, w.workers, w.warmup)
    return {"depth": BUDGET_BATCHES, "step_ms": round(step_ms, 3), "throughput": reads, "ratio": reads / best}


def check(w: Workload, pf: dict[str, Any], others: dict[str, Any], best_other: str) -> dict[str, Any]:
    """The issue's targets for one prefetcher row. Peaks are of batches started and
    not yet released (the issue's physical minimum counts batches being built)."""
    best = others[best_other]["throughput"]
    ratio = pf["throughput"] / best
    reaching = {
        k: v for k, v in others.items() if v["throughput"] >= TOLERANCE * best and v["peak_started_bytes"] is not None
    }
    smallest = min(reaching, key=lambda k: reaching[k]["peak_started_bytes"]) if reaching else None
    checks = {
        "throughput": {
            "met": ratio >= TARGET,
            "detail": f"{pf['throughput']:.1f}/s vs best other {best_other} {best:.1f}/s: "
            f"ratio {ratio:.3f} (target >= {TARGET})",
        },
    }
    allowed = w.max_bytes + w.batch_bytes
    best_peak = others[best_other]["peak_started_bytes"]
    if best_peak is not None and best_peak > allowed:
        # The best loader held more than the prefetcher may: its throughput, again, among
        # the loaders that kept within the prefetcher's budget.
        within = {
            k: v
            for k, v in others.items()
            if v["peak_started_bytes"] is not None and v["peak_started_bytes"] <= allowed
        }
        if within:
            name = max(within, key=lambda k: within[k]["throughput"])
            fair = pf["throughput"] / within[name]["throughput"]
            checks["throughput_within_budget"] = {
                "met": fair >= TARGET,
                "detail": f"{best_other} held {best_peak / MiB:.1f} MiB, more than max_bytes {w.max_bytes / MiB:.1f} "
                f"MiB + the batch in the step; the best loader within that: {name} "
                f"{within[name]['throughput']:.1f}/s, ratio {fair:.3f} (target >= {TARGET})",
            }
    if smallest is None:
        checks["bytes_vs_others"] = {
            "met": None,
            "detail": "no other loader with an observable peak reaches 0.98 x the best other's throughput",
        }
    else:
        other_peak = reaching[smallest]["peak_started_bytes"]
        checks["bytes_vs_others"] = {
            "met": pf["peak_started_bytes"] <= other_peak,
            "detail": f"{pf['peak_started_bytes'] / MiB:.1f} MiB vs {smallest} {other_peak / MiB:.1f} MiB "
            "(peak started and not released; smallest among the others at >= 0.98 x the best other's throughput)",
        }
    checks["bytes_vs_minimum"] = {
        "met": pf["peak_started_batches"] <= w.minimum + 1,
        "detail": f"{pf['peak_started_batches']} batches started and not released vs physical minimum "
        f"{w.minimum} ({w.why}) + 1",
    }
    if w.pause:
        deepest = max((max(m) for m in pf["depth_marks"] if m), default=0)
        checks["pause_within_budget"] = {
            "met": pf["peak_started_bytes"] <= w.max_bytes + w.batch_bytes
            and pf["peak_started_batches"] <= deepest + 1,
            "detail": f"peak {pf['peak_started_batches']} batches / {pf['peak_started_bytes'] / MiB:.1f} MiB started "
            f"and not released vs max_bytes {w.max_bytes / MiB:.1f} MiB + the batch in the step, and vs the deepest "
            f"depth reached {deepest} + the batch in the step",
        }
    return checks


def summarize(w: Workload, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    rows = {}
    for name, rs in runs.items():
        if not rs:
            continue

        def peak(key: str, rs: list[dict[str, Any]] = rs) -> int | None:
            values = [r[key] for r in rs if r[key] is not None]
            return max(values) if values else None

        rows[name] = {
            "throughput": statistics.median(r["throughput"] for r in rs),
            "throughputs": [round(r["throughput"], 2) for r in rs],
            "peak_started_batches": peak("peak_started_batches"),
            "peak_started_bytes": peak("peak_started_bytes"),
            "peak_in_flight_batches": peak("peak_in_flight_batches"),
            "peak_in_flight_bytes": peak("peak_in_flight_bytes"),
            "mean_in_flight_batches": peak("mean_in_flight_batches"),
            "peak_total_bytes": peak("peak_total_bytes"),
            "rss_rise_bytes": peak("rss_rise_bytes"),
            "input_bound_fraction": statistics.median(
                r["input_bound_fraction"] for r in rs if r["input_bound_fraction"] is not None
            )
            if any(r["input_bound_fraction"] is not None for r in rs)
            else None,
            "mean_step_ms": statistics.median(r["mean_step_ms"] for r in rs)
            if all(r.get("mean_step_ms") is not None for r in rs)
            else None,
        }
        if name.startswith("prefetcher"):
            rows[name]["depth_marks"] = [r.get("depth_marks", []) for r in rs]
    others = {k: v for k, v in rows.items() if not k.startswith("prefetcher")}
    best_other = max(others, key=lambda k: others[k]["throughput"])
    best = others[best_other]["throughput"]  # the reference: the best of the other loaders
    checks = {name: check(w, rows[name], others, best_other) for name in rows if name.startswith("prefetcher")}
    summary = {
        "workload": w.name,
        "description": w.describe(),
        "physical_minimum_batches": w.minimum,
        "physical_minimum": w.why,
        "note": w.note,
        "loaders": rows,
        "best_other": best_other,
        "ratio": rows["prefetcher"]["throughput"] / best,
        "checks": checks["prefetcher"],
        "extra_checks": {k: v for k, v in checks.items() if k != "prefetcher"},
    }
    if w.p and others[best_other]["mean_step_ms"]:
        summary["in_order_ceiling"] = in_order_ceiling(w, others[best_other]["mean_step_ms"], best)
    return summary
