"""How well the queue model predicts measured throughput and in-flight batches.

Run: KERAS_BACKEND=torch .venv/bin/python benchmarks/model_accuracy.py
         [--steps 500] [--warmup 25] [--rounds 3] [--loader torch|keras|python|tfdata|both]
         [--json] [--out benchmarks/results] [--render model_accuracy.json]

What is measured, and how:

- Two loaders over the same synthetic items. Item ``i`` sleeps a producer time
  drawn in advance from a seeded distribution and returns a 64 KiB float32
  array; the consumer sleeps a step time (uniform 6-8 ms, seeded). Sleeping
  releases the GIL, so the workers really build in parallel, and the times do
  not depend on how busy the two cores are. Every run reads items
  ``0 .. steps-1`` in order (Keras first serves the few items read ahead
  while ``fit`` builds the model), so every depth sees the same producer
  times.

  * torch: ``DataLoader(SleepDataset, batch_size=None, num_workers=k,
    prefetch_factor=f)`` (worker processes; depth = f x k), consumed by a step
    function. torch hands item ``i`` to worker ``i mod k``.
  * keras: ``PyDataset(workers=k, max_queue_size=q)`` (worker threads; depth =
    q + 1), consumed by ``fit`` on a Keras model whose ``train_step`` sleeps.
    Keras's thread pool takes the submitted items in order, the queue model's
    shared pool.
  * python (``--loader python``, its own results file
    ``model_accuracy_python``): a plain generator over the items behind
    queuetune's prefetch thread with ``buffer`` b (depth b + 1; b = 0 reads
    the generator in the consumer's thread, depth 0), as ``queuetune tune``
    tries it. The model comes from the run at ``buffer=0``, as the tuner's does.
  * torch-slow (``--loader torch-slow``, results ``model_accuracy_torch_slow``):
    the torch DataLoader with batches that take far longer to build than a
    step: 4 MiB items whose build times are the distribution's times x 10
    (mean 168-200 ms) against the same 6-8 ms steps, 4 to 12 worker processes.
    (``pin_memory`` needs an accelerator: on a machine without one torch
    ignores it, so it is not part of this case.)
  * tfdata (``--loader tfdata``, results ``model_accuracy_tfdata``):
    ``tf.data.Dataset.from_generator`` over the items, then ``prefetch(b)``
    (depth b + 1; ``prefetch(0)`` builds each batch in the request). TensorFlow
    builds out of the probe's sight, so the model comes from two runs of the
    round, as the tuner's does: ``buffer=0`` (the build times) and the baseline
    ``buffer=3`` (what of each request stays with the consumer:
    ``queuetune.model.fit_unbuffered``).

- Three producer distributions: constant (20 ms), exponential (mean 20 ms) and
  heavy-tailed (12 ms, plus 120 ms with probability 0.04: mostly short with
  rare long stalls).
- Measured: every setting of every distribution and loader is run ``rounds``
  times, interleaved in this one process (A B C, then B C A, ...: each
  round starts one setting later); the measured throughput is the median of
  the rounds' consumer throughput after the warm-up batches (``run_trial``'s
  third value). A discarded run per loader comes first (imports, first fork,
  first model build). Settings tested: depths 2 (2 workers), 4, 8, 16 and 24
  (4 workers).
- Predicted: in each round, the traced run at the baseline setting (torch
  ``num_workers=4, prefetch_factor=2``, Keras ``workers=4, max_queue_size=7``:
  depth 8 both) gives a model, ``fit(after_warmup(trace, warmup))``, and its
  prediction for each setting is ``simulate(model, depth, workers=k)``. Each
  prediction comes from one run, as in the tuner; taking the baseline run
  from every round, next to the runs it predicts, keeps what the machine did
  between rounds out of the comparison (a single baseline run before the
  rounds was 0.5-10.5 % slower than the rounds' median at its own setting,
  and every prediction carried that offset).
- Error = the median prediction / the median measurement - 1; the target:
  within 5 % for every depth. Each round's prediction against the same
  round's measurement is shown too.
- Replayed: the same model with its build times replaced by the items' own,
  in their order (plus the loader's measured overhead per build), as every
  run built them, for a run of the same length and warm-up (so that, under
  round-robin, each item goes to the worker that built it). A run of a few
  hundred batches is one draw of where its long builds fall; the model
  predicts the distribution's long run. Where the two differ, this column
  says how much of the error is that draw and how much the model's rules.
- Band: what the model gives for one run of this length: the 5th and 95th
  percentiles of its throughput over ``BAND_DRAWS`` simulated runs of the
  measured run's length and warm-up, each a different order of the round's
  measured build times (medians of the rounds' bounds). Where the band is
  wider than the 5 % target, a run of this length cannot tell the model's
  error from the luck of where its long builds fell, and a measurement inside
  the band is what the model expects.
- Peaks: the model's ``peak_built_batches`` beside the highest measured
  ``peak_in_flight_batches`` of the rounds (batches built and not yet
  released by the step), after the warm-up and over the whole run (Keras
  serves the read-ahead of the model-building call first, a start-up
  transient the model does not simulate).
- The model's rules come from the traced loader (``queuetune.frameworks.rules_of``):
  torch round-robin, a place freed at the take, batches crossing a pipe
  (``transit_time``); Keras a shared pool, a place freed at the request.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from harness.modelled import run
from harness.sleepers import Loader, generator_factory, keras_factory, tfdata_factory, torch_factory

LOADERS = {
    "torch": Loader(
        "torch",
        "torch DataLoader(batch_size=None), worker processes",
        "num_workers",
        "prefetch_factor",
        [(2, 1), (4, 1), (4, 2), (4, 4), (4, 6)],
        (4, 2),
        torch_factory,
        "round-robin (item i to worker i mod num_workers), index sent after the batch is received",
    ),
    "keras": Loader(
        "keras",
        "Keras PyDataset(workers=k) threads, fit() on a model whose train_step sleeps",
        "workers",
        "max_queue_size",
        [(2, 1), (4, 3), (4, 7), (4, 15), (4, 23)],
        (4, 7),
        keras_factory,
        "a shared thread pool; a place frees when the consumer asks (future_queue.get before future.get)",
    ),
    "python": Loader(
        "python",
        "a plain generator behind queuetune's prefetch thread (buffer=b; 0: read in the consumer's thread)",
        "",
        "buffer",
        [(1, 0), (1, 1), (1, 2), (1, 3), (1, 5)],
        (1, 0),
        generator_factory,
        "one thread reads the generator ahead; the model comes from the run without it (buffer=0)",
    ),
    "torch-slow": Loader(
        "torch",
        "torch DataLoader(batch_size=None), worker processes; batches of 4 MiB that take 10 x the "
        "distribution's times to build (mean 168-200 ms) against the same 6-8 ms steps",
        "num_workers",
        "prefetch_factor",
        [(4, 1), (8, 1), (8, 2), (12, 1), (12, 2)],
        (8, 2),
        functools.partial(torch_factory, floats=1 << 20),
        "round-robin (item i to worker i mod num_workers), index sent after the batch is received",
        name="torch-slow",
        build_scale=10.0,
    ),
    "tfdata": Loader(
        "tfdata",
        "tf.data from_generator(...).prefetch(buffer) (0: each request builds its batch)",
        "",
        "buffer",
        [(1, 0), (1, 1), (1, 2), (1, 3), (1, 5)],
        (1, 3),
        tfdata_factory,
        "one TensorFlow thread fills the prefetch buffer; the model comes from the run at buffer=0 "
        "(build times) and the baseline (what of each request stays with the consumer), as the tuner's does",
    ),
}


def _settings_text(settings: dict[str, int]) -> str:
    short = {"num_workers": "nw", "prefetch_factor": "pf", "workers": "w", "max_queue_size": "mqs"}
    return " ".join(f"{short.get(k, k)}={v}" for k, v in settings.items())


def table(result: dict[str, Any]) -> str:
    lines = [
        f"queue model vs measurement: {result['workload']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()),
        f"machine: {result['machine']}; date: {result['date']}; took {result['seconds']:.0f} s",
    ]
    for name, info in result["loaders"].items():
        lines.append(
            f"loader {name}: {info['description']}; model from {_settings_text(info['baseline'])}; "
            f"its rule: {info['assignment']}"
        )
    lines.append("")
    header = (
        f"{'loader':<6} {'distribution':<13} {'settings':<12} {'depth':>5} {'predicted':>9} {'measured':>9} "
        f"{'error':>7} {'rounds':>15} {'spread':>6} {'replayed':>8} {'one run, 90 %':>15} {'peak pred':>9} "
        f"{'peak meas':>10}"
    )
    lines += [header, "-" * len(header)]
    for entry in result["results"]:
        for row in entry["rows"]:
            peak = f"{row['measured_steady_peak_in_flight_batches']} ({row['measured_peak_in_flight_batches']})"
            rounds = f"{min(row['round_errors']):+.1%}..{max(row['round_errors']):+.1%}"
            replayed = f"{row['replay_error']:+.1%}" if row.get("replay_error") is not None else "-"
            band = (
                f"{row['band_low']:.1f}-{row['band_high']:.1f} {'in' if row['inside_band'] else 'OUT'}"
                if "band_low" in row
                else "-"
            )
            lines.append(
                f"{entry['loader']:<6} {entry['distribution']:<13} {_settings_text(row['settings']):<12} "
                f"{row['depth']:>5} {row['predicted_throughput']:>9.1f} {row['measured_throughput']:>9.1f} "
                f"{row['error']:>+7.1%} {rounds:>15} {row['measured_spread']:>6.1%} {replayed:>8} {band:>15} "
                f"{row['predicted_peak_built_batches']:>9} {peak:>10}"
            )
        m = entry["model"]
        lines.append(
            f"{'':<6} max |error| {entry['max_abs_error']:.1%} "
            f"({'within' if entry['within_target'] else 'MISSES'} the {result['target_abs_error']:.0%} target); "
            f"{entry['description']}; the {result['steps']} items drawn have mean "
            f"{entry['drawn_producer_mean_ms']:.1f} ms"
        )
        lines.append(
            f"{'':<6} each round's prediction against the same round's measurement: worst "
            f"{entry['max_abs_round_error']:.1%}; at the baseline setting the model was fitted to: "
            f"{entry['error_at_baseline']:+.1%}"
            + (
                f"; replaying the items' own build times: worst {entry['max_abs_replay_error']:.1%}"
                if "max_abs_replay_error" in entry
                else ""
            )
        )
        if "inside_band" in entry:
            lines.append(
                f"{'':<6} measured inside the model's 90 % band for one run of {result['steps']} steps: "
                f"{entry['inside_band']} of {len(entry['rows'])} settings; the widest band spans "
                f"{entry['widest_band']:.1%} of the prediction"
            )
        lines.append(
            f"{'':<6} model: producer mean {m['producer_mean_ms']:.1f} ms (median {m['producer_median_ms']:.1f}), "
            f"step mean {m['consumer_mean_ms']:.2f} ms incl. hand-over {m['handover_ms']:.2f} ms, "
            f"transit {m['transit_ms']:.2f} ms, dispatch {m.get('dispatch_ms', 0.0):.2f} ms, "
            f"{m['workers']} workers, {m['assignment']} assignment, "
            f"place freed at the {m['release']}; fitted to {_settings_text(entry['baseline']['settings'])} "
            f"(medians over the rounds)"
        )
        lines.append("")
    lines += [
        "throughput in batches/s; error = predicted/measured - 1, both medians of the rounds; rounds = each "
        "round's prediction against that round's measurement;",
        "spread = (max - min)/median of the measured rounds; replayed = the model (median of the rounds') run on the "
        "items' own build times in their order, against the measurement; one run, 90 % = the 5th-95th percentiles of "
        "the model's throughput over simulated runs of this length (in: the measurement falls inside);",
        "peak pred = the model's peak_built_batches; peak meas = highest measured peak_in_flight_batches after "
        "the warm-up (over the whole run in brackets).",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500, help="batches per run (default 500)")
    parser.add_argument("--warmup", type=int, default=25, help="batches left out of the throughput (default 25)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--loader",
        choices=["torch", "keras", "python", "tfdata", "torch-slow", "both"],
        default="both",
        help=(
            "which loader to test (default both: torch and keras; python: a generator behind queuetune's "
            "thread; tfdata: a tf.data prefetch; torch-slow: a DataLoader whose batches take far longer "
            "to build than a step)"
        ),
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--out", type=Path, help="also write model_accuracy.json and .txt into this folder")
    parser.add_argument("--render", type=Path, help="print the table of a saved model_accuracy.json and exit")
    args = parser.parse_args()
    if args.render is not None:
        print(table(json.loads(args.render.read_text())))
        return 0
    if args.steps < 50 or not 0 <= args.warmup < args.steps // 2 or args.rounds < 1:
        parser.error("need --steps >= 50, 0 <= --warmup < steps/2, --rounds >= 1")
    # torch advises fewer worker processes than cores; the workers here mostly sleep.
    warnings.filterwarnings("ignore", message="This DataLoader will create")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    names = ["torch", "keras"] if args.loader == "both" else [args.loader]
    result = run([LOADERS[n] for n in names], args.steps, args.warmup, args.rounds, args.seed, log)
    text = table(result)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = "model_accuracy" if args.loader == "both" else f"model_accuracy_{args.loader.replace('-', '_')}"
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2))
        (args.out / f"{stem}.txt").write_text(text + "\n")
    print(json.dumps(result, indent=2) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
