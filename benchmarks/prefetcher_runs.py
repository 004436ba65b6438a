"""Every saved run of ``benchmarks/prefetcher.py``, a line each: where and when
it ran, and which of the Prefetcher's two targets it met on how many workloads.

Run: .venv/bin/python benchmarks/prefetcher_runs.py [--results benchmarks/results]

Reads the ``prefetcher*.json`` files that ``prefetcher.py --out`` wrote (a run
renamed after it was kept, such as ``prefetcher.run2.json``, included), oldest
first. Per run: the host, the date, the seconds it took, then on the workloads
that have a throughput target (the Prefetcher with its defaults, not the extra
rows): how many met ``>= 0.99 x the best other loader`` and how many held no
more bytes than the leanest loader within 0.98 x of the best, each miss named
with its ratio or its peak of batches. Runs of one workload alone (such as
``prefetcher.cpu-bound-9-rounds.json``) are listed too, with their one workload.
A run that recorded its worker count (``prefetcher.py --workers N``, such as
``prefetcher.workers-8.json``; its JSON's ``settings``) ends with it: ``; workers
8``; the runs made before the option (4 workers each, 2 on cpu-bound) end as before.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def met(workload: dict[str, Any], check: str) -> bool:
    return bool((workload["checks"].get(check) or {}).get("met"))


def line(path: Path, data: dict[str, Any]) -> str:
    rows = [w for w in data["workloads"] if w["checks"].get("throughput")]
    slow = [f"{w['workload']} {w['ratio']:.3f}" for w in rows if not met(w, "throughput")]
    heavy = [
        f"{w['workload']} {w['loaders']['prefetcher']['peak_started_batches']} b"
        for w in rows
        if not met(w, "bytes_vs_others")
    ]
    throughput = f"{len(rows) - len(slow)}/{len(rows)}" + (f" ({', '.join(slow)})" if slow else "")
    held = f"{len(rows) - len(heavy)}/{len(rows)}" + (f" ({', '.join(heavy)})" if heavy else "")
    workers = (data.get("settings") or {}).get("workers")
    return (
        f"{path.name:<42} {data['date'][:16]:<17} {data['machine']:<48} {data['seconds']:>4.0f} s  "
        f"throughput {throughput}; bytes {held}" + (f"; workers {workers}" if workers is not None else "")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    runs = []
    for path in sorted(args.results.glob("prefetcher*.json")):
        try:
            data = json.loads(path.read_text())
            runs.append((data["date"], line(path, data)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"{path}: not a run of prefetcher.py ({exc!r})", file=sys.stderr)
    if not runs:
        parser.error(f"no prefetcher*.json in {args.results}")
    for _, text in sorted(runs):
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
