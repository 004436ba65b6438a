"""A factory for `queuetune tune examples/tune_generator.py:make`.

A plain Python generator has no queue of its own: queuetune tries its own
bounded prefetch thread in front of it (`buffer` ready batches) and reports
whether reading ahead pays. The factory takes no knobs; it returns a fresh
generator and the training step.
"""

import time

import numpy as np


def batches():
    rng = np.random.default_rng(0)
    while True:
        time.sleep(0.002)  # loading
        yield rng.random((16, 32, 32, 3), dtype="float32")


def step(batch):
    time.sleep(0.002)  # training


def make():
    return batches(), step
