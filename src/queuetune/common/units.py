"""Parsing and formatting of byte sizes, shapes, dtypes and counts; each function
raises ``ValueError`` (bad value) or ``TypeError`` (wrong type) naming the value."""

from __future__ import annotations

import math
import numbers
import re
import warnings
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = [
    "BYTES_LIMIT",
    "UNITS",
    "check_bytes",
    "dtype_itemsize",
    "dtype_name",
    "format_bytes",
    "format_number",
    "format_seconds",
    "nonnegative_int",
    "parse_bytes",
    "parse_shape",
    "positive_int",
    "product",
    "unit_factor",
]

#: Every byte count the package computes must stay below this bound.
BYTES_LIMIT = 2**63

#: Canonical unit names and their size in bytes (decimal and binary prefixes).
UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}

_UNITS_BY_LOWER = {name.lower(): name for name in UNITS}

# Digits with an optional fraction and an optional exponent, then an optional unit.
_BYTES_RE = re.compile(r"\s*([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?\s*([A-Za-z]*)\s*")
# Significant digits of a byte size kept exactly; past them only "some digit is not zero" counts.
# A half byte in any unit has at most 41 decimals (2^-41 for TiB), and a size below 10^19 units
# keeps its 64th digit at 10^-45 or finer, so the byte it rounds to is the same (see _amount).
_KEPT_DIGITS = 64
_DIM_RE = re.compile(r"[0-9]+")
_SHAPE_SEPARATORS = re.compile(r"[xX×,]")
_MAX_DIGITS = 19  # 2**63 has 19 digits
_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

# Item sizes of the dtypes we know, by numpy's canonical name.
_ITEMSIZES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, shortened so that an error message stays readable."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def positive_int(value: Any, what: str) -> int:
    """Return ``value`` as an ``int`` if it is an integer greater than zero.

    Rejects ``bool``, floats and strings (``TypeError``) and zero or negative
    numbers (``ValueError``); the message names ``what``.

    >>> positive_int(64, "batch size")
    64
    >>> positive_int(0, "batch size")
    Traceback (most recent call last):
    ...
    ValueError: batch size must be a positive integer, got 0
    """
    if not _is_int(value):
        raise TypeError(f"{what} must be a positive integer, got {_shown(value)} ({type(value).__name__})")
    number = int(value)
    if number <= 0:
        raise ValueError(f"{what} must be a positive integer, got {number}")
    return number


def nonnegative_int(value: Any, what: str) -> int:
    """Return ``value`` as an ``int`` if it is an integer of at least zero.

    >>> nonnegative_int(0, "workers")
    0
    >>> nonnegative_int(-1, "workers")
    Traceback (most recent call last):
    ...
    ValueError: workers must be an integer >= 0, got -1
    """
    if not _is_int(value):
        raise TypeError(f"{what} must be an integer >= 0, got {_shown(value)} ({type(value).__name__})")
    number = int(value)
    if number < 0:
        raise ValueError(f"{what} must be an integer >= 0, got {number}")
    return number


def check_bytes(nbytes: int, what: str = "size") -> int:
    """Return ``nbytes`` unchanged unless it reaches 2^63 bytes.

    >>> check_bytes(12, "batch")
    12
    >>> check_bytes(2**63, "batch")
    Traceback (most recent call last):
    ...
    ValueError: batch (9223372036854775808 bytes) exceeds 2^63 bytes
    """
    if nbytes >= BYTES_LIMIT:
        raise ValueError(f"{what} ({_byte_count(nbytes)} bytes) exceeds 2^63 bytes")
    return nbytes


def _byte_count(nbytes: int) -> str:
    """An integer byte count, as a power of two once its digits would flood a message."""
    if nbytes < 10**24:
        return str(nbytes)
    return f"about 2^{int(nbytes).bit_length() - 1}"


def product(factors: Iterable[int], what: str = "size") -> int:
    """Multiply byte factors, failing as soon as the product passes 2^63.

    >>> product((256, 256, 3, 64, 4), "batch")
    50331648
    """
    result = 1
    for factor in factors:
        result *= factor
        if result >= BYTES_LIMIT:
            raise ValueError(f"{what} exceeds 2^63 bytes")
    return result


def unit_factor(unit: str) -> tuple[str, int]:
    """Return the canonical name and size in bytes of ``unit`` (case-insensitive).

    >>> unit_factor("gib")
    ('GiB', 1073741824)
    """
    if not isinstance(unit, str):
        raise TypeError(f"unit must be a string, got {_shown(unit)} ({type(unit).__name__})")
    name = _UNITS_BY_LOWER.get(unit.strip().lower())
    if name is None:
        raise ValueError(f"unknown unit {_shown(unit)}; known units: {', '.join(UNITS)}")
    return name, UNITS[name]


def parse_bytes(value: str | int | float, what: str = "byte size") -> int:
    """Parse a byte size such as ``"1.5GiB"``, ``"2GB"``, ``"100 KB"``, ``"1e9"`` or ``123``.

    Units: ``B``; ``KB``/``MB``/``GB``/``TB`` (powers of 10^3);
    ``KiB``/``MiB``/``GiB``/``TiB`` (powers of 2^10). Unit letters are matched
    case-insensitively (``"gb"`` is ``GB``, never gigabits); a bare number is
    bytes. The number may have an exponent (``"1.5e3MiB"``, ``"2E9 B"``); a
    ``float`` is a count of bytes. Fractional results are rounded to the
    nearest byte (halves up), computed exactly. Zero, negative, NaN/inf,
    empty, unknown units, ``bool`` and sizes of 2^63 bytes or more raise
    ``ValueError``; types other than ``str``, ``int`` and ``float`` raise
    ``TypeError``. Every message names ``what`` (the argument's name).

    >>> parse_bytes("1.5GiB")
    1610612736
    >>> parse_bytes("100 KB")
    100000
    >>> parse_bytes("1.5e3MiB")
    1572864000
    >>> parse_bytes(1e9)
    1000000000
    >>> parse_bytes("lots", "max_bytes")
    Traceback (most recent call last):
    ...
    ValueError: malformed max_bytes 'lots': expected a number and a unit, like '1.5GiB' or '2e9'
    """
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{what} must be a number or a string like '1.5GiB', got {_shown(value)}")
    if _is_int(value):
        number = int(value)
        if number <= 0:
            raise ValueError(f"{what} must be positive, got {number}")
        return check_bytes(number, what)
    if isinstance(value, (float, np.floating)):
        return _float_bytes(float(value), what)
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, an int or a float, got {_shown(value)} ({type(value).__name__})")
    match = _BYTES_RE.fullmatch(value)
    if match is None:
        raise ValueError(f"malformed {what} {_shown(value)}: expected a number and a unit, like '1.5GiB' or '2e9'")
    sign, number_text, exponent_text, unit_text = match.groups()
    try:
        _, factor = unit_factor(unit_text or "B")
    except ValueError:
        raise ValueError(
            f"{what} {_shown(value)} has an unknown unit {_shown(unit_text)}; known units: {', '.join(UNITS)}"
        ) from None
    digits, power = _significant(number_text, exponent_text or "")
    if not digits or sign == "-":
        raise ValueError(f"{what} must be positive, got {_shown(value)}")
    nbytes = _amount(digits, power, factor)
    if nbytes >= BYTES_LIMIT:
        raise ValueError(f"{what} {_shown(value)} exceeds 2^63 bytes")
    if nbytes <= 0:
        raise ValueError(f"{what} {_shown(value)} rounds to zero bytes")
    return nbytes


def _float_bytes(number: float, what: str) -> int:
    """A float count of bytes, rounded to the nearest byte (halves up)."""
    if not math.isfinite(number):
        raise ValueError(f"{what} must be a finite number of bytes, got {number!r}")
    if number <= 0:
        raise ValueError(f"{what} must be positive, got {number!r}")
    if number >= BYTES_LIMIT:
        raise ValueError(f"{what} {number!r} exceeds 2^63 bytes")
    nbytes = math.floor(Fraction(number) + Fraction(1, 2))
    if nbytes <= 0:
        raise ValueError(f"{what} {number!r} rounds to zero bytes")
    return nbytes


def _significant(number: str, exponent: str) -> tuple[str, int]:
    """``number`` times 10^``exponent`` as ``(digits, power)``: ``int(digits) * 10**power``,
    ``digits`` without leading or trailing zeros (``""`` for zero)."""
    whole, _, fraction = number.partition(".")
    digits = (whole + fraction).lstrip("0")
    kept = digits.rstrip("0")
    return kept, len(digits) - len(kept) - len(fraction) + _exponent(exponent)


def _exponent(text: str) -> int:
    magnitude = text.lstrip("+-").lstrip("0")
    # Beyond 10^18 no text could hold the digits to bring the size back within range.
    value = int(magnitude or "0") if len(magnitude) <= 18 else 10**18
    return -value if text.startswith("-") else value


def _amount(digits: str, power: int, factor: int) -> int:
    """``int(digits) * 10**power`` units of ``factor`` bytes, rounded to the nearest byte (halves up).

    Returns ``BYTES_LIMIT`` for any amount of 10^19 units or more, without computing it.
    """
    magnitude = len(digits) + power  # 10^(magnitude - 1) <= the number < 10^magnitude
    if magnitude > 19:
        return BYTES_LIMIT
    if magnitude < -13:  # below 10^-13 units: under 0.11 bytes even in TiB
        return 0
    if len(digits) > _KEPT_DIGITS:
        # The digits past the kept ones are not all zero: a 1 just below the kept ones stands
        # for them, as no half byte falls between the two.
        power += len(digits) - _KEPT_DIGITS - 1
        digits = digits[:_KEPT_DIGITS] + "1"
    amount = int(digits) * factor * Fraction(10) ** power
    return math.floor(amount + Fraction(1, 2))


def format_bytes(n: int) -> str:
    """Format a byte count with binary units and one decimal.

    >>> format_bytes(12 * 2**20)
    '12.0 MiB'
    >>> format_bytes(512)
    '512 B'
    """
    if not _is_int(n):
        raise TypeError(f"byte count must be an int, got {n!r} ({type(n).__name__})")
    n = int(n)
    if n < 0:
        raise ValueError(f"byte count must be >= 0, got {n}")
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for name in _BINARY_UNITS:
        # Compare after rounding so that 1023.96 KiB prints as "1.0 MiB", not "1024.0 KiB".
        if round(value, 1) < 1024 or name == _BINARY_UNITS[-1]:
            break
        value /= 1024
    return f"{value:.1f} {name}"


def format_number(value: float, places: int = 9) -> str:
    """Format a table value rounded to ``places`` decimals, trailing zeros stripped.

    This reproduces how the article prints its table. Values too small to keep
    four significant digits at that rounding use scientific notation.

    >>> format_number(0.0003662109375)
    '0.000366211'
    >>> format_number(768.0)
    '768'
    """
    if value != 0 and abs(value) < 10.0 ** (4 - places):
        return f"{value:.6g}"
    text = f"{value:.{places}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


_SECOND_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def format_seconds(seconds: float) -> str:
    """Format a duration in the unit that fits it, with three significant digits.

    Below a minute: ``s``, ``ms``, ``µs`` or ``ns``, chosen after rounding (so
    0.9996 s is ``1.00 s``, never ``1000 ms``); from a minute on, minutes and
    seconds; from an hour on, hours and minutes. Negative durations keep their
    sign; NaN and infinities raise ``ValueError``, a non-number ``TypeError``.

    >>> format_seconds(1.96795), format_seconds(0.01234), format_seconds(0.00085)
    ('1.97 s', '12.3 ms', '850 µs')
    >>> format_seconds(0.9996), format_seconds(212.88), format_seconds(7384.0), format_seconds(0)
    ('1.00 s', '3 min 33 s', '2 h 03 min', '0 s')
    """
    if isinstance(seconds, (bool, np.bool_)) or not isinstance(seconds, numbers.Real):
        raise TypeError(f"a duration must be a number of seconds, got {_shown(seconds)} ({type(seconds).__name__})")
    value = float(seconds)
    if not math.isfinite(value):
        raise ValueError(f"a duration must be finite, got {value!r}")
    if value < 0:
        return "-" + format_seconds(-value)
    if value == 0:
        return "0 s"
    whole = round(value)
    if whole >= 3600:
        hours, minutes = divmod(round(value / 60), 60)
        return f"{hours} h {minutes:02d} min"
    if round(value, 1) >= 59.95:  # 59.96 s reads as 1 min 00 s, not 60.0 s
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min {rest:02d} s"
    for unit, size in _SECOND_UNITS:
        scaled = value / size
        if scaled >= 1 or unit == "ns":
            break
    # Three significant digits; the rounding may carry into the next unit up (999.6 ms is 1.00 s).
    rounded = float(f"{scaled:.3g}")
    if rounded >= 1000 and unit != "s":
        bigger = _SECOND_UNITS[[u for u, _ in _SECOND_UNITS].index(unit) - 1]
        unit, rounded = bigger[0], float(f"{value / bigger[1]:.3g}")
    if rounded < 1:  # below a nanosecond: no clock measures it, but say what it is
        return f"{rounded:.3g} {unit}"
    digits = max(0, 2 - math.floor(math.log10(rounded)))
    return f"{rounded:.{digits}f} {unit}"


def parse_shape(value: str | Iterable[int]) -> tuple[int, ...]:
    """Parse a per-sample shape: ``"256x256x3"``, ``"256,256,3"`` or a tuple/list of ints.

    Each dimension must be a positive integer.

    >>> parse_shape("256x256x3")
    (256, 256, 3)
    >>> parse_shape([28, 28])
    (28, 28)
    >>> parse_shape("256xx3")
    Traceback (most recent call last):
    ...
    ValueError: malformed shape '256xx3': dimension 2 is empty
    """
    if isinstance(value, str):
        return _parse_shape_text(value)
    if isinstance(value, (tuple, list)):
        if not value:
            raise ValueError("malformed shape (): a shape needs at least one dimension")
        dims = tuple(positive_int(dim, f"shape dimension {i + 1} of {tuple(value)!r}") for i, dim in enumerate(value))
        product(dims, f"shape {dims!r}")
        return dims
    raise TypeError(
        f"shape must be a string like '256x256x3' or a tuple of ints, got {_shown(value)} ({type(value).__name__})"
    )


def _parse_shape_text(text: str) -> tuple[int, ...]:
    if not text.strip():
        raise ValueError(f"malformed shape {_shown(text)}: expected dimensions like '256x256x3'")
    dims: list[int] = []
    for i, part in enumerate(_SHAPE_SEPARATORS.split(text)):
        part = part.strip()
        if not part:
            raise ValueError(f"malformed shape {_shown(text)}: dimension {i + 1} is empty")
        if not _DIM_RE.fullmatch(part):
            raise ValueError(
                f"malformed shape {_shown(text)}: dimension {i + 1} ({_shown(part)}) is not a positive integer"
            )
        if len(part.lstrip("0")) > _MAX_DIGITS:
            raise ValueError(f"malformed shape {_shown(text)}: dimension {i + 1} exceeds 2^63")
        dim = int(part)
        if dim == 0:
            raise ValueError(f"malformed shape {_shown(text)}: dimension {i + 1} is zero")
        dims.append(dim)
    product(dims, f"shape {_shown(text)}")
    return tuple(dims)


def dtype_name(dtype: Any) -> str:
    """Return the canonical name of a dtype we can size.

    Accepts numpy names (``"float32"``, ``"bfloat16"``), aliases numpy
    understands (``"f4"``, ``"float"``, ``"double"``), numpy scalar types
    (``np.float32``) and ``np.dtype`` objects.

    >>> dtype_name("f4")
    'float32'
    >>> dtype_name("double")
    'float64'
    """
    if isinstance(dtype, str):
        if dtype in _ITEMSIZES:
            return dtype
        try:
            with warnings.catch_warnings():  # numpy warns of deprecated aliases such as 'a'
                warnings.simplefilter("ignore")
                resolved = np.dtype(dtype)
        except Exception:  # numpy raises TypeError, ValueError or SyntaxError for odd strings
            raise ValueError(_unknown_dtype(dtype)) from None
    elif isinstance(dtype, np.dtype):
        resolved = dtype
    elif isinstance(dtype, type) and issubclass(dtype, np.generic):
        resolved = np.dtype(dtype)
    else:
        raise TypeError(f"dtype must be a string like 'float32', got {_shown(dtype)} ({type(dtype).__name__})")
    if resolved.name not in _ITEMSIZES:
        raise ValueError(_unknown_dtype(dtype))
    return resolved.name


def dtype_itemsize(dtype: Any) -> int:
    """Return the bytes per element of ``dtype`` (see :func:`dtype_name`).

    >>> dtype_itemsize("float32")
    4
    >>> dtype_itemsize("bfloat16")
    2
    """
    return _ITEMSIZES[dtype_name(dtype)]


def _unknown_dtype(dtype: Any) -> str:
    known = ", ".join(_ITEMSIZES)
    return f"unknown dtype {_shown(dtype)}; known dtypes: {known} (and numpy aliases such as 'f4', 'double')"
