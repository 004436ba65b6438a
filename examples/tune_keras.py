"""A factory for `queuetune tune examples/tune_keras.py:make`.

The contract: a function whose keyword arguments are the loader's queue knobs,
with your current values as defaults, that returns a fresh loader and its
consumer. For Keras that is the PyDataset and the compiled model (queuetune
calls `model.fit(loader, steps_per_epoch=..., epochs=1)`); return
`queuetune.tune.Job(loader, model=model, method="predict")` to tune `predict`.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np

SIZE, BATCH = 32, 16


class Images(keras.utils.PyDataset):
    """Random images, built quickly: the model is the slow side."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return 1000

    def __getitem__(self, index):
        x = self.rng.random((BATCH, SIZE, SIZE, 3), dtype="float32")
        y = np.eye(10, dtype="float32")[self.rng.integers(0, 10, BATCH)]
        return x, y


_MODEL = None


def model():
    global _MODEL
    if _MODEL is None:
        inputs = keras.Input((SIZE, SIZE, 3))
        x = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
        x = keras.layers.GlobalAveragePooling2D()(x)
        _MODEL = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
        _MODEL.compile("adam", "categorical_crossentropy")
    return _MODEL


def make(workers=4, max_queue_size=10, use_multiprocessing=False):
    return Images(workers=workers, max_queue_size=max_queue_size, use_multiprocessing=use_multiprocessing), model()
