"""A pipeline under ``queuetune run`` for its advice, then its original and advised
settings run plainly in interleaved rounds."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.memory import check_no_children, reap
from harness.pipelines import Pipeline
from harness.results import mib

#: The script whose ``--child`` runs a pipeline.
SCRIPT = str(Path(__file__).resolve().parents[1] / "advice.py")


def child_command(name: str, settings: dict[str, Any], steps: int, folder: Path) -> list[str]:
    return [SCRIPT, "--child", name, "--settings", json.dumps(settings), "--steps", str(steps), "--data", str(folder)]


def advise(pipeline: Pipeline, steps: int, folder: Path, scratch: Path) -> dict[str, Any]:
    """Step 1: the pipeline with its original settings under ``queuetune run``;
    what its summary says of the loader."""
    out = scratch / f"run-{pipeline.name}"
    command = [sys.executable, "-m", "queuetune", "run", "--out", str(out), "--no-live", "--no-html", "--json"]
    began = time.perf_counter()
    done = subprocess.run(
        command + child_command(pipeline.name, pipeline.settings, steps, folder),
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{pipeline.name}: queuetune run ended with {done.returncode}:\n{done.stderr[-3000:]}")
    reap()
    summary = json.loads((out / "summary.json").read_text())
    loaders = summary["loaders"]
    if not loaders:
        raise RuntimeError(f"{pipeline.name}: queuetune run watched no loader")
    loader = loaders[0]
    rec, line, report = loader["recommendation"], loader["headline"], loader["report"]
    share, current = rec["share"], rec["current_share"]
    held, current_held = rec["held_bytes"], rec["current_held_bytes"]
    return {
        "seconds": seconds,
        "loaders": [entry["label"] for entry in loaders],
        "label": loader["label"],
        "headline": line["text"],
        "recommendation": rec["text"],
        "why": rec["why"],
        "kind": "speed" if rec["for_speed"] else "memory",
        "settings": line["settings"],  # what the headline tells to set (None: nothing)
        "predicted_ratio": share / current if current else None,
        "predicted_saving": current_held - held if current_held is not None else None,
        "share": share,
        "current_share": current,
        "held_bytes": held,
        "current_held_bytes": current_held,
        "worker_bytes": rec["worker_bytes"],
        "input_bound_fraction": report["input_bound_fraction"],
        "build_busy_share": report["build_busy_share"],
        "consumed_batches": report["consumed_batches"],
    }


def measure(pipeline: Pipeline, settings: dict[str, Any], steps: int, folder: Path) -> dict[str, Any]:
    """One plain run in a fresh process of this file; its row."""
    check_no_children(pipeline.name)
    done = subprocess.run(
        [sys.executable, *child_command(pipeline.name, settings, steps, folder), "--measure"],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{pipeline.name}: the run of {settings} ended with {done.returncode}")
    row = json.loads(done.stdout.splitlines()[-1])
    row["children_left"] += reap()
    return row


def compare(
    pipeline: Pipeline, applied: dict[str, Any], steps: int, folder: Path, rounds: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """Step 2: the original and the applied settings in interleaved rounds; the
    rows and the paired ratios and savings."""
    settings = {"original": dict(pipeline.settings), "recommended": applied}
    runs: dict[str, list[dict[str, Any]]] = {"original": [], "recommended": []}
    for round_ in range(rounds):
        order = ["original", "recommended"] if round_ % 2 == 0 else ["recommended", "original"]
        for which in order:
            row = measure(pipeline, settings[which], steps, folder)
            runs[which].append(row)
            log(
                f"  round {round_ + 1} {which}: {row['throughput']:.2f} batches/s, PSS peak {mib(row['pss_peak'])} "
                f"(unmapped /dev/shm {mib(row['unmapped_shm_peak'])}, {row['pss_samples']} samples), "
                f"{row['seconds']:.1f} s, children left {row['children_left']}"
            )
    pairs = list(zip(runs["original"], runs["recommended"]))
    ratios = [r["throughput"] / o["throughput"] for o, r in pairs]
    savings = [o["pss_peak"] - r["pss_peak"] for o, r in pairs]
    return {
        "runs": runs,
        "throughput_original": statistics.median(r["throughput"] for r in runs["original"]),
        "throughput_recommended": statistics.median(r["throughput"] for r in runs["recommended"]),
        "pss_peak_original": statistics.median(r["pss_peak"] for r in runs["original"]),
        "pss_peak_recommended": statistics.median(r["pss_peak"] for r in runs["recommended"]),
        "throughput_ratios": ratios,
        "throughput_ratio": statistics.median(ratios),
        "pss_savings": savings,
        "pss_saving": statistics.median(savings),
    }
