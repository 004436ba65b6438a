"""A factory for `queuetune tune examples/tune_ray.py:make --framework ray`.

The contract: the keyword argument `concurrency` (the tasks of the map step)
with your current value as default (None: Ray's own, every CPU); it returns a
fresh Ray dataset and the training step, a function called with each batch.
queuetune sets the other two knobs itself: the object-store budget, in the
dataset's context, and `prefetch_batches`, among the arguments of
`iter_batches`. Return `queuetune.tune.Job(dataset, step=step, kwargs={...})` to
pass other arguments to `iter_batches` (here `batch_size=None`: one batch per
block), or `method="iter_torch_batches"` to read torch tensors.

Ray connects to the cluster named in RAY_ADDRESS, or starts one on this machine.
"""

import time

import numpy as np
import ray

from queuetune.tune import Job

ROWS_PER_BLOCK = 32


def decode(batch):
    """Stands in for decoding and augmenting images: 32 rows of 64x64x3 float32."""
    time.sleep(0.004)
    rows = len(batch["id"])
    return {"image": np.ones((rows, 64, 64, 3), np.float32), "id": batch["id"]}


def step(batch):
    time.sleep(0.002)


def make(concurrency=None):
    dataset = ray.data.range(200_000, override_num_blocks=200_000 // ROWS_PER_BLOCK).map_batches(
        decode, batch_size=ROWS_PER_BLOCK, compute=ray.data.TaskPoolStrategy(size=concurrency)
    )
    return Job(dataset, step=step, kwargs={"batch_size": None})
