"""Ray Data default against tuned, on a two-node Ray cluster on this machine.

Run: .venv/bin/python benchmarks/ray_tune.py [--rounds 5] [--tune-rounds 2]
         [--only NAME ...] [--json] [--out benchmarks/results] [--render ray_tune.json]

What is measured, and how (Ray 2.60; the driver is this process):

- A cluster of two nodes started with ``ray start`` (a head, then a second node
  joining its address), one CPU and 2 GiB of object store each, so Ray Data's
  default budget is 2 GiB (half the cluster's store). It is stopped at the end,
  also on failure.
- Four workloads, each a factory ``make(concurrency=None)`` returning a fresh
  dataset and the training step (``queuetune.tune.Job``, read with
  ``iter_batches(batch_size=None)``: one batch per block):

  * compute-bound: blocks of 16 random float32 images 128x128x3 (3 MiB) made
    with numpy; the step is a training step on an accelerator, 60 ms in which
    the host's CPUs are free (a sleep: on this 2-CPU machine a model trained on
    the CPU would take the CPUs the cluster builds blocks with, and the
    pipeline would be input-bound; measured with a small CNN in torch: 48 %
    input wait): the model is the slow side.
  * input-bound: 128x128 RGB PNG files written with Pillow to a temporary
    folder, decoded and normalised to float32 in the map step, 16 per block
    (3 MiB); the step takes the mean: decoding is the slow side.
  * pause: 12 MiB blocks built in 10 ms (a busy loop), a 2 ms step, and a 3 s
    pause of the trainer after its 20th batch (a validation, a checkpoint).
    Between pauses the cluster is the slow side, so the blocks built during
    the pause are taken faster than they are built afterwards.
  * pause-training: the same blocks and pause with a 25 ms step.

- The default: ``prefetch_batches=1``, Ray's budget and concurrency.
  ``queuetune.tune.tune(make, ...)`` runs a traced baseline of it, predicts
  throughput against depth with the queue model, measures the candidates it
  ranks best in interleaved rounds and picks the least peak memory within 2 %
  of the best measured throughput.
- Then default and tuned, interleaved (default then tuned, then tuned then default, ...)
  with ``queuetune.tune.run_trial``: median throughput after the warm-up
  batches (the pause included), and the peak of blocks held: built by the
  remote tasks and not yet taken by the trainer, with their bytes, counted by
  ``queuetune.watch`` (blocks live in the object store until the trainer takes
  them).
- Targets: tuned throughput >= 0.98 x default (ratio of medians and median of
  paired rounds), and in the pause workloads no more blocks held than the
  tuned depth plus one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ray_cluster import DRIVER_ENV, LocalCluster

os.environ.update(DRIVER_ENV)

import ray

from harness.interleave import throughput_ratios, throughput_target
from harness.ray_workloads import DEFAULT, run_workload, workloads
from harness.results import machine, mib, package_versions, preamble, target_lines

NODE_STORE = 2 * 2**30


def targets(entries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    checks = [throughput_target(name, entry["comparison"]) for name, entry in entries.items()]
    for name in ("pause", "pause-training"):
        if name not in entries:
            continue
        c = entries[name]["comparison"]
        held, depth = c["tuned"]["peak_in_flight_batches"], c["tuned"]["depth"]
        checks.append(
            {
                "target": f"{name}: blocks held at most the tuned depth + 1",
                "value": f"tuned {held} (depth {depth}), default {c['default']['peak_in_flight_batches']}",
                "met": depth is not None and held <= depth + 1,
            }
        )
    return checks


def _settings(settings: dict[str, Any]) -> str:
    budget = settings["object_store_memory"]
    return (
        f"prefetch {settings['prefetch_batches']}, budget {'default' if budget is None else mib(budget)}, "
        f"concurrency {settings['concurrency'] or 'default'}"
    )


def table(result: dict[str, Any]) -> str:
    lines = preamble(
        f"queuetune tune on Ray Data workloads against Ray's defaults, on a {result['cluster']}; "
        f"{result['rounds']} interleaved comparison rounds, tuner rounds {result['tune_rounds']}",
        result,
    )
    header = (
        f"{'workload':<14} {'setting':<8} {'knobs':<50} {'depth':>5} {'batches/s':>9} "
        f"{'peak held':>20} {'input wait':>10}"
    )
    lines += [header, "-" * len(header)]
    for entry in result["workloads"].values():
        c = entry["comparison"]
        for name in ("default", "tuned"):
            row = c[name]
            held = f"{row['peak_in_flight_batches']} / {mib(row['peak_in_flight_bytes'])}"
            wait = row["input_bound_fraction"]
            lines.append(
                f"{entry['workload']:<14} {name:<8} {_settings(row['settings']):<50} {row['depth']:>5} "
                f"{row['throughput']:>9.1f} {held:>20} {'n/a' if wait is None else f'{wait:.0%}':>10}"
            )
        lines.append(
            f"{'':<14} tuned/default: {throughput_ratios(c)}, peak bytes held {c['peak_bytes_ratio']:.3f} "
            f"(paired median {c['paired_peak_bytes_ratio']:.3f}); "
            f"runs of {entry['steps']} steps (throughput after {entry['warmup']})"
        )
        for line in entry["tune"]["explanation"]:
            lines.append(f"{'':<14}   {line}")
        lines.append("")
    lines.append(
        "batches/s = median of the comparison rounds; peak held = highest of the rounds (blocks built and "
        "not yet taken by the trainer / their bytes); input wait = median input-bound fraction"
    )
    lines.append("")
    lines += target_lines(result["targets"])
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved default/tuned rounds (default 5)")
    parser.add_argument("--tune-rounds", type=int, default=3, help="the tuner's rounds (default 3)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every run's steps (default 1.0)")
    parser.add_argument("--only", nargs="+", choices=["compute-bound", "input-bound", "pause", "pause-training"])
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--out", type=Path, help="write ray_tune.json and .txt into this folder")
    parser.add_argument("--render", type=Path, help="print the table of a saved ray_tune.json and exit")
    args = parser.parse_args()
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        saved["targets"] = targets(saved["workloads"])
        print(table(saved))
        return 0
    if args.rounds < 1 or args.tune_rounds < 1 or args.scale <= 0:
        parser.error("--rounds and --tune-rounds must be at least 1, --scale positive")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="queuetune_pngs_"))
    entries: dict[str, dict[str, Any]] = {}
    # Ray's own worker priority (nice 15), as a user's cluster has it.
    cluster = LocalCluster(nodes=2, cpus=1, object_store=NODE_STORE, worker_niceness=None)
    try:
        cluster.connect(logging_level="ERROR", log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        for workload in workloads(folder, args.scale):
            if args.only and workload.name not in args.only:
                continue
            log(f"{workload.name}: tuning ({time.perf_counter() - started:.0f} s)")
            entries[workload.name] = run_workload(workload, args.tune_rounds, args.rounds, log)
    finally:
        cluster.disconnect()
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
    result = {
        "benchmark": "ray_tune",
        "cluster": f"2-node Ray cluster (ray start), 1 CPU and {NODE_STORE // 2**30} GiB of object store per node",
        "default": DEFAULT,
        "rounds": args.rounds,
        "tune_rounds": args.tune_rounds,
        "scale": args.scale,
        "versions": package_versions("ray", "pyarrow", "numpy", "pillow", "queuetune"),
        "machine": machine(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - started,
        "workloads": entries,
    }
    result["targets"] = targets(entries)
    text = table(result)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ray_tune.json").write_text(json.dumps(result, indent=2, default=str))
        (args.out / "ray_tune.txt").write_text(text + "\n")
    print(json.dumps(result, indent=2, default=str) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
