"""The epoch benchmarks' rounds summed up per loader, and the Prefetcher's defaults checked against the references."""

from __future__ import annotations

import statistics
from typing import Any

from harness.loaders import REFERENCES
from harness.results import mib


def summarize_epochs(runs: dict[str, list[dict[str, Any]]], rate: str, digits: int) -> dict[str, dict[str, Any]]:
    """Each loader's rows over the rounds: the median of ``rate`` (each round's
    rounded to ``digits``), the median first-batch wait over all epochs and
    rounds, the highest PSS peak and the median of the rounds' PSS medians, the
    highest unmapped /dev/shm, the children left; and ``x_best_reference``, the
    median ``rate`` over the best median of the :data:`REFERENCES` that ran."""
    summary = {}
    for name, rows in runs.items():
        peaks = [r["pss_peak"] for r in rows if r["pss_peak"] is not None]
        medians = [r["pss_median"] for r in rows if r["pss_median"] is not None]
        summary[name] = {
            rate: statistics.median(r[rate] for r in rows),
            "rounds": [round(r[rate], digits) for r in rows],
            "first_batch_wait_median": statistics.median(w for r in rows for w in r["first_batch_waits"]),
            "pss_peak": max(peaks) if peaks else None,
            "pss_median": statistics.median(medians) if medians else None,
            "unmapped_shm_peak": max((r["unmapped_shm_peak"] or 0) for r in rows),
            "children_left": sum(r["children_left"] for r in rows),
        }
    references = [summary[name][rate] for name in REFERENCES if name in summary]
    best = max(references) if references else None
    for s in summary.values():
        s["x_best_reference"] = s[rate] / best if best else None
    return summary


def issue39_targets(summary: dict[str, dict[str, Any]], unit: str) -> list[dict[str, Any]]:
    """The checks of the Prefetcher's defaults (``summary["prefetcher"]``, from
    :func:`summarize_epochs`): its throughput (in ``unit``) against the best
    reference's (issue 39), and its PSS peak against the DataLoader's, with and
    without persistent workers (issues 39 and 58: the tree holds no more than
    DataLoader's); n/a where either did not run."""
    ours = summary.get("prefetcher")
    ratio = ours["x_best_reference"] if ours else None
    checks = [
        {
            "target": f"prefetcher (defaults) {unit} >= 1.0 x the best of {', '.join(REFERENCES)}",
            "value": ratio if ratio is not None else "n/a",
            "met": None if ratio is None else ratio >= 1.0,
        }
    ]
    for name, said in (("torch", "persistent_workers=False"), ("torch-persistent", "persistent_workers=True")):
        theirs = summary.get(name)
        both = bool(ours and theirs and ours["pss_peak"] is not None and theirs["pss_peak"] is not None)
        checks.append(
            {
                "target": f"prefetcher (defaults) PSS peak <= {name}'s (DataLoader, {said})",
                "value": f"{mib(ours['pss_peak'])} vs {mib(theirs['pss_peak'])}" if both else "n/a",
                "met": ours["pss_peak"] <= theirs["pss_peak"] if both else None,
            }
        )
    return checks
