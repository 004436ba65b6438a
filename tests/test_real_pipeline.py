"""benchmarks/real_pipeline.py's parts that run without a GPU: its models' layouts, the
step that copies nothing for the device stage's row, each row's hand-over and the device
stage's targets (issue 62), and the row skipped on the CPU with its reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples")]

from harness.device_targets import add_handover, issue62_targets  # noqa: E402
from harness.resnets import model_named  # noqa: E402
from harness.training import Trainer  # noqa: E402
from helpers import assert_nothing_left_running  # noqa: E402


@pytest.mark.parametrize(("name", "parameters"), [("resnet50", 23_528_522), ("resnet101", 42_520_650)])
def test_the_bottleneck_resnets_have_torchvisions_layout(name, parameters):
    # torchvision's resnet50 and resnet101 with 10 classes hold exactly these many parameters
    assert sum(p.numel() for p in model_named(name).parameters()) == parameters


def test_the_device_stages_step_copies_nothing_and_the_others_time_their_copy():
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])
    staged = Trainer("cpu", on_device=True)
    staged.step(x, y)
    assert staged.copies == [0.0]
    with pytest.raises(RuntimeError, match="not on cpu"):
        staged.step(x, y.numpy())  # a batch left on the host is not what the stage hands over
    plain = Trainer("cpu")
    plain.step(x.numpy(), y.numpy())
    assert len(plain.copies) == 1 and plain.copies[0] > 0.0


def rows(stage_step: float, pinned_step: float, stage_ratio: float, take: float | None) -> tuple[dict, dict]:
    summary = {
        "torch": {"images_per_s": 100.0, "step_median_s": pinned_step, "x_best_reference": 1.0},
        "prefetcher-device": {"images_per_s": 100.0, "step_median_s": stage_step, "x_best_reference": stage_ratio},
    }
    runs = {
        "torch": [{"takes": [0.004, 0.002, 0.003], "copies": [0.001], "handover_median_s": None}],
        "prefetcher-device": [{"takes": [0.5], "copies": [0.0, 0.0], "handover_median_s": take}],
    }
    return summary, runs


def test_the_hand_over_is_the_take_and_the_copy_and_the_prefetchers_own_split_first():
    summary, runs = rows(0.020, 0.025, 1.0, take=0.0001)
    add_handover(summary, runs)
    torch_row, staged = summary["torch"], summary["prefetcher-device"]
    assert torch_row["handover_s"] == pytest.approx(0.004) and not torch_row["handover_split"]
    assert staged["handover_s"] == pytest.approx(0.0001) and staged["handover_split"]
    assert staged["handover_share"] == pytest.approx(0.005)
    assert staged["step_x_best_reference"] == pytest.approx(0.8)
    summary, runs = rows(0.020, 0.025, 1.0, take=None)  # no batch built before it was asked for
    add_handover(summary, runs)
    assert summary["prefetcher-device"]["handover_s"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("stage_step", "stage_ratio", "take", "met"),
    [
        (0.020, 1.02, 0.0001, [True, True, True]),
        (0.030, 0.98, 0.001, [False, False, False]),
    ],
)
def test_the_device_stages_targets(stage_step, stage_ratio, take, met):
    summary, runs = rows(stage_step, 0.025, stage_ratio, take)
    add_handover(summary, runs)
    assert [check["met"] for check in issue62_targets(summary)] == met


def test_the_targets_are_not_applicable_without_the_device_stages_row():
    summary, runs = rows(0.020, 0.025, 1.0, 0.0001)
    del summary["prefetcher-device"], runs["prefetcher-device"]
    add_handover(summary, runs)
    assert [check["met"] for check in issue62_targets(summary)] == [None, None, None]


@pytest.mark.timeout(120)
def test_on_the_cpu_the_device_stages_row_is_skipped_with_its_reason():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "examples")])}
    script = str(ROOT / "benchmarks" / "real_pipeline.py")
    done = subprocess.run(
        [sys.executable, script, "--setting", "model-bound", "--device", "cpu", "--loaders", "prefetcher-device"],
        capture_output=True,
        text=True,
        env=env,
        timeout=100,
        check=False,
    )
    assert done.returncode == 2
    assert "prefetcher-device skipped: the Prefetcher's device stage copies to CUDA devices" in done.stderr
    assert "--loaders: none of them can run here" in done.stderr
    assert_nothing_left_running()
