"""Every dtype numpy and torch can share crosses shared memory intact: its fields,
byte order and bits (NaN payloads and padding too), and the order of its axes in memory."""

from __future__ import annotations

import ctypes
import os
import pickle
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from helpers import assert_nothing_left_running
from queuetune import Prefetcher
from queuetune.prefetch import shm
from queuetune.prefetch.collate import default_collate

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")

PADDED = np.dtype([("flag", "u1"), ("value", "f8"), ("when", "M8[us]")], align=True)
NESTED = np.dtype([("id", ">i4"), ("point", [("x", "f4"), ("y", "<f2")]), ("grid", "u2", (3, 2)), ("tag", "S3")])
NUMPY_DTYPES = [
    np.dtype("bool"),
    np.dtype("u1"),
    np.dtype(">i4"),
    np.dtype("f2"),
    np.dtype(">f8"),
    np.dtype("c8"),
    np.dtype(">c16"),
    np.dtype("M8[ns]"),
    np.dtype(">m8[s]"),
    np.dtype("S5"),
    np.dtype("U3"),
    np.dtype([("a", "i4"), ("b", "f8")]),
    NESTED,
    PADDED,
]
TORCH_DTYPES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex32",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
]


# --- building and comparing ---------------------------------------------------------------


def random_array(dtype: np.dtype, shape: tuple[int, ...], order: tuple[int, ...], seed: int) -> np.ndarray:
    """Random bits of ``dtype`` (bools 0 or 1), ``shape``, its axes in memory in ``order``."""
    rng = np.random.default_rng(seed)
    stored = tuple(shape[axis] for axis in order)
    size = int(np.prod(stored, dtype=np.int64)) * dtype.itemsize
    array = np.frombuffer(bytearray(rng.bytes(size)), dtype=dtype).reshape(stored)
    for path in _bool_fields(dtype):
        field = array
        for name in path:
            field = field[name]
        field.view(np.uint8)[...] &= 1
    return array.transpose(np.argsort(order))


def _bool_fields(dtype: np.dtype, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if dtype.subdtype is not None:
        return _bool_fields(dtype.subdtype[0], path)
    if dtype.names is None:
        return [path] if dtype.kind == "b" else []
    return [found for name in dtype.names for found in _bool_fields(dtype.fields[name][0], (*path, name))]


def raw_bytes(array: np.ndarray) -> bytes:
    """The array's items bit for bit, in C order (a structured one's padding too)."""
    if array.dtype.names is not None:
        array = array.view(np.dtype((np.void, array.dtype.itemsize)))
    return array.tobytes()


def field_bytes(array: np.ndarray) -> bytes:
    """The bits of each field of the array's items, in C order (padding left out)."""
    if array.dtype.names is None:
        return array.tobytes()
    return b"".join(field_bytes(array[name]) for name in array.dtype.names)


def stride_order(strides: tuple[int, ...], shape: tuple[int, ...]) -> list[int]:
    """The axes longer than 1 from the largest |stride| to the smallest."""
    axes = sorted(range(len(shape)), key=lambda axis: -abs(strides[axis]))
    return [axis for axis in axes if shape[axis] > 1]


def same_dtype(a: np.dtype, b: np.dtype) -> bool:
    return a == b and a.str == b.str and a.descr == b.descr and a.fields == b.fields


def assert_same(got, sent, layout: bool = True) -> None:
    """``got`` is ``sent``: containers alike, arrays and tensors alike bit for bit
    with their dtype; large ones (through shared memory) in the same layout
    (with ``layout``: where some large arrays may have come through the pipe,
    whose pickle lays them out in C order, the layout is not compared)."""
    assert type(got) is type(sent)
    if isinstance(sent, (tuple, list)):
        assert len(got) == len(sent)
        for g, s in zip(got, sent):
            assert_same(g, s, layout)
    elif isinstance(sent, dict):
        assert list(got) == list(sent)
        for key in sent:
            assert_same(got[key], sent[key], layout)
    elif isinstance(sent, np.ndarray):
        if sent.nbytes < shm.MIN_BYTES:  # by pickle: numpy's own, which keeps no padding
            assert_same_values(got, sent)
            return
        assert same_dtype(got.dtype, sent.dtype), (got.dtype, sent.dtype)
        assert got.shape == sent.shape and raw_bytes(got) == raw_bytes(sent)
        if layout:
            assert stride_order(got.strides, got.shape) == stride_order(sent.strides, sent.shape)
    elif type(sent).__module__.startswith("torch"):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        assert tensor_bytes(got) == tensor_bytes(sent)
        assert stride_order(got.stride(), got.shape) == stride_order(sent.stride(), sent.shape)
    else:
        assert got == sent


def assert_same_values(got: np.ndarray, sent: np.ndarray) -> None:
    """Alike as numpy's pickle keeps them: the dtype, its byte order too, and the
    fields bit for bit (padding left out)."""
    assert same_dtype(got.dtype, sent.dtype), (got.dtype, sent.dtype)
    assert got.shape == sent.shape and field_bytes(got) == field_bytes(sent)


def tensor_bytes(tensor) -> bytes:
    """The tensor's items bit for bit, in C order (its bits as integers where numpy lacks its dtype)."""
    import torch

    try:
        return tensor.numpy().tobytes()
    except TypeError:
        same = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[tensor.element_size()]
        return tensor.view(same).numpy().tobytes()


def random_tensor(dtype: str, shape: tuple[int, ...], seed: int, layout: str = "contiguous"):
    """Random bits of torch's ``dtype`` (bools 0 or 1): ``layout`` "contiguous",
    "transposed" (its first two axes), "channels_last" (4-D), or "sliced" (every other row)."""
    import torch

    torch_dtype = getattr(torch, dtype)
    itemsize = torch_dtype.itemsize
    full = (shape[0] * 2, *shape[1:]) if layout == "sliced" else shape
    if layout == "transposed":
        full = (full[1], full[0], *full[2:])
    if layout == "channels_last":
        full = (full[0], *full[2:], full[1])
    rng = np.random.default_rng(seed)
    bits = np.frombuffer(bytearray(rng.bytes(int(np.prod(full)) * itemsize)), np.uint8)
    if dtype == "bool":
        bits = bits & 1
    tensor = torch.from_numpy(bits.copy()).view(torch_dtype).reshape(full)
    if layout == "transposed":
        return tensor.transpose(0, 1)
    if layout == "channels_last":
        return tensor.permute(0, 3, 1, 2)
    if layout == "sliced":
        return tensor[::2]
    return tensor


def round_trip(batch, reserve: int):
    """``batch`` shipped as a worker does under a lease of ``reserve`` bytes,
    pickled, and opened as the receiver does; and its pieces."""
    pool = shm.Pool(os.getpid())
    try:
        lease = pool.lend(reserve)
        shipped = pickle.loads(pickle.dumps(shm.ship(batch, lease)))
        pool.settle(shipped, lease)
        return pool.open(shipped), pieces(shipped.batch)
    finally:
        pool.close()


def pieces(batch) -> list[shm.Piece]:
    if isinstance(batch, shm.Piece):
        return [batch]
    if isinstance(batch, (tuple, list)):
        return [piece for item in batch for piece in pieces(item)]
    if isinstance(batch, dict):
        return [piece for value in batch.values() for piece in pieces(value)]
    return []


def leaves(batch) -> list:
    if isinstance(batch, (tuple, list)):
        return [leaf for item in batch for leaf in leaves(item)]
    if isinstance(batch, dict):
        return [leaf for value in batch.values() for leaf in leaves(value)]
    return [batch]


def over_shared_memory(array: np.ndarray) -> bool:
    """Whether ``array`` is a view of a segment as :meth:`.shm.Pool.open` makes them."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return isinstance(array.base, ctypes.Array)


def files() -> list[str]:
    return sorted(p.name for p in shm.files.ROOT.glob(f"queuetune-{os.getpid()}-*"))


# --- in this process: random arrays and containers -------------------------------------------


def _aligned(dtype: np.dtype) -> np.dtype:
    """``dtype``'s fields at aligned offsets (padding between them), where numpy can."""
    try:
        return np.dtype(dtype.descr, align=True)
    except (TypeError, ValueError):
        return dtype


FIELDS = st.one_of(
    hnp.scalar_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?"),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.datetime64_dtypes(endianness="?"),
    hnp.timedelta64_dtypes(endianness="?"),
)
STRUCTURED = hnp.nested_dtypes(FIELDS, max_leaves=6)
DTYPES = st.one_of(FIELDS, STRUCTURED, STRUCTURED.map(lambda d: _aligned(d) if d.names else d))


@st.composite
def arrays(draw) -> np.ndarray:
    """A random array: 0-d, empty, small, or large enough for shared memory (most),
    its axes in memory in any order, perhaps a view of every other or reversed item along one."""
    dtype = draw(DTYPES.filter(lambda d: 0 < d.itemsize <= 512))
    size = draw(st.sampled_from(["large", "large", "large", "small", "empty", "0-d"]))
    if size == "0-d":
        return random_array(dtype, (), (), draw(st.integers(0, 2**32 - 1)))
    shape = list(draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4)))
    axis = draw(st.integers(0, len(shape) - 1))
    if size == "empty":
        shape[axis] = 0
    elif size == "large":
        others = int(np.prod(shape)) // shape[axis]
        shape[axis] = -(-shm.MIN_BYTES // (dtype.itemsize * others)) * draw(st.integers(1, 3))
    order = tuple(draw(st.permutations(range(len(shape)))))
    step = draw(st.sampled_from([1, 1, 2, -1]))
    if step == 2:
        shape[axis] *= 2
    array = random_array(dtype, tuple(shape), order, draw(st.integers(0, 2**32 - 1)))
    return array[(slice(None),) * axis + (slice(None, None, step),)]


BATCHES = st.recursive(
    arrays() | st.integers(),
    lambda items: st.lists(items, max_size=3) | st.tuples(items, items) | st.dictionaries(st.text(max_size=3), items),
    max_leaves=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=BATCHES, reserve=st.sampled_from([0, 300_000, 8_000_000]))
def test_any_array_and_container_round_trips_through_shared_memory(batch, reserve):
    """``reserve`` 0: size unknown, all the room there is granted (no budget: any), every
    large array in a segment the worker makes; 300 kB: granted that much, some arrays in
    the first segment, some in a second, the rest through the pipe; 8 MB: all in the first."""
    got, shipped = round_trip(batch, reserve)
    large = [leaf for leaf in leaves(batch) if isinstance(leaf, np.ndarray) and leaf.nbytes >= shm.MIN_BYTES]
    # With 300 kB some large arrays may come through the pipe, in C order; the others keep their layout.
    assert_same(got, batch, layout=reserve != 300_000 or len(shipped) == len(large))
    if reserve == 300_000:
        assert len(shipped) <= len(large)
        assert sum(int(np.prod(p.shape)) * p.dtype.itemsize for p in shipped) <= shm.segments.rounded(reserve)
    else:
        assert len(shipped) == len(large)
    assert all(piece.order is None for piece, leaf in zip(shipped, large) if leaf.flags.c_contiguous)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
@pytest.mark.parametrize(
    ("shape", "order"),
    [((64, 1024), (0, 1)), ((64, 1024), (1, 0)), ((16, 32, 128), (2, 0, 1)), ((), ())],
    ids=["C", "F", "permuted", "0-d"],
)
def test_each_numpy_dtype_crosses_intact_in_its_layout(dtype, shape, order):
    if shape == ():
        dtype = np.dtype([("block", dtype, (64, 1024))])  # 0-d, and large
    sent = random_array(dtype, shape, order, seed=7)
    reversed_ = sent[::-1] if sent.ndim else sent
    (got, got_reversed), [shipped, _] = round_trip((sent, reversed_), 8_000_000)
    assert_same(got, sent)
    assert_same(got_reversed, reversed_)
    assert shipped.dtype == sent.dtype and shipped.order == (None if order == tuple(range(len(order))) else order)


def test_a_structured_array_keeps_its_fields_and_a_zero_size_one_its_shape():
    sent = {"records": np.zeros(20_000, dtype=[("a", "i4"), ("b", "f8")]), "none": np.zeros((0, 3, 5), order="F")}
    sent["records"]["a"] = np.arange(20_000)
    got, shipped = round_trip(sent, 1_000_000)
    assert got["records"]["a"].tolist() == list(range(20_000)) and got["none"].shape == (0, 3, 5)
    assert len(shipped) == 1


@pytest.mark.torch
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_each_torch_dtype_crosses_shared_memory_intact_in_its_layout(dtype):
    torch = pytest.importorskip("torch")
    sent = [
        random_tensor(dtype, (256, 512), 1),
        random_tensor(dtype, (256, 512), 2, "transposed"),
        random_tensor(dtype, (4, 8, 64, 64), 3, "channels_last"),
        random_tensor(dtype, (256, 512), 4, "sliced"),
    ]
    got, shipped = round_trip(sent, 0)
    assert_same(got, sent)
    assert all(type(tensor) is torch.Tensor for tensor in got) and len(shipped) == 4
    numpy_lacks = getattr(np, dtype, None) is None  # its bits go as integers of the same size
    assert {(piece.kind, piece.tensor_dtype) for piece in shipped} == {("torch", dtype if numpy_lacks else None)}


@pytest.mark.torch
def test_bfloat16_samples_are_stacked_straight_into_the_lent_segment():
    torch = pytest.importorskip("torch")
    samples = [random_tensor("bfloat16", (128, 256), seed) for seed in range(4)]
    pool = shm.Pool(os.getpid())
    try:
        lease = pool.lend(1_000_000)
        with shm.building(lease) as arena:
            shipped, copies, _ = arena.plan(default_collate(samples))
        assert copies == [] and shipped.batch.name == arena.name and shipped.batch.tensor_dtype == "bfloat16"
        pool.settle(shipped, lease)
        got = pool.open(shipped)
        assert got.dtype == torch.bfloat16 and tensor_bytes(got) == tensor_bytes(torch.stack(samples))
        del got
    finally:
        pool.close()


# --- through worker processes ------------------------------------------------------------------


class Mixed:
    """Picklable, for spawn: batch i holds an array of every numpy dtype kind in
    several layouts, and with ``torch`` a tensor of every torch dtype kind."""

    def __init__(self, n: int, torch: bool) -> None:
        self.n, self.torch = n, torch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < self.n:
            raise IndexError(i)
        batch: dict = {"i": i}
        for k, dtype in enumerate(NUMPY_DTYPES):
            seed = 1000 * i + k
            batch[f"C {dtype}"] = random_array(dtype, (96, 1024 // dtype.itemsize + 1), (0, 1), seed)
            batch[f"small {dtype}"] = random_array(dtype, (3, 2), (1, 0), seed)
        batch["fortran"] = np.asfortranarray(random_array(np.dtype("f8"), (300, 200), (0, 1), i))
        batch["permuted"] = random_array(NESTED, (40, 30, 20), (2, 0, 1), i)
        batch["view"] = random_array(np.dtype(">f4"), (400, 300), (0, 1), i)[::-2, 1::3]
        batch["0-d"] = random_array(np.dtype([("block", PADDED, (100, 50))]), (), (), i)
        batch["empty"] = np.zeros((0, 4), dtype="c8")
        if self.torch:
            for k, dtype in enumerate(TORCH_DTYPES):
                layout = ("contiguous", "transposed")[k % 2]
                batch[f"torch {dtype}"] = random_tensor(dtype, (128, 512), 1000 * i + k, layout)
                batch[f"small torch {dtype}"] = random_tensor(dtype, (3, 4), 1000 * i + k, "transposed")
            batch["channels_last"] = random_tensor("float32", (4, 3, 64, 64), i, "channels_last")
            batch["channels_last bf16"] = random_tensor("bfloat16", (2, 16, 32, 32), i, "channels_last")
        return batch


@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")  # torch's, as it unpickles a small one
@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("kind", ["numpy", pytest.param("torch", marks=pytest.mark.torch)])
def test_every_dtype_and_layout_comes_back_from_worker_processes_intact(method, kind):
    if kind == "torch":
        pytest.importorskip("torch")
    source = Mixed(4, torch=kind == "torch")
    received = []
    with Prefetcher(
        source,
        max_bytes="256MiB",
        mode="process",
        workers=2,
        adaptive=False,
        depth=2,
        multiprocessing_context=method,
        sample_memory=False,
    ) as p:
        for batch in p:
            assert_same(batch, source[int(batch["i"])])
            large = [x for x in batch.values() if isinstance(x, np.ndarray) and x.nbytes >= shm.MIN_BYTES]
            assert len(large) == len(NUMPY_DTYPES) + 4 and all(over_shared_memory(x) for x in large)
            received.append(int(batch["i"]))
            del batch
    assert received == list(range(4))
    assert_nothing_left_running()
    assert files() == []


# --- what pickling alone would bend ----------------------------------------------------------


class Items:
    """An indexable of the given items, each its own batch."""

    def __init__(self, items: list) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]


def through(items: list, mode: str, **settings) -> list:
    """``items`` as a prefetcher in ``mode`` hands them over."""
    with Prefetcher(Items(items), max_bytes="64MiB", mode=mode, workers=1, sample_memory=False, **settings) as p:
        return list(p)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_arrays_in_a_byte_order_not_the_machines_keep_it_small_or_large(mode):
    sent = [
        np.arange(100, dtype=">f8"),  # through the pipe, where numpy's pickling before protocol 5 drops it
        np.arange(20_000, dtype=">f8"),  # through shared memory
        np.zeros(3, dtype=NESTED),
        {"x": np.arange(5, dtype=">i2"), "y": [np.arange(4, dtype=">c16")]},
    ]
    got = through(sent, mode)
    for g, s in zip(got, sent):
        assert_same(g, s)
    assert_nothing_left_running()
    assert files() == []


@pytest.mark.torch
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_conjugate_and_negative_views_arrive_with_the_values_they_stand_for(mode):
    torch = pytest.importorskip("torch")
    large = torch.complex(torch.arange(20_000.0), torch.ones(20_000))
    small = torch.complex(torch.arange(4.0), torch.ones(4))
    sent = [large.conj(), large.conj().imag, small.conj(), small.conj().imag, (large.conj(), {"z": small.conj()})]
    got = through(sent, mode)

    def values(tensor):
        return tensor.resolve_conj().resolve_neg()

    for g, s in zip(got[:4], sent[:4]):
        assert g.dtype == s.dtype and torch.equal(values(g), values(s))
    pair, nested = got[4]
    assert torch.equal(values(pair), values(large.conj())) and torch.equal(values(nested["z"]), values(small.conj()))
    assert_nothing_left_running()
    assert files() == []


@pytest.mark.torch
@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:Sparse")
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_sparse_tensors_cross_intact_and_count_their_parts(mode):
    torch = pytest.importorskip("torch")
    from queuetune.record.nbytes import nbytes

    coo = torch.sparse_coo_tensor([[0, 3, 7]], [1.0, 2.0, 3.0], (10,))
    csr = torch.eye(4).to_sparse_csr()
    assert nbytes(coo) == 3 * 8 + 3 * 4 and nbytes(csr) == 5 * 8 + 4 * 8 + 4 * 4  # indices and values, not dense
    got = through([coo, {"m": csr, "dense": torch.ones(3)}], mode)
    assert got[0].layout == torch.sparse_coo and torch.equal(got[0].to_dense(), coo.to_dense())
    assert got[1]["m"].layout == torch.sparse_csr and torch.equal(got[1]["m"].to_dense(), csr.to_dense())
    assert_nothing_left_running()


class Samples:
    """Sample i of ``make(i)``: batched by the prefetcher's default collate."""

    def __init__(self, n: int, make) -> None:
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return self.make(i)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda i: None, "sample 0 holds NoneType"),
        (lambda i: {"x": np.ones(2), "label": None if i == 1 else i}, "sample 1 holds NoneType at ['label']"),
        (lambda i: (np.ones(2), [object()]), "sample 0 holds object at [1][0]"),
    ],
    ids=["None", "None in a dict", "an object"],
)
def test_samples_the_default_collate_cannot_join_are_refused_as_dataloader_refuses_them(mode, make, named):
    with Prefetcher(Samples(4, make), max_bytes="1MiB", batch_size=2, mode=mode, sample_memory=False) as p:
        with pytest.raises(TypeError, match=re.escape("default_collate: samples must hold arrays, tensors")) as exc:
            list(p)
    assert named in str(exc.value)
    assert_nothing_left_running()
