"""Samples joined as they are built (``prefetch.stream``) give what the default
collate gives, bit for bit, on any samples: alike or not (another shape, dtype,
type or structure at any sample), numbers, strings, None, torch tensors; in a
worker's shared memory or not."""

from __future__ import annotations

import os
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuetune.prefetch import shm
from queuetune.prefetch.collate import default_collate
from queuetune.prefetch.stream import collate_as_built

LEAVES = ["u1", ">f8", "<f4", "c8", "int", "float", "str", "none", "torch"]


def leaf(kind: str, i: int, shape: tuple[int, ...]):
    rng = np.random.default_rng(i)
    if kind == "int":
        return int(rng.integers(-5, 5))
    if kind == "float":
        return float(rng.random())
    if kind == "str":
        return "ab"[i % 2] * (1 + i % 3)
    if kind == "none":
        return None
    if kind == "torch":
        import torch

        return torch.from_numpy(rng.random(shape, dtype=np.float32))
    dtype = np.dtype(kind)
    return np.frombuffer(bytearray(rng.bytes(int(np.prod(shape)) * dtype.itemsize)), dtype=dtype).reshape(shape)


@st.composite
def samples(draw):
    """Samples of one structure (a leaf, a tuple, a list or a dict of leaves),
    perhaps one of them changed at one place (another kind of leaf, another shape,
    another container)."""
    count = draw(st.integers(1, 6))
    kinds = draw(st.lists(st.sampled_from(LEAVES), min_size=1, max_size=3))
    container = draw(st.sampled_from(["leaf", "tuple", "list", "dict"]))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=0, max_size=3)))
    if "torch" in kinds:
        pytest.importorskip("torch")

    def make(i: int, kinds: list[str], shape: tuple[int, ...], container: str):
        leaves = [leaf(kind, 1000 * i + j, shape) for j, kind in enumerate(kinds)]
        if container == "leaf":
            return leaves[0]
        if container == "dict":
            return {f"k{j}": value for j, value in enumerate(leaves)}
        return tuple(leaves) if container == "tuple" else list(leaves)

    odd = draw(st.one_of(st.none(), st.integers(0, count - 1)))
    change = draw(st.sampled_from(["kind", "shape", "container", "length"]))
    items = []
    for i in range(count):
        these_kinds, these_shape, this_container = kinds, shape, container
        if i == odd:
            if change == "kind":
                these_kinds = [draw(st.sampled_from(LEAVES)), *kinds[1:]]
            elif change == "shape":
                these_shape = (*shape, 2)
            elif change == "container":
                this_container = draw(st.sampled_from(["leaf", "tuple", "list", "dict"]))
            else:
                these_kinds = kinds[:-1] if len(kinds) > 1 else [*kinds, "int"]
        items.append(make(i, these_kinds, these_shape, this_container))
    return items


def outcome(join, items):
    try:
        return "ok", join(items)
    except Exception as exc:  # what the default collate raises, the stream must too
        return type(exc).__name__, str(exc)


def same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return a.dtype.str == b.dtype.str and a.shape == b.shape and a.tobytes() == b.tobytes()
    if type(a).__module__.startswith("torch"):
        import torch

        def raw(t):  # bit for bit: a NaN equals itself only as bits
            return t.contiguous().reshape(-1).view(torch.uint8)

        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(raw(a), raw(b))
    return a == b


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=samples(), in_shared_memory=st.booleans())
def test_samples_joined_as_built_are_the_default_collates_batch_bit_for_bit(items, in_shared_memory):
    expected = outcome(default_collate, items)
    pool = shm.Pool(os.getpid()) if in_shared_memory else None
    try:
        if pool is not None:
            with shm.building(pool.lend(1 << 20)):
                got = outcome(lambda xs: collate_as_built(xs.__getitem__, list(range(len(xs)))), items)
        else:
            got = outcome(lambda xs: collate_as_built(xs.__getitem__, list(range(len(xs)))), items)
    finally:
        if pool is not None:
            pool.close()
    assert got[0] == expected[0], (got, expected)
    if expected[0] == "ok":
        assert same(got[1], expected[1]), (got, expected)
    else:
        assert got[1] == expected[1]


def test_each_sample_is_built_once_in_order_and_let_go_of_as_it_is_joined():
    built, refs = [], []

    def build(i):
        assert all(ref() is None for ref in refs), "a sample already joined in is still held"
        built.append(i)
        sample = np.full(1000, i, dtype=np.int32)
        refs.append(weakref.ref(sample))
        return sample, i

    x, y = collate_as_built(build, [5, 3, 9])
    assert built == [5, 3, 9] and x[:, 0].tolist() == [5, 3, 9] and y.tolist() == [5, 3, 9]
