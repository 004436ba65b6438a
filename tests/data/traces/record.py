"""Record the fixture traces with whichever queuetune is first on PYTHONPATH.

    git worktree add /tmp/qt-old-SHA SHA
    PYTHONPATH=/tmp/qt-old-SHA/src KERAS_BACKEND=torch .venv/bin/python tests/data/traces/record.py SHA
    git worktree remove /tmp/qt-old-SHA

writes tests/data/traces/SHA-<loader>.json for each loader below that the
checked-out version can watch. Uses only the API every version has:
queuetune.watch, queuetune.probe_of(...).trace().save(...).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import queuetune

HERE = Path(__file__).resolve().parent


def batches(n: int):
    for i in range(n):
        yield np.full((4, 8), i, dtype=np.float32)


def failing(n: int, fail_at: int):
    for i in range(n):
        if i == fail_at:
            raise RuntimeError(f"batch {i} cannot be read")
        yield np.full((4, 8), i, dtype=np.float32)


class Batches:
    """An iterable of 3 batches with a length; each pass is one run."""

    def __len__(self) -> int:
        return 3

    def __iter__(self):
        return batches(3)


def generator(path: Path) -> None:
    watched = queuetune.watch(batches(5), name="generator")
    for _ in watched:
        pass
    queuetune.probe_of(watched).trace().save(path)


def iterable(path: Path) -> None:
    watched = queuetune.watch(Batches(), name="iterable")
    for _ in range(2):
        for _ in watched:
            pass
    queuetune.probe_of(watched).trace().save(path)


def error(path: Path) -> None:
    watched = queuetune.watch(failing(5, 3), name="error")
    try:
        for _ in watched:
            pass
    except RuntimeError:
        pass
    queuetune.probe_of(watched).trace().save(path)


def torch_workers(path: Path, workers: int) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.arange(24, dtype=torch.float32).reshape(12, 2))
    loader = DataLoader(data, batch_size=3, num_workers=workers)
    watched = queuetune.watch(loader, name=f"torch{workers}")
    for _ in watched:
        pass
    probe = queuetune.probe_of(watched)
    probe.settle()
    probe.trace().save(path)
    probe.close()


def keras_predict(path: Path) -> None:
    import keras

    class Batches(keras.utils.PyDataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int):
            return np.full((4, 8), i, dtype=np.float32)

    watched = queuetune.watch(Batches(workers=1), name="keras")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    probe = queuetune.probe_of(watched)
    model.predict(watched, verbose=0, callbacks=[probe.keras_callback(print_report=False)])
    probe.trace().save(path)
    probe.close()


def main(tag: str) -> None:
    recordings = {"generator": generator, "iterable": iterable, "error": error}
    try:
        import queuetune.frameworks.torch
    except ImportError:
        pass
    else:
        recordings["torch0"] = lambda path: torch_workers(path, 0)
        recordings["torch2"] = lambda path: torch_workers(path, 2)
    try:
        import queuetune.frameworks.keras  # noqa: F401
    except ImportError:
        pass
    else:
        recordings["keras"] = keras_predict
    for what, record in recordings.items():
        path = HERE / f"{tag}-{what}.json"
        record(path)
        print(path.name)


if __name__ == "__main__":
    main(sys.argv[1])
