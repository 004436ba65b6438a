"""The epoch benchmarks' rounds: each loader run in turn, its progress lines, the rows
summed up per loader, and the Prefetcher's defaults checked against the references."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any

from harness.interleave import rotated
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


def run_rounds(
    names: list[str], rounds: int, run: Callable[[str], dict[str, Any]], said: Callable[[dict[str, Any]], str]
) -> dict[str, list[dict[str, Any]]]:
    """Each loader of ``names`` run once a round by ``run(name)``, each round
    starting one later (:func:`rotated`); each row's progress line, ``said(row)``,
    on stderr. The rows by loader."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in rotated(names, round_):
            row = run(name)
            runs[name].append(row)
            print(f"round {round_ + 1} {name}: {said(row)}", file=sys.stderr, flush=True)
    return runs


def first_batches_text(row: dict[str, Any]) -> str:
    """A run's waits for each epoch's first batch, in ms, for its progress line."""
    return ", ".join(f"{w * 1e3:.0f}" for w in row["first_batch_waits"])


def memory_text(row: dict[str, Any]) -> str:
    """A run's PSS figures and its samples, for its progress line."""
    return (
        f"PSS peak {mib(row['pss_peak'])} (unmapped /dev/shm {mib(row['unmapped_shm_peak'])}), "
        f"median {mib(row['pss_median'])} "
        f"({row['pss_samples']} samples, {row['sample_cost_median'] or 0:.3f} s each)"
    )
