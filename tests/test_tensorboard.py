"""TensorBoard scalars from `queuetune run --tensorboard` and the Keras callback,
read back with TensorBoard's own event reader."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
import textwrap

import pytest

from helpers import assert_nothing_left_running, block_import
from queuetune.cli import main


def read_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    # Keep every point (by default the reader samples 10 of each tag).
    accumulator = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.TENSORS: 0})
    accumulator.Reload()
    return {
        tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in accumulator.Tensors(tag)]
        for tag in accumulator.Tags()["tensors"]
    }


@pytest.mark.tensorboard
@pytest.mark.timeout(120)
def test_run_writes_each_loaders_scalars_to_the_logdir(tmp_path, capsys):
    job = tmp_path / "job.py"
    job.write_text(
        textwrap.dedent(
            """
            import time
            import queuetune

            with queuetune.Prefetcher(range(30), max_bytes="1MiB", workers=1) as loader:
                for item in loader:
                    time.sleep(0.05)
            """
        )
    )
    logdir = tmp_path / "logs"
    assert main(["run", "--out", str(tmp_path / "out"), "--tensorboard", str(logdir), str(job)]) == 0
    scalars = read_scalars(logdir)
    names = ("input_wait", "in_flight_bytes", "batches_per_s")
    assert set(scalars) == {f"queuetune/prefetcher_1/{name}" for name in names}
    waits = scalars["queuetune/prefetcher_1/input_wait"]
    # About a point a second over 1.5 s, and one at the end at the step of every batch.
    assert 2 <= len(waits) <= 4 and waits[-1][0] == 30
    assert [step for step, _ in waits] == sorted(step for step, _ in waits)
    assert all(0.0 <= value <= 1.0 for _, value in waits)
    rates = [value for _, value in scalars["queuetune/prefetcher_1/batches_per_s"]]
    assert all(math.isfinite(v) and v >= 0 for v in rates) and max(rates) > 0


@pytest.mark.tensorboard
@pytest.mark.keras
@pytest.mark.timeout(120)
def test_the_keras_callback_writes_scalars_at_the_batch_count(tmp_path):
    import keras
    import numpy as np

    import queuetune

    class Data(keras.utils.PyDataset):
        def __init__(self):
            super().__init__(workers=2, max_queue_size=2)

        def __len__(self):
            return 6

        def __getitem__(self, i):
            return np.ones((8, 4), "float32"), np.zeros((8, 1), "float32")

    data = queuetune.watch(Data(), name="train")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    logdir = tmp_path / "logs"
    callback = queuetune.probe_of(data).keras_callback(print_report=False, tensorboard=str(logdir), every=0.0)
    model.fit(data, epochs=2, verbose=0, callbacks=[callback])
    queuetune.probe_of(data).close()
    scalars = read_scalars(logdir)
    assert set(scalars) == {f"queuetune/train/{n}" for n in ("input_wait", "in_flight_bytes", "batches_per_s")}
    steps = [step for step, _ in scalars["queuetune/train/input_wait"]]
    assert steps[0] == 1 and steps[-1] == 12 and len(steps) == 13  # each of the 12 batches, and the end


def test_a_logdir_that_cannot_be_written_or_a_missing_tensorboard_is_exit_2(tmp_path, capsys, monkeypatch):
    job = tmp_path / "job.py"
    marker = tmp_path / "ran"
    job.write_text(f"open({str(marker)!r}, 'w').close()\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    if importlib.util.find_spec("tensorboard") is not None:
        assert main(["run", "--tensorboard", str(blocker / "logs"), str(job)]) == 2
        assert "cannot write TensorBoard scalars to" in capsys.readouterr().err
    block_import(monkeypatch, "tensorboard", "No module named 'tensorboard'")
    assert main(["run", "--tensorboard", str(tmp_path / "logs"), str(job)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("queuetune: error: TensorBoard scalars need tensorboard") and len(err.splitlines()) == 1
    assert not marker.exists()


@pytest.mark.tensorboard
@pytest.mark.timeout(60)
def test_scalars_are_written_without_importing_tensorflow(tmp_path):
    # A fresh interpreter: this one may have imported TensorFlow for other tests.
    code = textwrap.dedent(
        f"""
        import sys
        from queuetune.record.recorder import Live
        from queuetune.sinks.tensorboard import ScalarWriter
        writer = ScalarWriter({str(tmp_path / "logs")!r})
        writer.write("dataloader 1", Live(20.0, 0.25, 2, 2048, None, batches=40))
        writer.close()
        print("tensorflow" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "False\n" and done.stderr == ""
    scalars = read_scalars(tmp_path / "logs")
    assert scalars["queuetune/dataloader_1/input_wait"] == [(40, 0.25)]
    assert scalars["queuetune/dataloader_1/in_flight_bytes"] == [(40, 2048.0)]
    assert_nothing_left_running(threads=False)
