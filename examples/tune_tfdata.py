"""A factory for `queuetune tune examples/tune_tfdata.py:make`.

The contract: the prefetch size is the keyword argument `buffer`, with an
integer default (AUTOTUNE sizes its buffer inside TensorFlow, where queuetune
cannot count it); it returns a fresh dataset and the training step.
"""

import numpy as np
import tensorflow as tf


def load(index):
    image = tf.random.stateless_uniform((16, 32, 32, 3), seed=tf.stack([index, index]))
    return image, tf.zeros((16,), tf.int64)


def step(batch):
    images, _ = batch
    np.asarray(images).mean()


def make(buffer=8):
    dataset = tf.data.Dataset.range(10_000).map(load, num_parallel_calls=2).prefetch(buffer)
    return dataset, step
