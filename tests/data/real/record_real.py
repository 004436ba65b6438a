"""Record the traces that tests/test_hostile_traces.py corrupts, with the queuetune checked out:

    PYTHONPATH=src KERAS_BACKEND=torch .venv/bin/python tests/data/real/record_real.py

writes tests/data/real/<loader>.json: a torch DataLoader with 2 worker processes
(memory sampled, so its samples carry each worker's PSS; run as rank 0 of a
launch of 2, so its meta carries the rank), a Prefetcher in process mode (its
depth, workers and pool marks) and a Keras PyDataset under ``predict`` (its
``pre_run_consumes``). Each loader is iterated for two epochs of 3 batches.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

import queuetune

HERE = Path(__file__).resolve().parent


class Slow:
    """12 samples that take 20 ms each, so that memory is sampled while they build."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> np.ndarray:
        time.sleep(0.02)
        return np.full(8, i, dtype=np.float32)


def torch_workers(path: Path) -> None:
    from torch.utils.data import DataLoader

    os.environ.update({"RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "fixture"})
    try:
        watched = queuetune.watch(DataLoader(Slow(), batch_size=4, num_workers=2), name="dataloader")
    finally:
        for name in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
            del os.environ[name]
    for _ in range(2):
        for _ in watched:
            pass
    probe = queuetune.probe_of(watched)
    probe.settle()
    probe.trace().save(path)
    probe.close()


def prefetcher(path: Path) -> None:
    with queuetune.Prefetcher(Slow(), batch_size=4, max_bytes="1MiB", workers=2, mode="process") as loader:
        for _ in range(2):
            for _ in loader:
                pass
        loader.trace().save(path)


def keras_predict(path: Path) -> None:
    import keras

    class Batches(keras.utils.PyDataset):
        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int):
            return np.full((4, 8), i, dtype=np.float32)

    watched = queuetune.watch(Batches(workers=2), name="keras")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    probe = queuetune.probe_of(watched)
    for _ in range(2):
        model.predict(watched, verbose=0, callbacks=[probe.keras_callback(print_report=False)])
    probe.trace().save(path)
    probe.close()


def main() -> None:
    for what, record in {"dataloader": torch_workers, "prefetcher": prefetcher, "pydataset": keras_predict}.items():
        path = HERE / f"{what}.json"
        record(path)
        print(path.name)


if __name__ == "__main__":
    main()
