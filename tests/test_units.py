"""Parsing and formatting of byte sizes, shapes, dtypes and counts."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuetune.common.units import (
    UNITS,
    check_bytes,
    dtype_itemsize,
    dtype_name,
    format_bytes,
    format_number,
    nonnegative_int,
    parse_bytes,
    parse_shape,
    positive_int,
    product,
    unit_factor,
)

# parse_bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.5GiB", 1536 * 2**20),
        ("2GB", 2 * 10**9),
        ("512MiB", 512 * 2**20),
        ("100 KB", 100_000),
        ("123", 123),
        (123, 123),
        ("1B", 1),
        ("1TiB", 2**40),
        ("3TB", 3 * 10**12),
        ("1KiB", 1024),
        ("1kib", 1024),
        ("1gb", 10**9),
        (" 2 MB ", 2 * 10**6),
        (".5KiB", 512),
        ("0.5B", 1),
        ("+7", 7),
        (np.int64(5), 5),
        ("1e9", 10**9),
        ("1e3", 1000),
        ("1.5e3MiB", 1500 * 2**20),
        ("2E9 B", 2 * 10**9),
        ("1e+3KiB", 1000 * 2**10),
        ("2.5e-1KB", 250),
        ("5e-1", 1),
        (".5e1", 5),
        ("1E18", 10**18),
        (1e9, 10**9),
        (1.5 * 2**30, 1536 * 2**20),
        (1.5, 2),
        (0.5, 1),
        (np.float32(4.0), 4),
        (2.0**63 - 1024, 2**63 - 1024),
    ],
)
def test_parse_bytes_accepts(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "0",
        "0GiB",
        "-1",
        "-1GB",
        "nan",
        "inf",
        "-inf",
        "NaN GiB",
        "1e19",
        "1e-400GiB",
        "4e-1",
        "-1e9",
        "0e9",
        "1e",
        "e9",
        "1 e9",
        "1e9e9",
        "1.5 parsec",
        "GiB",
        "1..5GB",
        "1 2 GB",
        "0.4B",
        "9999999999999999999999",
        "8192PiB",
        "10000000TiB",
        "½GB",
        "１GB",
    ],
)
def test_parse_bytes_rejects_values(text):
    with pytest.raises(ValueError) as info:
        parse_bytes(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "value",
    [0, -5, 2**63, True, False, np.bool_(True), 0.0, -1.0, 0.4, float("nan"), float("inf"), -math.inf, 2.0**63, 1e300],
)
def test_parse_bytes_rejects_numbers_and_bools(value):
    with pytest.raises(ValueError):
        parse_bytes(value)


@pytest.mark.parametrize("value", [None, b"1GB", [1], object(), 1 + 2j])
def test_parse_bytes_rejects_other_types(value):
    with pytest.raises(TypeError):
        parse_bytes(value)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("lots", ValueError, "malformed max_bytes 'lots'"),
        ("1.5 parsec", ValueError, "max_bytes '1.5 parsec' has an unknown unit 'parsec'"),
        ("0", ValueError, "max_bytes must be positive, got '0'"),
        ("-1GB", ValueError, "max_bytes must be positive, got '-1GB'"),
        ("1e30", ValueError, r"max_bytes '1e30' exceeds 2\^63 bytes"),
        ("0.4B", ValueError, "max_bytes '0.4B' rounds to zero bytes"),
        (0, ValueError, "max_bytes must be positive, got 0"),
        (2**63, ValueError, r"max_bytes \(9223372036854775808 bytes\) exceeds 2\^63 bytes"),
        (True, ValueError, "max_bytes must be a number or a string like '1.5GiB', got True"),
        (float("nan"), ValueError, "max_bytes must be a finite number of bytes, got nan"),
        (-2.5, ValueError, "max_bytes must be positive, got -2.5"),
        (1e19, ValueError, r"max_bytes 1e\+19 exceeds 2\^63 bytes"),
        (0.25, ValueError, "max_bytes 0.25 rounds to zero bytes"),
        (None, TypeError, r"max_bytes must be a str, an int or a float, got None \(NoneType\)"),
    ],
)
def test_parse_bytes_messages_name_the_argument_and_the_value(value, error, message):
    with pytest.raises(error, match=f"^{message}"):
        parse_bytes(value, "max_bytes")


def test_parse_bytes_names_a_byte_size_by_default():
    with pytest.raises(ValueError, match=r"^malformed byte size 'lots'"):
        parse_bytes("lots")
    with pytest.raises(ValueError, match=r"^byte size must be positive"):
        parse_bytes(-1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # halves round up, exactly, however many digits spell them
        ("0.5" + "0" * 80 + "e0", 1),
        ("0.4" + "9" * 100, 0),
        ("0.4" + "9" * 100 + "e1", 5),
        ("2.5" + "0" * 100 + "1e-1KB", 250),
        ("1." + "0" * 200 + "1e1B", 10),
        ("1.4999999999999999999999999999999999999999999e0KiB", 1536),
        ("0." + "0" * 100 + "5e101", 5),
        ("1e-" + "9" * 40, 0),
        ("1e" + "9" * 40, 2**63),
        ("9223372036854775806.5", 2**63 - 1),
        ("9223372036854775807.5", 2**63),
        ("9.2233720368547758075e18", 2**63),
    ],
)
def test_parse_bytes_is_exact_at_the_edges(text, expected):
    if expected == 0:
        with pytest.raises(ValueError, match="rounds to zero bytes"):
            parse_bytes(text)
    elif expected == 2**63:
        with pytest.raises(ValueError, match=r"exceeds 2\^63 bytes"):
            parse_bytes(text)
    else:
        assert parse_bytes(text) == expected


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.5, max_value=2.0**63, exclude_max=True))
def test_parse_bytes_floats_round_to_the_nearest_byte(number):
    assert parse_bytes(number) == math.floor(Fraction(number) + Fraction(1, 2))


def test_parse_bytes_message_names_the_value():
    with pytest.raises(ValueError, match="parsec"):
        parse_bytes("1.5 parsec")
    with pytest.raises(ValueError, match="'-1GB'"):
        parse_bytes("-1GB")
    with pytest.raises(ValueError, match=r"exceeds 2\^63 bytes"):
        parse_bytes("9000000TiB")


def test_parse_bytes_just_below_the_limit():
    assert parse_bytes(str(2**63 - 1)) == 2**63 - 1
    with pytest.raises(ValueError):
        parse_bytes(str(2**63))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=30), st.text(alphabet="0123456789.+- kKmMgGtTiIbB", max_size=20)))
def test_parse_bytes_fuzz(text):
    try:
        result = parse_bytes(text)
    except ValueError:
        return
    assert isinstance(result, int) and 0 < result < 2**63


@settings(max_examples=100, deadline=None)
@given(st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False), st.sampled_from(sorted(UNITS)))
def test_parse_bytes_matches_exact_arithmetic(number, unit):
    exact = number * UNITS[unit]
    try:
        result = parse_bytes(f"{number}{unit}")
    except ValueError:
        assert exact < 0.5 or exact >= 2**63
        return
    assert abs(result - exact) <= 0.5


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 10**25),
    st.integers(0, 30),
    st.integers(-40, 25),
    st.sampled_from(["e", "E"]),
    st.sampled_from(sorted(UNITS)),
)
def test_parse_bytes_exponents_match_exact_arithmetic(mantissa, places, exponent, e, unit):
    digits = str(mantissa).rjust(places + 1, "0")
    number = f"{digits[: len(digits) - places]}.{digits[len(digits) - places :]}" if places else digits
    exact = Fraction(mantissa, 10**places) * Fraction(10) ** exponent * UNITS[unit]
    nbytes = math.floor(exact + Fraction(1, 2))
    text = f"{number}{e}{exponent}{unit}"
    if 0 < nbytes < 2**63:
        assert parse_bytes(text) == nbytes
    else:
        with pytest.raises(ValueError):
            parse_bytes(text)


# format_bytes, format_number, units


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (12 * 2**20, "12.0 MiB"),
        (2**20 - 1, "1.0 MiB"),
        (3 * 2**30, "3.0 GiB"),
        (768 * 2**30, "768.0 GiB"),
        (2**40, "1.0 TiB"),
        (2**63 - 1, "8.0 EiB"),
    ],
)
def test_format_bytes(n, expected):
    assert format_bytes(n) == expected


def test_format_bytes_rejects():
    with pytest.raises(ValueError):
        format_bytes(-1)
    with pytest.raises(TypeError):
        format_bytes(1.5)
    with pytest.raises(TypeError):
        format_bytes(True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0003662109375, "0.000366211"),
        (0.00146484375, "0.001464844"),
        (0.0029296875, "0.002929688"),
        (0.0234375, "0.0234375"),
        (768.0, "768"),
        (12.0, "12"),
        (1.5, "1.5"),
        (0.0, "0"),
    ],
)
def test_format_number_reads_like_the_article(value, expected):
    assert format_number(value) == expected


def test_format_number_keeps_tiny_values_visible():
    assert format_number(4e-9) == "4e-09"


def test_units_table():
    assert UNITS["B"] == 1
    assert UNITS["KiB"] == 1024
    assert UNITS["MiB"] == 2**20
    assert UNITS["GiB"] == 2**30
    assert UNITS["GB"] == 10**9
    assert unit_factor("gib") == ("GiB", 2**30)
    with pytest.raises(ValueError, match="parsec"):
        unit_factor("parsec")
    with pytest.raises(TypeError):
        unit_factor(3)


# parse_shape


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("256x256x3", (256, 256, 3)),
        ("256,256,3", (256, 256, 3)),
        ("256X256", (256, 256)),
        (" 28 x 28 ", (28, 28)),
        ("7", (7,)),
        ((256, 256, 3), (256, 256, 3)),
        ([28, 28], (28, 28)),
        ((np.int32(4), 5), (4, 5)),
    ],
)
def test_parse_shape_accepts(value, expected):
    assert parse_shape(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "  ",
        "256xx3",
        "x256",
        "256x",
        "256x0x3",
        "256x-3",
        "256x3.0",
        "a",
        "256x3x",
        "1e3",
        "256 3",
        "99999999999999999999x2",
        "4294967296x4294967296",
        (),
        [],
        (0, 3),
        (-1,),
        (2**40, 2**40),
    ],
)
def test_parse_shape_rejects_values(value):
    with pytest.raises(ValueError):
        parse_shape(value)


@pytest.mark.parametrize("value", [None, 256, 2.5, (2.0, 3), (True, 3), ("2", 3), {"a": 1}])
def test_parse_shape_rejects_types(value):
    with pytest.raises(TypeError):
        parse_shape(value)


def test_parse_shape_message():
    with pytest.raises(ValueError, match=r"malformed shape '256xx3': "):
        parse_shape("256xx3")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=30), st.text(alphabet="0123456789xX, -", max_size=30)))
def test_parse_shape_fuzz_text(text):
    try:
        dims = parse_shape(text)
    except ValueError:
        return
    assert dims and all(isinstance(d, int) and d > 0 for d in dims)
    assert math.prod(dims) < 2**63


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(min_value=-5, max_value=2**64), st.booleans(), st.floats()), max_size=5))
def test_parse_shape_fuzz_sequences(dims):
    try:
        result = parse_shape(dims)
    except (ValueError, TypeError):
        return
    assert result == tuple(dims)


# dtypes


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("float64", 8),
        ("float32", 4),
        ("float16", 2),
        ("bfloat16", 2),
        ("uint8", 1),
        ("int8", 1),
        ("int16", 2),
        ("uint16", 2),
        ("int32", 4),
        ("uint32", 4),
        ("int64", 8),
        ("uint64", 8),
        ("bool", 1),
        ("complex64", 8),
        ("complex128", 16),
        ("f4", 4),
        ("float", 8),
        ("double", 8),
        ("half", 2),
        ("f8", 8),
        (">f4", 4),
        (np.float32, 4),
        (np.dtype("float16"), 2),
        (np.uint8, 1),
    ],
)
def test_dtype_itemsize(name, size):
    assert dtype_itemsize(name) == size


def test_dtype_aliases_resolve_to_names():
    assert dtype_name("f4") == "float32"
    assert dtype_name("double") == "float64"
    assert dtype_name(np.float16) == "float16"


@pytest.mark.parametrize(
    "name", ["float128", "str", "U4", "object", "O", "datetime64", "V4", "foo", "", "Float32", "f4,f4", "(", "int4"]
)
def test_dtype_rejects_unknown(name):
    with pytest.raises(ValueError) as info:
        dtype_itemsize(name)
    assert "known dtypes" in str(info.value)
    assert "float32" in str(info.value) and "bfloat16" in str(info.value)


@pytest.mark.parametrize("value", [None, 4, 4.0, float, b"float32", ["float32"]])
def test_dtype_rejects_non_strings(value):
    with pytest.raises(TypeError):
        dtype_itemsize(value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20))
def test_dtype_fuzz(text):
    try:
        size = dtype_itemsize(text)
    except ValueError:
        return
    assert size in (1, 2, 4, 8, 16)


# integers and the 2^63 guard


def test_positive_int():
    assert positive_int(3, "x") == 3
    assert positive_int(np.int64(3), "x") == 3
    for bad in (0, -1):
        with pytest.raises(ValueError, match="batch size"):
            positive_int(bad, "batch size")
    for bad in (True, 1.0, "3", None):
        with pytest.raises(TypeError, match="batch size"):
            positive_int(bad, "batch size")


def test_nonnegative_int():
    assert nonnegative_int(0, "workers") == 0
    with pytest.raises(ValueError, match="workers"):
        nonnegative_int(-1, "workers")
    with pytest.raises(TypeError, match="workers"):
        nonnegative_int(False, "workers")


def test_byte_guard():
    assert check_bytes(2**63 - 1) == 2**63 - 1
    with pytest.raises(ValueError, match=r"exceeds 2\^63 bytes"):
        check_bytes(2**63)
    assert product((2**31, 2**31)) == 2**62
    with pytest.raises(ValueError, match=r"exceeds 2\^63 bytes"):
        product((2**32, 2**31))
