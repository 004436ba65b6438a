"""Batch bytes, loader footprints and the article's table."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ARTICLE_ROWS, FOOTPRINT_KEYS
from queuetune.common import cores
from queuetune.common.units import format_number
from queuetune.estimate.memory import (
    ARTICLE_BATCHES,
    ARTICLE_SIZES,
    FRAMEWORKS,
    BatchSpec,
    Footprint,
    batch_bytes,
    footprint,
    label_bytes,
    label_spec,
    seed_table,
)
from queuetune.frameworks.ray.spec import ray_object_store_bytes

MiB = 2**20


# batch_bytes and labels


@pytest.mark.parametrize(
    ("shape", "batch", "dtype", "expected"),
    [
        ((256, 256, 3), 64, "float32", 50_331_648),
        ("256x256x3", 64, "float32", 48 * MiB),
        ((128, 128, 3), 64, "float32", 12 * MiB),
        ((32, 32, 3), 32, "float32", 393_216),
        ((1024, 1024, 3), 1024, "float32", 12 * 2**30),
        ((224, 224, 3), 32, "uint8", 224 * 224 * 3 * 32),
        ((224, 224, 3), 32, "bfloat16", 224 * 224 * 3 * 32 * 2),
        ((224, 224, 3), 32, "float16", 224 * 224 * 3 * 32 * 2),
        ((10,), 8, "float64", 640),
        ((10,), 8, "complex128", 1280),
        ((), 8, "int64", 64),
    ],
)
def test_batch_bytes(shape, batch, dtype, expected):
    assert batch_bytes(shape, batch, dtype) == expected


def test_batch_bytes_formula_from_the_article():
    # height x width x channels x batch x 4 bytes
    assert batch_bytes((300, 200, 3), 50) == 300 * 200 * 3 * 50 * 4


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (((256, 256, 3), 0), ValueError),
        (((256, 256, 3), -1), ValueError),
        (((256, 256, 3), 1.5), TypeError),
        (((256, 256, 3), True), TypeError),
        (((256, 256, 3), "64"), TypeError),
        (((0, 256, 3), 64), ValueError),
        (("256xx3", 64), ValueError),
        (((256, 256, 3), 64, "float7"), ValueError),
        (((2**31, 2**31), 2), ValueError),
        (((2**21, 2**21, 2**21), 1), ValueError),
        (((65536, 65536, 3), 2**30, "float64"), ValueError),
    ],
)
def test_batch_bytes_rejects(args, error):
    with pytest.raises(error):
        batch_bytes(*args)


def test_absurd_sizes_name_the_limit():
    with pytest.raises(ValueError, match=r"exceeds 2\^63 bytes"):
        batch_bytes((2**31, 2**31), 2)


def test_label_bytes():
    assert label_bytes(64, 10) == 64 * 10 * 4
    assert label_bytes(64) == 64 * 8
    assert label_bytes(64, "int") == 64 * 8
    assert label_bytes(64, "int", "int32") == 64 * 4
    assert label_bytes(64, 1000, "float16") == 64 * 1000 * 2
    assert label_spec(10) == ((10,), "float32")
    assert label_spec(None) == ((), "int64")


@pytest.mark.parametrize(
    ("classes", "error"), [(0, ValueError), (-3, ValueError), ("ten", ValueError), (2.5, TypeError), (True, TypeError)]
)
def test_label_bytes_rejects(classes, error):
    with pytest.raises(error):
        label_bytes(64, classes)


# BatchSpec


def test_batch_spec_with_named_inputs():
    spec = BatchSpec(
        {"image": ((256, 256, 3), "float32"), "mask": ("256x256", "uint8"), "meta": ((16,), "float64")},
        batch_size=8,
        labels=label_spec(5),
    )
    lines = spec.lines()
    assert [line[0] for line in lines] == ["image", "mask", "meta", "labels"]
    assert lines[0] == ("image", (8, 256, 256, 3), "float32", 8 * 256 * 256 * 3 * 4)
    assert lines[1] == ("mask", (8, 256, 256), "uint8", 8 * 256 * 256)
    assert lines[3] == ("labels", (8, 5), "float32", 8 * 5 * 4)
    assert spec.nbytes == sum(line[3] for line in lines)
    data = spec.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["inputs"]["mask"] == {"shape": [256, 256], "dtype": "uint8"}


def test_batch_spec_single():
    spec = BatchSpec.single("256x256x3", 64, labels=10)
    assert spec.nbytes == 48 * MiB + 64 * 10 * 4
    assert BatchSpec.single((4,), 2).labels is None


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"inputs": {}, "batch_size": 4}, ValueError),
        ({"inputs": {"x": ((4,), "float32")}, "batch_size": 0}, ValueError),
        ({"inputs": {"x": ((4,), "nope")}, "batch_size": 4}, ValueError),
        ({"inputs": {"x": (4,)}, "batch_size": 4}, TypeError),
        ({"inputs": [("x", (4,))], "batch_size": 4}, TypeError),
        ({"inputs": {"": ((4,), "float32")}, "batch_size": 4}, TypeError),
        ({"inputs": {"x": ((4,), "float32")}, "batch_size": 4, "labels": "int"}, TypeError),
        ({"inputs": {"a": ((2**30, 2**30), "float32"), "b": ((2**30, 2**30), "float32")}, "batch_size": 2}, ValueError),
    ],
)
def test_batch_spec_rejects(kwargs, error):
    with pytest.raises(error):
        BatchSpec(**kwargs)


# footprints

BATCH = 12 * MiB


def test_keras_queue_holds_max_queue_size_plus_one():
    fp = footprint(BATCH, "keras", workers=4, max_queue_size=10)
    assert fp.depth == 11
    assert [(line.label, line.batches) for line in fp.lines] == [("queued", 11), ("consumed", 1)]
    assert fp.batches_bytes == 12 * BATCH
    assert fp.total_batches == 12


def test_keras_small_queue():
    assert footprint(BATCH, "keras", workers=4, max_queue_size=2).depth == 3


@pytest.mark.parametrize(
    ("settings_", "depth"),
    [
        ({}, 0),
        ({"workers": 1}, 0),
        ({"workers": 0}, 0),
        ({"workers": 0, "use_multiprocessing": True}, 0),
        ({"workers": 1, "use_multiprocessing": True}, 11),
        ({"workers": 2}, 11),
        ({"workers": 8, "max_queue_size": 1}, 2),
    ],
)
def test_keras_queue_exists_only_with_workers(settings_, depth):
    fp = footprint(BATCH, "keras", **settings_)
    assert fp.depth == depth
    assert fp.batches_bytes == (depth + 1) * BATCH


def test_keras_synchronous_says_so():
    fp = footprint(BATCH, "keras", workers=1)
    assert "synchronous" in fp.lines[0].explanation
    assert fp.batches_bytes == BATCH


@pytest.mark.parametrize(
    ("settings_", "depth", "total_batches"),
    [
        ({"num_workers": 4, "prefetch_factor": 2}, 8, 9),
        ({"num_workers": 4}, 8, 9),
        ({"num_workers": 4, "prefetch_factor": 2, "pin_memory": True}, 8, 17),
        ({"num_workers": 3, "prefetch_factor": 5}, 15, 16),
        ({"num_workers": 0}, 0, 1),
        ({}, 0, 1),
        ({"num_workers": 0, "pin_memory": True}, 0, 1),
        ({"num_workers": 0, "prefetch_factor": None}, 0, 1),
    ],
)
def test_torch_prefetch_factor_times_workers(settings_, depth, total_batches):
    fp = footprint(BATCH, "torch", **settings_)
    assert fp.depth == depth
    assert fp.total_batches == total_batches
    assert fp.batches_bytes == total_batches * BATCH


def test_torch_pinned_copies_double_the_read_ahead():
    plain = footprint(BATCH, "torch", num_workers=4)
    pinned = footprint(BATCH, "torch", num_workers=4, pin_memory=True)
    assert pinned.batches_bytes - BATCH == 2 * (plain.batches_bytes - BATCH)
    assert pinned.settings == {"num_workers": 4, "prefetch_factor": 2, "pin_memory": True}


def test_torch_prefetch_factor_needs_workers():
    with pytest.raises(ValueError, match="prefetch_factor"):
        footprint(BATCH, "torch", num_workers=0, prefetch_factor=2)
    with pytest.raises(ValueError, match="prefetch_factor"):
        footprint(BATCH, "torch", prefetch_factor=2)


# tf.data's prefetch thread waits for room before it builds: `buffer` batches being built or ready.
@pytest.mark.parametrize(("buffer", "held", "depth"), [(None, 1, 1), (0, 0, 0), (1, 1, 1), (8, 8, 8)])
def test_tfdata_prefetch_buffer(buffer, held, depth):
    kwargs = {} if buffer is None else {"buffer": buffer}
    fp = footprint(BATCH, "tfdata", **kwargs)
    assert fp.depth == depth
    assert fp.batches_bytes == (held + 1) * BATCH


@pytest.mark.parametrize(
    ("kwargs", "held", "depth"),
    [
        ({}, 1, 1),
        ({"backend": "tensorflow"}, 1, 1),
        ({"backend": "tensorflow", "buffer": 3}, 3, 3),
        ({"backend": "torch"}, 0, 0),
        ({"backend": "jax"}, 1, 1),
    ],
)
def test_plain_generator_uses_the_backend_prefetch(kwargs, held, depth):
    fp = footprint(BATCH, "generator", **kwargs)
    assert fp.depth == depth
    assert fp.batches_bytes == (held + 1) * BATCH


def test_none_is_just_the_batch():
    fp = footprint(BATCH, "none")
    assert fp.depth == 0
    assert [line.label for line in fp.lines] == ["consumed"]
    assert fp.batches_bytes == BATCH
    assert footprint(BATCH).total_bytes == BATCH


@pytest.mark.parametrize(("factor", "extra"), [(1, 0), (1.0, 0), (2, BATCH), (2.0, BATCH), (1.5, BATCH // 2)])
def test_transient_factor_applies_to_the_consumed_batch(factor, extra):
    fp = footprint(BATCH, "keras", workers=4, transient_factor=factor)
    assert fp.batches_bytes == 12 * BATCH + extra
    labels = [line.label for line in fp.lines]
    assert ("transient" in labels) == (extra > 0)


def test_article_two_gb_becomes_much_more():
    # "an estimate of 2 GB was 10 GB in reality": queue of 10 plus copies of the consumed batch.
    fp = footprint(BatchSpec.single((1024, 1024, 3), 64), "keras", workers=4, transient_factor=2)
    assert fp.batches_bytes == 13 * 64 * 1024 * 1024 * 3 * 4


def test_footprint_accepts_a_batch_spec():
    spec = BatchSpec.single("128x128x3", 64, labels=10)
    fp = footprint(spec, "torch", num_workers=2)
    assert fp.batch_bytes == spec.nbytes
    assert fp.batches_bytes == 5 * spec.nbytes


def test_footprint_to_dict_is_json():
    fp = footprint(BATCH, "torch", num_workers=4, pin_memory=True, transient_factor=2)
    data = fp.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert set(data) == FOOTPRINT_KEYS
    assert data["depth"] == 8
    assert data["batches_bytes"] == 18 * BATCH
    assert [line["label"] for line in data["lines"]] == [
        "prefetched",
        "pinned copies",
        "consumed",
        "transient",
        "worker processes",
    ]
    assert set(data["lines"][0]) == {"label", "batches", "bytes", "explanation"}
    assert isinstance(fp, Footprint)


@pytest.mark.parametrize(
    ("framework", "kwargs", "error", "match"),
    [
        ("keras", {"workers": -1}, ValueError, "workers"),
        ("keras", {"workers": 2.0}, TypeError, "workers"),
        ("keras", {"workers": True}, TypeError, "workers"),
        ("keras", {"max_queue_size": 0}, ValueError, "max_queue_size"),
        ("keras", {"max_queue_size": -3}, ValueError, "max_queue_size"),
        ("keras", {"use_multiprocessing": 1}, TypeError, "use_multiprocessing"),
        ("keras", {"num_workers": 4}, ValueError, "num_workers"),
        ("torch", {"num_workers": -1}, ValueError, "num_workers"),
        ("torch", {"num_workers": 2, "prefetch_factor": 0}, ValueError, "prefetch_factor"),
        ("torch", {"num_workers": 2, "prefetch_factor": -1}, ValueError, "prefetch_factor"),
        ("torch", {"num_workers": 2, "prefetch_factor": 1.5}, TypeError, "prefetch_factor"),
        ("torch", {"pin_memory": "yes"}, TypeError, "pin_memory"),
        ("torch", {"workers": 2}, ValueError, "workers"),
        ("tfdata", {"buffer": -1}, ValueError, "buffer"),
        ("tfdata", {"max_queue_size": 2}, ValueError, "max_queue_size"),
        ("generator", {"backend": "mxnet"}, ValueError, "mxnet"),
        ("generator", {"backend": "torch", "buffer": 2}, ValueError, "buffer"),
        ("none", {"buffer": 2}, ValueError, "buffer"),
        ("pytorch", {}, ValueError, "keras, generator, torch, tfdata, ray, none"),
        ("", {}, ValueError, "known frameworks"),
        (None, {}, TypeError, "framework"),
        ("keras", {"transient_factor": 0.5}, ValueError, "transient_factor"),
        ("keras", {"transient_factor": float("nan")}, ValueError, "transient_factor"),
        ("keras", {"transient_factor": float("inf")}, ValueError, "transient_factor"),
        ("keras", {"transient_factor": True}, TypeError, "transient_factor"),
        ("keras", {"transient_factor": "2"}, TypeError, "transient_factor"),
    ],
)
def test_footprint_rejects_bad_settings(framework, kwargs, error, match):
    with pytest.raises(error, match=match):
        footprint(BATCH, framework, **kwargs)


@pytest.mark.parametrize(
    ("batch", "error"), [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError), (2**63, ValueError)]
)
def test_footprint_rejects_bad_batch_bytes(batch, error):
    with pytest.raises(error):
        footprint(batch, "none")


def test_footprint_total_past_the_limit():
    with pytest.raises(ValueError, match=r"exceeds 2\^63 bytes"):
        footprint(2**62, "keras", workers=4)


def test_frameworks_list_their_settings():
    assert set(FRAMEWORKS) == {"keras", "generator", "torch", "tfdata", "ray", "none"}
    assert FRAMEWORKS["keras"] == ("workers", "use_multiprocessing", "max_queue_size")
    assert FRAMEWORKS["ray"] == (
        "prefetch_batches",
        "concurrency",
        "object_store_memory",
        "object_store_bytes",
        "ram_bytes",
    )


# Ray Data: the executor holds half its budget in blocks (what was measured, and
# the tuner's rule); the budget itself is the bound the explanation names.

RAY_BATCH = 12 * MiB


def test_ray_counts_half_the_budget_tasks_prefetch_and_the_consumed_batch():
    fp = footprint(RAY_BATCH, "ray", prefetch_batches=1, concurrency=2, object_store_memory=256 * MiB)
    assert [(line.label, line.batches) for line in fp.lines] == [
        ("held ahead", 10),
        ("being built", 2),
        ("prefetched", 1),
        ("consumed", 1),
    ]
    assert fp.depth == 10 + 2 + 1
    assert "the budget bounds them at 21" in fp.lines[0].explanation
    assert fp.batches_bytes == 14 * RAY_BATCH == 176160768
    assert fp.settings == {
        "prefetch_batches": 1,
        "concurrency": 2,
        "object_store_memory": 256 * MiB,
        "object_store_bytes": None,
        "ram_bytes": None,
    }


def test_ray_budget_is_half_the_object_store():
    fp = footprint(RAY_BATCH, "ray", concurrency=1, object_store_bytes="1GiB")
    assert fp.settings["object_store_memory"] == 512 * MiB
    assert fp.settings["object_store_bytes"] == 1024 * MiB
    assert fp.lines[0].batches == 512 // 24 == 21
    assert fp.depth == 21 + 1 + 1


def test_ray_budget_from_a_nodes_memory():
    # 30% of 16 GiB is the object store, half of that the budget.
    fp = footprint(RAY_BATCH, "ray", concurrency=4, prefetch_batches=2, ram_bytes=16 * 1024 * MiB)
    store = int(16 * 1024 * MiB * 3 / 10)
    assert fp.settings["object_store_bytes"] == store == 5153960755
    assert fp.settings["object_store_memory"] == store // 2
    assert fp.settings["ram_bytes"] == 16 * 1024 * MiB
    assert fp.lines[0].batches == (store // 2) // (2 * RAY_BATCH) == 102
    assert fp.depth == 102 + 4 + 2
    assert fp.batches_bytes == (102 + 4 + 2 + 1) * RAY_BATCH


def test_ray_default_object_store_is_capped_at_200_gb():
    assert ray_object_store_bytes(10**12) == 200 * 10**9
    assert ray_object_store_bytes("10GB") == 3 * 10**9
    fp = footprint(RAY_BATCH, "ray", concurrency=1, ram_bytes="4TB")
    assert fp.settings["object_store_memory"] == 100 * 10**9


def test_ray_defaults_prefetch_one_and_a_task_per_local_cpu():
    fp = footprint(RAY_BATCH, "ray", object_store_memory="120MiB")
    assert fp.settings["prefetch_batches"] == 1
    assert fp.settings["concurrency"] == cores.available() >= 1
    assert fp.depth == 5 + cores.available() + 1


def test_ray_prefetch_zero_and_a_budget_of_exactly_one_batch():
    fp = footprint(RAY_BATCH, "ray", prefetch_batches=0, concurrency=1, object_store_memory=RAY_BATCH)
    assert [line.batches for line in fp.lines] == [0, 1, 0, 1]
    assert fp.depth == 1


def test_ray_transient_factor_adds_on_top():
    fp = footprint(RAY_BATCH, "ray", concurrency=1, object_store_memory=24 * MiB, transient_factor=2)
    assert [line.label for line in fp.lines][-1] == "transient"
    assert fp.batches_bytes == (1 + 1 + 1 + 1 + 1) * RAY_BATCH


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "ray needs the object store"),
        ({"object_store_memory": "1GiB", "ram_bytes": "8GiB"}, ValueError, "object_store_memory and ram_bytes"),
        ({"object_store_memory": 0}, ValueError, "object_store_memory: byte size must be positive"),
        ({"object_store_memory": -5}, ValueError, "object_store_memory"),
        ({"object_store_bytes": "lots"}, ValueError, "object_store_bytes: malformed"),
        ({"ram_bytes": b"8GiB"}, TypeError, "ram_bytes"),
        ({"object_store_memory": True}, ValueError, "object_store_memory"),
        ({"object_store_memory": 8 * MiB}, ValueError, "smaller than one batch"),
        ({"object_store_bytes": 20 * MiB}, ValueError, "no longer bounds the read-ahead"),
        ({"object_store_memory": "1GiB", "concurrency": 0}, ValueError, "concurrency must be a positive integer"),
        ({"object_store_memory": "1GiB", "concurrency": 1.0}, TypeError, "concurrency"),
        ({"object_store_memory": "1GiB", "prefetch_batches": -1}, ValueError, "prefetch_batches"),
        ({"object_store_memory": "1GiB", "prefetch_batches": "1"}, TypeError, "prefetch_batches"),
        ({"object_store_memory": "1GiB", "num_workers": 2}, ValueError, "does not apply to framework 'ray'"),
        ({"object_store_memory": "1GiB", "_batch_bytes": 1}, ValueError, "does not apply"),
    ],
)
def test_ray_rejects_bad_settings(kwargs, error, match):
    with pytest.raises(error, match=match):
        footprint(RAY_BATCH, "ray", **kwargs)


def test_ray_estimate_does_not_import_ray():
    code = (
        "import sys, queuetune, queuetune.estimate.memory as m\n"
        "m.footprint(100, 'ray', concurrency=1, object_store_memory=1000)\n"
        "print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# the article's table


def test_seed_table_reproduces_the_article():
    table = seed_table()
    assert table["unit"] == "GiB"
    assert table["dtype"] == "float32"
    assert table["channels"] == 3
    assert table["batches"] == [int(row[0]) for row in ARTICLE_ROWS]
    assert table["sizes"] == [32, 64, 128, 256, 512, 1024]
    assert len(table["values"]) == 12 and all(len(row) == 6 for row in table["values"])
    checked = 0
    for batch, row, article_row in zip(table["batches"], table["values"], ARTICLE_ROWS):
        assert str(batch) == article_row[0]
        for size, value, printed in zip(table["sizes"], row, article_row[1:]):
            assert value == size * size * 3 * batch * 4 / 2**30
            assert format_number(value) == printed
            assert math.isclose(value, float(printed), rel_tol=2e-6)
            checked += 1
    assert checked == 72


def test_seed_table_anchor_values():
    values = seed_table()["values"]
    assert values[0][0] == 0.0003662109375
    assert values[5][5] == 12.0
    assert values[-1][-1] == 768.0


def test_seed_table_defaults():
    assert ARTICLE_BATCHES == tuple(2**k for k in range(5, 17))
    assert ARTICLE_SIZES == (32, 64, 128, 256, 512, 1024)


def test_seed_table_options():
    table = seed_table(batches=[1, 2], sizes=[10], channels=1, dtype="uint8", unit="B")
    assert table == {
        "unit": "B",
        "dtype": "uint8",
        "channels": 1,
        "batches": [1, 2],
        "sizes": [10],
        "values": [[100.0], [200.0]],
    }
    assert seed_table(unit="gb")["unit"] == "GB"
    assert seed_table(dtype="f2")["dtype"] == "float16"
    assert seed_table(unit="MiB")["values"][0][0] == 0.375


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"batches": []}, ValueError),
        ({"sizes": []}, ValueError),
        ({"batches": [0]}, ValueError),
        ({"sizes": [-32]}, ValueError),
        ({"batches": [1.5]}, TypeError),
        ({"batches": "32,64"}, TypeError),
        ({"channels": 0}, ValueError),
        ({"dtype": "float7"}, ValueError),
        ({"unit": "parsec"}, ValueError),
        ({"batches": [2**40], "sizes": [2**20]}, ValueError),
    ],
)
def test_seed_table_rejects(kwargs, error):
    with pytest.raises(error):
        seed_table(**kwargs)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=2**20), min_size=1, max_size=4),
    st.integers(min_value=1, max_value=2**40),
    st.sampled_from(["float32", "uint8", "float64", "bfloat16", "bool"]),
)
def test_batch_bytes_is_the_product_or_refuses(shape, batch, dtype):
    itemsize = {"float32": 4, "uint8": 1, "float64": 8, "bfloat16": 2, "bool": 1}[dtype]
    exact = math.prod(shape) * batch * itemsize
    if exact >= 2**63:
        with pytest.raises(ValueError):
            batch_bytes(tuple(shape), batch, dtype)
    else:
        assert batch_bytes(tuple(shape), batch, dtype) == exact


def test_import_queuetune_loads_no_framework():
    code = (
        "import sys, queuetune, queuetune.estimate.memory, queuetune.common.units, queuetune.cli\n"
        "heavy = {'torch', 'tensorflow', 'keras', 'jax', 'matplotlib'} & set(sys.modules)\n"
        "print(sorted(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
