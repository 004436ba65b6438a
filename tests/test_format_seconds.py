"""Durations in the unit that fits them: the formatter, and the reports that use it."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuetune.analysis.report import analyze
from queuetune.common.units import format_seconds
from queuetune.record.trace import Consumed, Mark, Produced, Trace
from queuetune.render.text import report_rows


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (1.96795, "1.97 s"),  # the step a user saw as "1967.95 ms"
        (0.01234, "12.3 ms"),
        (0.00085, "850 µs"),
        (0.0202, "20.2 ms"),
        (0.1, "100 ms"),
        (3.0, "3.00 s"),
        (12.345, "12.3 s"),
        (59.94, "59.9 s"),
        (4.2e-7, "420 ns"),
        (0, "0 s"),
        (-0.5, "-500 ms"),
        # Rounding carries into the next unit up, never "1000 ms" or "60.0 s".
        (0.9996, "1.00 s"),
        (0.0009996, "1.00 ms"),
        (0.0999996, "100 ms"),
        (9.9996, "10.0 s"),
        (59.96, "1 min 00 s"),
        # From a minute on: minutes and seconds; from an hour on: hours and minutes.
        (212.88, "3 min 33 s"),
        (3599.6, "1 h 00 min"),
        (7384.0, "2 h 03 min"),
    ],
)
def test_format_seconds(seconds, expected):
    assert format_seconds(seconds) == expected


def test_format_seconds_rejects_what_is_no_duration():
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError):
            format_seconds(bad)
    for wrong in ("1 s", None, True):
        with pytest.raises(TypeError):
            format_seconds(wrong)


FACTORS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


@given(st.floats(min_value=1e-9, max_value=59.9, allow_nan=False))
def test_below_a_minute_three_significant_digits_in_the_unit_that_fits(seconds):
    text = format_seconds(seconds)
    number, unit = text.split(" ")
    assert 1 <= float(number) < 1000 and unit in FACTORS
    assert len(re.sub(r"^0\.0*|\.", "", number)) == 3  # three significant digits, no more, no fewer
    assert float(number) * FACTORS[unit] == pytest.approx(seconds, rel=5e-3)


def test_the_text_report_shows_times_in_the_unit_that_fits():
    # Steps of about 1.97 s, builds of 12.3 ms, waits of 850 µs.
    produced, consumed = [], []
    for i in range(5):
        asked = 0.1 + i * 1.96795
        produced.append(Produced(asked - 0.01234 + 0.00085, asked + 0.00085, 64, key=i, worker="thread-1"))
        consumed.append(Consumed(asked, asked + 0.00085, key=i))
    end = 0.1 + 5 * 1.96795
    marks = [Mark(0.1, "run_begin", 0), Mark(end, "run_end", 0)]
    rows = dict(report_rows(analyze(Trace(produced=produced, consumed=consumed, marks=marks, end=end))))
    assert rows["consumer time per step"] == "median 1.97 s, p95 1.97 s (n=5)"
    assert rows["producer time per batch"] == "median 12.3 ms, p95 12.3 ms (n=5)"
    assert rows["start"].startswith("first batch after 850 µs,")
    assert rows["input wait (steady state)"].startswith("3.40 ms of 9.84 s (0.0%): not input-bound")
