"""real_pipeline.py's table: the workload and its setting, a row per loader (throughput,
step, hand-over, memory), the notes and the targets."""

from __future__ import annotations

from typing import Any

from harness.memory import children_left_line, growth_line
from harness.resnets import SHOWN
from harness.results import mib, preamble, target_lines


def workload(result: dict[str, Any]) -> str:
    """The run's workload in words, its setting first."""
    s = result["settings"]
    return (
        f"Real pipeline, {s['setting']} setting: {s['epochs']} epochs of {s['epoch_batches']} batches, a new "
        f"iterator each; JPEG {s['size'][0]}x{s['size'][1]} (quality {s['quality']}) -> RandomResizedCrop(224), "
        f"flip, ToTensor, Normalize, batches of {s['batch']} ({mib(result['sample_bytes'] * s['batch'])}) -> "
        f"{SHOWN[s['model']]} training on {result['device']}; {s['workers']} worker processes (fork); "
        f"{s['rounds']} interleaved rounds, {s['warmup_steps']} model warm-up steps before each run"
    )


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    width = max(len("loader"), *map(len, result["loaders"]))
    lines = [
        *preamble(workload(result), result),
        "images/s: whole run, epoch starts included; x best ref: to the best median of torch, torch-persistent, "
        "torchdata.nodes; input wait: the run's time outside the steps; step: median step (the copy to the device "
        "in it, but for prefetcher-device, whose batches arrive there); step x best: to the shortest reference's; "
        "hand-over: taking a batch already built (a Prefetcher's own split; ~: the median time in next() after "
        "each epoch's first batch, waits for builds included) plus the step's copy to the device (host time of "
        "to()); of step: its share of the median step; first batch: median wait from iter() to an epoch's first "
        "batch; PSS: the process tree's PSS + its unmapped /dev/shm files, sampled every "
        f"{s['sample_every_s']} s (peak: highest over rounds; median: of the rounds' medians); started: most "
        "samples started and not yet released (batches)",
        "",
        f"{'loader':<{width}} {'images/s per round':<20} {'median':>7} {'x best ref':>11} {'input wait':>11} "
        f"{'step':>8} {'step x best':>12} {'hand-over':>11} {'of step':>8} {'first batch':>12} {'PSS peak':>12} "
        f"{'PSS median':>12} {'started':>8}",
    ]
    for name, r in result["loaders"].items():
        ratio = "n/a" if r["x_best_reference"] is None else f"{r['x_best_reference']:.3f}"
        steps = "n/a" if r.get("step_x_best_reference") is None else f"{r['step_x_best_reference']:.3f}"
        handover = "n/a" if r.get("handover_s") is None else f"{r['handover_s'] * 1e3:.2f} ms"
        handover = handover if r.get("handover_split", True) else "~" + handover
        share = "n/a" if r.get("handover_share") is None else f"{r['handover_share']:.1%}"
        lines.append(
            f"{name:<{width}} {', '.join(f'{x:.1f}' for x in r['rounds']):<20} {r['images_per_s']:>7.1f} {ratio:>11} "
            f"{r['input_wait_fraction']:>11.1%} {r['step_median_s'] * 1e3:>5.0f} ms {steps:>12} {handover:>11} "
            f"{share:>8} {r['first_batch_wait_median'] * 1e3:>9.0f} ms {mib(r['pss_peak']):>12} "
            f"{mib(r['pss_median']):>12} {r['peak_started_batches']:>8.2f}"
        )
    before = [r["pss_before"] for rows in result["runs"].values() for r in rows]
    lines.append(
        f"PSS of this process alone before each run (model built, no loader): {mib(min(before))} to {mib(max(before))}"
    )
    lines.append(growth_line(result["loaders"], result["runs"]))
    lines.append(children_left_line(result["loaders"]))
    for note in result["notes"]:
        lines.append(f"note: {note}")
    lines += ["", *target_lines(result["targets"])]
    return "\n".join(lines)
