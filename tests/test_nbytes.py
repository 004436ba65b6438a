"""The byte counter: nested arrays and tensors of every framework."""

from __future__ import annotations

import numpy as np
import pytest

from queuetune.record.nbytes import nbytes


def test_nested_numpy_structures_are_summed():
    x = np.zeros((4, 8, 8, 3), "float32")
    y = np.zeros((4, 10), "float32")
    assert nbytes(x) == 4 * 8 * 8 * 3 * 4
    assert nbytes((x, y)) == x.nbytes + y.nbytes
    assert nbytes([x, {"labels": y, "w": [y]}]) == x.nbytes + y.nbytes  # y reached twice, counted once
    assert nbytes({"a": x, "b": (1, 2.0, "s", None)}) == x.nbytes


def test_scalars_strings_and_bytes():
    assert nbytes(3) == 0
    assert nbytes("text") == 0
    assert nbytes(b"12345") == 5
    assert nbytes(bytearray(7)) == 7
    assert nbytes(memoryview(bytes(9))) == 9
    assert nbytes(object()) == 0


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    t = torch.zeros((2, 3), dtype=torch.bfloat16)
    assert nbytes(t) == 12
    assert nbytes((t, torch.zeros(5, dtype=torch.int64))) == 12 + 40


@pytest.mark.tf
def test_tensorflow_tensors():
    tf = pytest.importorskip("tensorflow")
    t = tf.zeros((2, 3), dtype=tf.float16)
    assert nbytes(t) == 12
    assert nbytes({"x": tf.zeros((4,), tf.int32)}) == 16
