"""What every benchmark prints about the machine it ran on."""
from __future__ import annotations

import os
import platform
import statistics
from pathlib import Path
from typing import Any


def machine() -> str:
    """Architecture, cores and processor model."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores" + (f" ({model})" if model else "")


def add_paired(comparison: dict[str, Any]) -> None:
    """Ratios of each round's tuned run to the default run just before it, and
    their medians: the interleaved design's estimate, robust to drift over the
    rounds (the ratio of the medians is not)."""
    pairs = list(zip(comparison["runs"]["default"], comparison["runs"]["tuned"]))
    throughput = [t["throughput"] / d["throughput"] for d, t in pairs if d["throughput"]]
    peak = [t["peak_in_flight_bytes"] / d["peak_in_flight_bytes"] for d, t in pairs if d["peak_in_flight_bytes"]]
    comparison["paired_throughput_ratios"] = throughput
    comparison["paired_throughput_ratio"] = statistics.median(throughput) if throughput else None
    comparison["paired_peak_bytes_ratios"] = peak
    comparison["paired_peak_bytes_ratio"] = statistics.median(peak) if peak else None


def preamble(title: str, result: dict[str, Any]) -> list[str]:
    """A benchmark table's first lines: what ran, the versions, the machine and the date."""
    return [
        title,
        "versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()),
        f"machine: {result['machine']}; date: {result['date']}; took {result['seconds']:.0f} s",
        "",
    ]
