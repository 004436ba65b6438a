"""advice.py's targets: the advice's prediction against the plain runs' measurement, and
how far runs of the same settings read apart."""

from __future__ import annotations

import itertools
from typing import Any

from harness.results import mib

SPEED_TARGET, SAME_SPEED_TARGET, MEMORY_TARGET = 0.10, 0.03, 0.15


def comparisons(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """What a pipeline's advice predicted against what was measured: for speed, the
    throughput ratio; for memory, the PSS saved and the throughput ratio (the same
    speed); each with ``over``, measured/predicted (None where nothing was predicted),
    and its target. Empty where nothing was measured."""
    advice, measured = entry["advice"], entry.get("measured")
    if measured is None:
        return []

    def row(what: str, predicted: float | None, value: float, target: float) -> dict[str, Any]:
        over = value / predicted if predicted else None
        return {"what": what, "predicted": predicted, "measured": value, "over": over, "target": target}

    speed = ("speed", advice["predicted_ratio"], measured["throughput_ratio"], SPEED_TARGET)
    if advice["kind"] == "speed":
        return [row(*speed)]
    return [
        row("memory", advice["predicted_saving"], measured["pss_saving"], MEMORY_TARGET),
        row("same speed", *speed[1:3], SAME_SPEED_TARGET),
    ]


def same_settings(entry: dict[str, Any], row: dict[str, Any]) -> float | None:
    """How far two plain runs of the same (original) settings read apart, on the
    target's scale: the largest of consecutive rounds' ``|b/a - 1|`` for a
    throughput, of ``|b - a|`` over the predicted saving for memory (None with
    fewer than two rounds or nothing predicted). A target tighter than this is
    below what the machine can tell apart in one run.

    >>> runs = {"original": [{"throughput": 10.0, "pss_peak": 100}, {"throughput": 11.0, "pss_peak": 90}]}
    >>> entry = {"measured": {"runs": runs}}
    >>> round(same_settings(entry, {"what": "speed", "predicted": 2.0}), 3)
    0.1
    >>> same_settings(entry, {"what": "memory", "predicted": 50})
    0.2
    """
    rows = entry["measured"]["runs"]["original"]
    if len(rows) < 2 or not row["predicted"]:
        return None
    if row["what"] == "memory":
        peaks = [r["pss_peak"] for r in rows]
        return max(abs(b - a) for a, b in itertools.pairwise(peaks)) / abs(row["predicted"])
    rates = [r["throughput"] for r in rows]
    return max(abs(b / a - 1) for a, b in itertools.pairwise(rates))


def shown_value(what: str, value: float | None) -> str:
    """A ratio as ``1.234x``, a saving in MiB, "n/a" for None."""
    if value is None:
        return "n/a"
    return mib(value) if what == "memory" else f"{value:.3f}x"


def checks(name: str, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The pipeline's targets: measured within a share of predicted (n/a where
    nothing was applied, or nothing predicted)."""
    rows = comparisons(entry)
    if not rows:
        why = "no setting recommended" if entry["advice"]["settings"] is None else "not measured"
        return [{"target": f"{name}: the advice applied and measured", "value": why, "met": None}]
    words = {"speed": "throughput ratio", "memory": "PSS saving", "same speed": "throughput ratio (same speed)"}
    found = []
    for r in rows:
        noise = same_settings(entry, r)
        value = f"measured {shown_value(r['what'], r['measured'])} against predicted "
        value += shown_value(r["what"], r["predicted"])
        if noise is not None:
            value += f"; two rounds of the same settings read up to {noise:.1%} apart"
        found.append(
            {
                "target": f"{name}: measured {words[r['what']]} within {r['target']:.0%} of the predicted",
                "value": value,
                "met": None if r["over"] is None else abs(r["over"] - 1) <= r["target"],
                "same_settings": noise,
                "within_same_settings": None if r["over"] is None or noise is None else abs(r["over"] - 1) <= noise,
            }
        )
    return found


def spread(entry: dict[str, Any], row: dict[str, Any]) -> str:
    """The lowest and highest of the rounds' measured/predicted: how far one round
    reads from another on this machine, beside the target.

    >>> entry = {"measured": {"throughput_ratios": [0.9, 1.1, 1.0], "pss_savings": [1, 2]}}
    >>> spread(entry, {"what": "same speed", "predicted": 1.0})
    '0.900-1.100'
    """
    each = entry["measured"]["pss_savings" if row["what"] == "memory" else "throughput_ratios"]
    if not each or not row["predicted"]:
        return "n/a"
    over = [x / row["predicted"] for x in each]
    return f"{min(over):.3f}-{max(over):.3f}"


def apart(entry: dict[str, Any], row: dict[str, Any]) -> str:
    """:func:`same_settings` as a share, "n/a" where it cannot be read."""
    noise = same_settings(entry, row)
    return "n/a" if noise is None else f"±{noise:.1%}"


def targets(pipelines: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [check for name, entry in pipelines.items() for check in checks(name, entry)]
