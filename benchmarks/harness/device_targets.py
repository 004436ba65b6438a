"""real_pipeline.py's figures for the device stage (issue 62): each row's hand-over per
batch and its share of the step, its step against the best peer's, and the targets of
the Prefetcher's device stage (``prefetcher-device``).

>>> rows = {"torch": {"images_per_s": 100.0, "step_median_s": 0.020, "x_best_reference": 1.0},
...         "prefetcher-device": {"images_per_s": 105.0, "step_median_s": 0.018, "x_best_reference": 1.05}}
>>> runs = {"torch": [{"takes": [0.002], "copies": [0.004], "handover_median_s": None}],
...         "prefetcher-device": [{"takes": [0.01], "copies": [0.0], "handover_median_s": 0.0001}]}
>>> add_handover(rows, runs)
>>> torch, staged = rows["torch"], rows["prefetcher-device"]
>>> round(torch["handover_s"], 4), torch["handover_split"], round(torch["step_x_best_reference"], 2)
(0.006, False, 1.0)
>>> round(staged["handover_share"], 4), round(staged["step_x_best_reference"], 2)
(0.0056, 0.9)
>>> [check["met"] for check in issue62_targets(rows)]
[True, True, True]
"""

from __future__ import annotations

import statistics
from typing import Any

from harness.loaders import REFERENCES

#: The Prefetcher's row with its device stage, which the targets are about.
STAGED = "prefetcher-device"
#: The rows that are DataLoader, each pinning its batches on CUDA (``pin_memory=True``).
PINNED = ("torch", "torch-persistent")
#: The most of its step the hand-over may take.
HANDOVER_SHARE = 0.01


def add_handover(summary: dict[str, dict[str, Any]], runs: dict[str, list[dict[str, Any]]]) -> None:
    """Each row of ``summary`` gains, as medians over its rounds: ``take_s``, the
    time to take a batch (a Prefetcher's own hand-over, the waits of batches built
    before they were asked for, where it has one, ``handover_split`` True; else the
    median time in ``next()`` over every epoch's batches but the first, which holds
    any wait for a build as well); ``copy_s``, the step's copy to the device (0 with
    the device stage); ``handover_s``, the two together, and ``handover_share``, that
    over the median step; and ``step_x_best_reference``, its median step over the
    shortest of the references' (below 1: shorter)."""
    for name, rows in runs.items():
        split = all(r.get("handover_median_s") is not None for r in rows)
        takes = [r["handover_median_s"] if split else _median(r["takes"]) for r in rows]
        take = statistics.median(takes)
        copy = statistics.median(_median(r["copies"]) for r in rows)
        s = summary[name]
        s.update(take_s=take, copy_s=copy, handover_s=take + copy, handover_split=split)
        s["handover_share"] = s["handover_s"] / s["step_median_s"] if s["step_median_s"] else None
    steps = [summary[name]["step_median_s"] for name in REFERENCES if name in summary]
    for s in summary.values():
        s["step_x_best_reference"] = s["step_median_s"] / min(steps) if steps else None


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def issue62_targets(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The device stage's targets (issue 62), each n/a where a row it needs did not
    run: its median step <= the DataLoader's with ``pin_memory=True`` (the shorter of
    :data:`PINNED`'s), its hand-over <= :data:`HANDOVER_SHARE` of its step, its
    images/s >= 1.0 x the best of the references."""
    ours = summary.get(STAGED)
    pinned = [summary[name]["step_median_s"] for name in PINNED if name in summary]
    step_met = None if ours is None or not pinned else ours["step_median_s"] <= min(pinned)
    steps = "n/a" if step_met is None else f"{ours['step_median_s'] * 1e3:.1f} ms vs {min(pinned) * 1e3:.1f} ms"
    share = None if ours is None else ours.get("handover_share")
    ratio = None if ours is None else ours["x_best_reference"]
    return [
        {
            "target": f"{STAGED} median step <= DataLoader(pin_memory=True)'s (the shorter of {', '.join(PINNED)})",
            "value": steps,
            "met": step_met,
        },
        {
            "target": f"{STAGED} hand-over <= {HANDOVER_SHARE:.0%} of its step",
            "value": "n/a" if share is None else f"{share:.2%}",
            "met": None if share is None else share <= HANDOVER_SHARE,
        },
        {
            "target": f"{STAGED} images/s >= 1.0 x the best of {', '.join(REFERENCES)}",
            "value": "n/a" if ratio is None else ratio,
            "met": None if ratio is None else ratio >= 1.0,
        },
    ]
