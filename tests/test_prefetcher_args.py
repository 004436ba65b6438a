"""The Prefetcher's arguments: real booleans, a callable collate_fn, byte sizes in
every spelling, and the workers a plain iterable can use."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from helpers import assert_nothing_left_running
from queuetune import Prefetcher
from queuetune.cli import main
from queuetune.tune import tune

FLAGS = ["shuffle", "ordered", "adaptive", "drop_last", "sample_memory"]


def batches(n=6):
    return [np.full(100, i) for i in range(n)]


def numbers(n):
    yield from range(n)


# booleans


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("no", r"'no' \(str\)"),
        ("False", r"'False' \(str\)"),
        (0, r"0 \(int\)"),
        (1, r"1 \(int\)"),
        (None, r"None \(NoneType\)"),
        (np.array([True]), r"array\(\[ True\]\) \(ndarray\)"),
    ],
)
def test_a_flag_that_is_not_a_boolean_is_a_type_error_naming_it(flag, value, shown):
    with pytest.raises(TypeError, match=f"^{flag} must be True or False, got {shown}$"):
        Prefetcher(batches(), max_bytes="1MiB", **{flag: value})
    assert_nothing_left_running()


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("value", [True, False, np.bool_(True), np.bool_(False)])
def test_a_flag_takes_bool_and_numpy_bool(flag, value):
    with Prefetcher(batches(), max_bytes="1MiB", **{flag: value}) as p:
        assert getattr(p, flag, bool(value)) is bool(value)


@pytest.mark.timeout(60)
def test_numpy_booleans_act_as_booleans():
    samples = [np.full(3, i) for i in range(10)]
    with Prefetcher(samples, max_bytes="1MiB", batch_size=4, shuffle=np.bool_(True), seed=1) as p:
        order = [int(i) for b in p for i in b[:, 0]]
    assert sorted(order) == list(range(10)) and order != list(range(10))
    with Prefetcher(samples, max_bytes="1MiB", batch_size=4, drop_last=np.bool_(True), sample_memory=np.bool_(0)) as p:
        assert [b[:, 0].tolist() for b in p] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with Prefetcher(batches(), max_bytes="1MiB", adaptive=np.bool_(False), depth=3, ordered=np.bool_(True)) as p:
        assert [int(b[0]) for b in p] == list(range(6))
        settings = p.trace().meta.settings
    assert settings["adaptive"] is False and settings["ordered"] is True
    assert_nothing_left_running()


# collate_fn


@pytest.mark.parametrize(("value", "shown"), [(5, r"5 \(int\)"), ("stack", r"'stack' \(str\)")])
@pytest.mark.parametrize("batch_size", [None, 4])
def test_a_collate_fn_that_cannot_be_called_is_a_type_error(value, shown, batch_size):
    with pytest.raises(TypeError, match=f"^collate_fn must be a callable or None, got {shown}$"):
        Prefetcher(batches(), max_bytes="1MiB", batch_size=batch_size, collate_fn=value)
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_a_callable_collate_fn_still_works():
    with Prefetcher(list(range(6)), max_bytes="1MiB", batch_size=4, collate_fn=list) as p:
        assert list(p) == [[0, 1, 2, 3], [4, 5]]


# max_bytes


@pytest.mark.parametrize(
    ("max_bytes", "expected"),
    [
        ("1e9", 10**9),
        ("1.5e3MiB", 1500 * 2**20),
        ("2E9 B", 2 * 10**9),
        (1e9, 10**9),
        (1.5 * 2**30, 1536 * 2**20),
        (np.float64(1e6), 10**6),
        ("1MiB", 2**20),
    ],
)
def test_max_bytes_in_exponent_notation_and_as_a_float(max_bytes, expected):
    with Prefetcher(batches(), max_bytes=max_bytes) as p:
        assert p.max_bytes == expected
        assert p.trace().meta.settings["max_bytes"] == expected


@pytest.mark.timeout(60)
def test_a_float_budget_prefetches():
    with Prefetcher(batches(), max_bytes=1e9) as p:
        assert [int(b[0]) for b in p] == list(range(6))
    assert_nothing_left_running()


@pytest.mark.parametrize(
    ("max_bytes", "error", "message"),
    [
        ("lots", ValueError, "^malformed max_bytes 'lots'"),
        ("1.5 parsec", ValueError, "^max_bytes '1.5 parsec' has an unknown unit 'parsec'"),
        (0, ValueError, "^max_bytes must be positive, got 0$"),
        ("-1e9", ValueError, "^max_bytes must be positive, got '-1e9'$"),
        (-1.0, ValueError, r"^max_bytes must be positive, got -1\.0$"),
        (float("nan"), ValueError, "^max_bytes must be a finite number of bytes, got nan$"),
        (float("inf"), ValueError, "^max_bytes must be a finite number of bytes, got inf$"),
        ("1e30", ValueError, r"^max_bytes '1e30' exceeds 2\^63 bytes$"),
        (2.0**63, ValueError, r"exceeds 2\^63 bytes$"),
        (True, ValueError, "^max_bytes must be a number or a string"),
        (None, TypeError, r"^max_bytes must be a str, an int or a float, got None \(NoneType\)$"),
    ],
)
def test_a_bad_max_bytes_names_the_argument_and_the_value(max_bytes, error, message):
    with pytest.raises(error, match=message):
        Prefetcher(batches(), max_bytes=max_bytes)


def test_a_bad_tuner_budget_names_budget():
    with pytest.raises(ValueError, match=r"^malformed budget 'lots'"):
        tune(lambda: None, budget="lots")
    with pytest.raises(ValueError, match=r"^budget must be positive, got 0$"):
        tune(lambda: None, budget=0)


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_the_cli_budget_takes_exponents_and_names_the_option():
    # The options are parsed before the factory is looked for: a good budget ends at the missing file.
    code, _, err = _cli(["tune", "missing-factory.py:make", "--budget", "1e9"])
    assert code == 2 and "no such file" in err and "--budget" not in err
    code, out, err = _cli(["tune", "missing-factory.py:make", "--budget", "lots"])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "argument --budget: malformed byte size 'lots'" in err


# workers and plain iterables


def test_workers_default_to_two_for_an_indexable_source():
    with Prefetcher(batches(), max_bytes="1MiB") as p:
        assert p.workers == 2
        assert p.trace().meta.settings["workers"] == 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", [lambda: numbers(5), lambda: iter(range(5)), lambda: map(int, range(5))])
@pytest.mark.parametrize("workers", [None, 1])
def test_a_plain_iterable_is_read_by_one_worker_and_recorded_so(make, workers):
    kwargs = {} if workers is None else {"workers": workers}
    with Prefetcher(make(), max_bytes="1MiB", **kwargs) as p:
        assert p.workers == 1
        assert p.recorder.meta.settings["workers"] == 1
        assert list(p) == list(range(5))
        assert p.trace().meta.settings["workers"] == 1
    assert_nothing_left_running()


@pytest.mark.parametrize("make", [lambda: numbers(5), lambda: iter(range(5))])
@pytest.mark.parametrize("workers", [2, 4])
def test_more_workers_for_a_plain_iterable_is_a_value_error(make, workers):
    source = make()
    with pytest.raises(ValueError) as info:
        Prefetcher(source, max_bytes="1MiB", workers=workers)
    message = str(info.value)
    assert message.startswith(f"workers={workers} with a plain iterable ({type(source).__name__})")
    assert "read by one thread" in message
    assert "indexable dataset (one with __getitem__ and __len__)" in message and "workers=1" in message
    assert_nothing_left_running()


@pytest.mark.parametrize(("workers", "error"), [(0, ValueError), (2.5, TypeError), ("many", ValueError)])
def test_a_bad_workers_count_for_a_plain_iterable_is_still_named(workers, error):
    with pytest.raises(error, match="workers must be a positive integer"):
        Prefetcher(numbers(3), max_bytes="1MiB", workers=workers)
