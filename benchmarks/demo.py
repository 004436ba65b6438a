"""The article's experiment, as ``queuetune demo`` runs it, kept with its
versions, machine and date: the figures the README quotes.

Run: KERAS_BACKEND=torch .venv/bin/python benchmarks/demo.py [--json] [--out benchmarks/results]

One run of :func:`queuetune.demo.run_demo` (Keras 3 with the torch backend,
``Dense(60->10)``, 5 ms a step, batch 128, ``predict(steps=10)``): a
``PyDataset`` at ``workers=4`` with ``max_queue_size`` 10 and 2, and a plain
generator; the table is the one ``queuetune demo`` prints. About 10 s.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from pathlib import Path

from harness.results import machine, package_versions, publish

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, "src")
from queuetune.demo import run_demo
from queuetune.render.text import demo_text
from queuetune.terminal import print_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    parser.add_argument("--out", type=Path, help="also write demo.json and demo.txt into this folder")
    args = parser.parse_args()
    began = time.perf_counter()
    result = run_demo()
    data = {
        "benchmark": "demo",
        "versions": package_versions("keras", "torch", "numpy", "queuetune"),
        "machine": machine(),
        "seconds": time.perf_counter() - began,
        **result.to_dict(),
    }
    table = io.StringIO()
    print_all(demo_text(result), table)
    publish(data, table.getvalue().rstrip("\n"), "demo", args.json, args.out)


if __name__ == "__main__":
    main()
