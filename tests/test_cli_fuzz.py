"""Fuzzing what the command line parses: sizes, budgets, shapes, dtypes, counts and saved traces.

Every input either works (exit 0, and ``--json`` output parses) or exits 2 with
exactly one line on stderr naming the problem; no exception escapes ``main``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from helpers import assert_nothing_left_running, queuetune_process, run_cli
from queuetune.common.units import BYTES_LIMIT, UNITS, parse_bytes, parse_shape

ERROR_PREFIX = "queuetune: error: "
MISSING_FACTORY = "missing-factory.py:make"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


run = run_cli


def check(argv: list[str]) -> tuple[int, str, str]:
    """The property: exit 0 (with parseable JSON when asked) or exit 2 with one error line."""
    code, out, err = run(argv)
    if code == 0:
        assert err == ""
        if "--json" in argv:
            json.loads(out)
    else:
        assert code == 2, (code, err)
        assert out == ""
        assert err.startswith(ERROR_PREFIX) and err.endswith("\n") and err.count("\n") == 1, err
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        # The message names the problem without flooding the terminal.
        assert len(err) < 600, err
    return code, out, err


# strategies

# Every character, surrogates and control characters included.
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=16)
# Characters that parsers of numbers, units and shapes might half-accept.
NEAR_ALPHABET = st.sampled_from(
    [
        *list("0123456789.,+-_ xX×eEiIbBkKmMgGtT\t\n"),
        "\xa0",
        "\u2009",
        "\u3000",
        "٣",
        "３",
        "²",
        "Ⅷ",
        "ⅹ",
        "х",
        "✕",
        "×",
        "ｘ",
        "İ",
        "K",
        "\x00",
        "�",
    ]
)
NEAR_TEXT = st.text(NEAR_ALPHABET, max_size=16)
TEXT = st.one_of(ANY_TEXT, NEAR_TEXT)

UNIT_NAMES = [*UNITS, "PiB", "EiB", "KIB", "kb", "gib", "b", "bytes", "G", "Gi", "iB", "KiBB", "\u212aiB", "G iB"]


def _case(draw, text: str) -> str:
    return "".join(c.upper() if draw(st.booleans()) else c.lower() for c in text)


@st.composite
def sizes(draw) -> str:
    """Near-valid byte sizes: a number in some spelling, spaces, a unit in some case."""
    number = draw(
        st.one_of(
            st.integers(-10, 10**25).map(str),
            st.decimals(allow_nan=True, allow_infinity=True, places=draw(st.integers(0, 40))).map(str),
            st.floats(allow_nan=True, allow_infinity=True).map(repr),
            st.sampled_from(
                [
                    "",
                    ".",
                    "5.",
                    ".5",
                    "1e30",
                    "1E3",
                    "0x10",
                    "1_000",
                    "\u0663",
                    "\uff11\uff12",
                    "1,5",
                    "-0",
                    "+3",
                    "--3",
                    "0" * 40 + "1",
                    "9" * 19,
                    "9" * 20,
                ]
            ),
        )
    )
    unit = draw(st.one_of(st.just(""), st.sampled_from(UNIT_NAMES).map(lambda u: _case(draw, u))))
    space = st.sampled_from(["", " ", "  ", "\t", "\n", "\u00a0", "\u3000"])
    return draw(space) + number + draw(space) + unit + draw(space)


@st.composite
def shapes(draw) -> str:
    """Near-valid shapes: dimensions joined by separators, some of them look-alikes of 'x'."""
    dims = draw(
        st.lists(
            st.one_of(
                st.integers(1, 512),
                st.integers(-5, 0),
                st.integers(2**31, 2**70),
                st.sampled_from(["", " ", "\u0663", "\uff13", "2.5", "1e3", "+4", "00", "007"]),
            ).map(str),
            min_size=1,
            max_size=5,
        )
    )
    seps = st.sampled_from(["x", "X", "\u00d7", ",", " x ", "\u2179", "\u0445", "\u2715", "*", "xx", ", ", "\uff58"])
    text = dims[0]
    for dim in dims[1:]:
        text += draw(seps) + dim
    if draw(st.booleans()):
        text = draw(st.sampled_from(["", "x", " ", "("])) + text + draw(st.sampled_from(["", "x", " ", ")", "\n"]))
    return text


NUMPY_NAMES = sorted(str(name) for name in np.sctypeDict)
DTYPES = st.one_of(
    st.sampled_from(NUMPY_NAMES),
    st.sampled_from(
        [
            "float32",
            "bfloat16",
            "f4",
            "<f4",
            ">f8",
            "=i2",
            "|u1",
            "object",
            "O",
            "str",
            "U4",
            "S8",
            "V8",
            "float128",
            "longdouble",
            "complex256",
            "datetime64",
            "m8[s]",
            "M8[ns]",
            "f4,f4",
            "(2,)f4",
            "[('a', 'f4')]",
            "i8\x00",
            "float32 ",
            " float32",
            "Float32",
            "FLOAT32",
            "f",
            "",
            "a",
            "b1",
            "?",
            "void",
            "float7",
            "\u0444",
            "T",
            "StringDType",
        ]
    ),
    TEXT,
)
COUNTS = st.one_of(
    st.integers(-3, 2**70).map(str),
    st.sampled_from(
        [
            "",
            " 4 ",
            "4.0",
            "1e3",
            "0x10",
            "1_0",
            "+2",
            "-0",
            "\u0663",
            "\uff14",
            "\u00b2",
            "9" * 30,
            "nan",
            "inf",
            "True",
        ]
    ),
    TEXT,
)
INT_LISTS = st.one_of(
    st.lists(st.integers(-2, 2**64).map(str), min_size=1, max_size=4).map(",".join),
    st.sampled_from(["", ",", "1,", ",1", "1,,2", "1, 2", "1;2", "1 2", "\u0663,\u0664"]),
    TEXT,
)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        [
            "0",
            "-0",
            "0.99",
            "1",
            "1e-400",
            "1e400",
            "nan",
            "-inf",
            "infinity",
            "NaN",
            " 0.5 ",
            "0,5",
            "\u0660.\u0665",
            "1_0",
            "0x1p-2",
            "5e-324",
            "1.0000000000000000001",
        ]
    ),
    TEXT,
)


# table and estimate


@FUZZ
@given(
    dtype=DTYPES,
    unit=st.one_of(st.sampled_from(UNIT_NAMES), TEXT),
    channels=COUNTS,
    batches=INT_LISTS,
    table_sizes=INT_LISTS,
    as_json=st.booleans(),
)
def test_table_options_fuzz(dtype, unit, channels, batches, table_sizes, as_json):
    argv = [
        "table",
        "--dtype",
        dtype,
        "--unit",
        unit,
        "--channels",
        channels,
        "--batches",
        batches,
        "--sizes",
        table_sizes,
    ]
    check([*argv, "--json"] if as_json else argv)


@FUZZ
@given(shape=st.one_of(shapes(), TEXT), batch=COUNTS, dtype=DTYPES, as_json=st.booleans())
def test_estimate_shape_batch_dtype_fuzz(shape, batch, dtype, as_json):
    argv = ["estimate", "--shape", shape, "--batch", batch, "--dtype", dtype]
    code, out, _ = check([*argv, "--json"] if as_json else argv)
    if code == 0 and as_json:
        assert json.loads(out)["batch"]["inputs"]["input"]["shape"] == list(parse_shape(shape))


@FUZZ
@given(
    labels=st.one_of(st.sampled_from(["int", " int ", "INT", "10", "0", "-1", "2.5"]), COUNTS),
    label_dtype=st.one_of(st.none(), DTYPES),
)
def test_estimate_labels_fuzz(labels, label_dtype):
    argv = ["estimate", "--shape", "8x8", "--batch", "4", "--labels", labels, "--json"]
    check(argv if label_dtype is None else [*argv, "--label-dtype", label_dtype])


LOADER_OPTIONS = ["--workers", "--max-queue-size", "--num-workers", "--prefetch-factor", "--buffer"]


@FUZZ
@given(
    framework=st.one_of(st.sampled_from(["keras", "torch", "tfdata", "generator", "none"]), TEXT),
    options=st.lists(st.tuples(st.sampled_from(LOADER_OPTIONS), COUNTS), max_size=3),
    backend=st.one_of(st.none(), st.sampled_from(["tensorflow", "torch", "jax", "TORCH", ""]), TEXT),
    flags=st.lists(st.sampled_from(["--use-multiprocessing", "--pin-memory"]), max_size=2),
    factor=st.one_of(st.none(), NUMBERS),
)
def test_estimate_loader_settings_fuzz(framework, options, backend, flags, factor):
    argv = ["estimate", "--shape", "16x16x3", "--batch", "8", "--json", "--framework", framework, *flags]
    for flag, value in options:
        argv += [flag, value]
    if backend is not None:
        argv += ["--backend", backend]
    if factor is not None:
        argv += ["--transient-factor", factor]
    code, out, _ = check(argv)
    if code == 0:
        footprint = json.loads(out)["footprint"]
        assert footprint["batch_bytes"] <= footprint["total_bytes"] < BYTES_LIMIT


RAY_BYTE_OPTIONS = ["--object-store-memory", "--object-store-bytes", "--ram-bytes"]


@FUZZ
@given(
    sizes_given=st.lists(st.tuples(st.sampled_from(RAY_BYTE_OPTIONS), st.one_of(sizes(), TEXT)), max_size=2),
    counts=st.lists(st.tuples(st.sampled_from(["--prefetch-batches", "--concurrency"]), COUNTS), max_size=2),
    shape=st.sampled_from(["16x16x3", "1024x1024x3", "65536x65536"]),
)
@example(sizes_given=[("--object-store-memory", "24576")], counts=[], shape="16x16x3")  # a budget of one batch
def test_estimate_ray_fuzz(sizes_given, counts, shape):
    argv = ["estimate", "--shape", shape, "--batch", "8", "--json", "--framework", "ray"]
    for flag, value in [*sizes_given, *counts]:
        argv += [flag, value]
    code, out, _ = check(argv)
    if code == 0:
        footprint = json.loads(out)["footprint"]
        settings = footprint["settings"]
        batch = footprint["batch_bytes"]
        # the budget covers at least one batch; Ray's backpressure holds blocks up to half of it, and the
        # depth adds the tasks and the prefetched batches to them
        assert settings["object_store_memory"] >= batch
        assert footprint["depth"] == (
            settings["object_store_memory"] // (2 * batch) + settings["concurrency"] + settings["prefetch_batches"]
        )
        assert footprint["total_bytes"] == (footprint["depth"] + 1) * batch < BYTES_LIMIT


# tune: the options are parsed before the factory is looked for, so a parse that
# succeeds ends at the missing factory file, a parse that fails names the option.


def _tune_error(argv: list[str]) -> str:
    code, _out, err = check(["tune", MISSING_FACTORY, *argv])
    assert code == 2
    return err


@FUZZ
@given(budget=st.one_of(sizes(), TEXT))
def test_tune_budget_fuzz(budget):
    err = _tune_error(["--budget", budget])
    try:
        expected = parse_bytes(budget)
    except ValueError:
        expected = None
    if expected is None:
        assert "argument --budget" in err
    else:
        assert "no such file" in err
        assert 0 < expected < BYTES_LIMIT


@FUZZ
@given(
    tolerance=st.one_of(st.none(), NUMBERS),
    steps=st.one_of(st.none(), COUNTS),
    warmup=st.one_of(st.none(), COUNTS),
    rounds=st.one_of(st.none(), COUNTS),
    workers=st.one_of(st.none(), INT_LISTS),
    framework=st.one_of(st.none(), st.sampled_from(["keras", "torch", "tfdata", "python"]), TEXT),
)
def test_tune_options_fuzz(tolerance, steps, warmup, rounds, workers, framework):
    argv: list[str] = []
    for flag, value in [
        ("--tolerance", tolerance),
        ("--steps", steps),
        ("--warmup", warmup),
        ("--rounds", rounds),
        ("--workers", workers),
        ("--framework", framework),
    ]:
        if value is not None:
            argv += [flag, value]
    _tune_error(argv)


# budgets against an independent reading of the same text


@st.composite
def plain_sizes(draw) -> tuple[str, str, str]:
    """A size in the documented syntax: (text, number, unit)."""
    number = draw(st.integers(0, 10**6).map(str))
    fraction = draw(st.one_of(st.none(), st.text("0123456789", max_size=8)))
    if fraction is not None:
        number += "." + fraction
    unit = draw(st.sampled_from(list(UNITS)))
    text = number + draw(st.sampled_from(["", " "])) + _case(draw, unit)
    return text, number, unit


@FUZZ
@given(plain_sizes())
def test_parse_bytes_agrees_with_decimal_arithmetic(size):
    text, number, unit = size
    expected = int((Decimal(number) * UNITS[unit]).to_integral_value(rounding="ROUND_HALF_UP"))
    if expected <= 0:
        with pytest.raises(ValueError, match=r"rounds to zero|must be positive"):
            parse_bytes(text)
    else:
        assert parse_bytes(text) == expected


# report: paths and the contents of trace files


@FUZZ
@given(path=ANY_TEXT, as_json=st.booleans())
def test_report_path_fuzz(path, as_json):
    assume(path.strip() and not Path(path).exists() and not path.startswith("-"))
    code, _, err = check(["report", path, "--json"] if as_json else ["report", path])
    assert code == 2
    assert "cannot read trace" in err or "argument" in err


JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8,
)


@st.composite
def trace_records(draw) -> dict:
    """Version-1 traces with the right keys; in about half of them, values that may be wrong."""
    corrupt = draw(st.booleans())

    def maybe(good: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(good, JSON_VALUES) if corrupt else good

    number = maybe(st.one_of(st.floats(-10, 10), st.integers(-3, 3)))
    count = maybe(st.integers(0, 3))
    key = st.one_of(st.none(), st.integers(0, 5), st.lists(st.integers(0, 5), max_size=2))
    produced = draw(
        st.lists(
            st.fixed_dictionaries(
                {"start": number, "end": number, "nbytes": maybe(st.integers(0, 10**6))},
                optional={
                    "index": maybe(st.one_of(st.none(), st.integers(-1, 5))),
                    "key": maybe(key),
                    "worker": maybe(st.sampled_from(["", "123"])),
                    "extra": JSON_VALUES,
                },
            ),
            max_size=6,
        )
    )
    consumed = draw(
        st.lists(
            st.fixed_dictionaries(
                {"requested": number, "consumed": number},
                optional={
                    "run": count,
                    "epoch": count,
                    "nbytes": maybe(st.one_of(st.none(), st.integers(0, 10**6))),
                    "key": maybe(key),
                    "samples": maybe(st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=3))),
                },
            ),
            max_size=6,
        )
    )
    marks = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "t": number,
                    "kind": maybe(
                        st.sampled_from(
                            [
                                "run_begin",
                                "run_end",
                                "epoch_begin",
                                "epoch_end",
                                "error",
                                "pause_begin",
                                "pause_end",
                                "depth",
                            ]
                        )
                    ),
                },
                optional={"value": maybe(st.one_of(st.integers(0, 3), st.text(max_size=5)))},
            ),
            max_size=6,
        )
    )
    memory = draw(
        st.lists(
            st.fixed_dictionaries(
                {"t": number, "rss": maybe(st.integers(0, 10**9))},
                optional={"children": count, "n_children": count},
            ),
            max_size=2,
        )
    )
    meta = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "framework": st.sampled_from(["python", "keras", "torch"]),
                "depth": number,
                "num_batches": st.one_of(st.none(), count),
                "num_samples": st.one_of(st.none(), count),
                "match_scope": maybe(st.sampled_from(["run", "all"])),
                "pre_run_consumes": maybe(count),
                "settings": maybe(st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)),
            },
        )
    )
    record = {
        "format": "queuetune-trace",
        "version": 1,
        "meta": meta,
        "start": draw(number),
        "end": draw(number),
        "produced": produced,
        "consumed": consumed,
        "marks": marks,
        "memory": memory,
    }
    if corrupt:
        record["version"] = draw(st.sampled_from([1, 1, 1, 2, 0, "1", 1.0, None]))
        record["meta"] = draw(st.one_of(st.just(meta), JSON_VALUES))
        drop = draw(st.lists(st.sampled_from(sorted(record)), max_size=2))
        record = {k: v for k, v in record.items() if k not in drop}
    return record


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzzed-traces")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=trace_records(), as_json=st.booleans())
def test_report_trace_content_fuzz(trace_dir, record, as_json):
    from queuetune.record.trace import Trace

    path = trace_dir / "trace.json"
    path.write_text(json.dumps(record))
    code, _, err = check(["report", str(path), "--json"] if as_json else ["report", str(path)])
    try:
        Trace.from_dict(json.loads(path.read_text()))
    except ValueError:
        assert code == 2 and "versions 1 to 2" in err
    else:
        assert code == 0  # what loads, the report prints


# a mixed command line, as a user might type it


@FUZZ
@given(
    st.lists(
        st.one_of(
            TEXT,
            st.sampled_from(
                [
                    "table",
                    "estimate",
                    "report",
                    "tune",
                    "--json",
                    "--shape",
                    "--batch",
                    "--budget",
                    "--dtype",
                    "--unit",
                    "--labels",
                    "--framework",
                    "--workers",
                    "--tolerance",
                    "-h",
                    "--",
                    "-",
                    "--version=1",
                    "--json=1",
                ]
            ),
        ),
        max_size=6,
    )
)
def test_any_argv_fuzz(argv):
    assume(
        not any(arg in ("demo", "--plot", "--save") or arg.startswith("--p") or arg.startswith("--s") for arg in argv)
    )
    assume(not (argv and argv[0] == "tune" and len(argv) > 1 and ":" in argv[1]))
    code, out, err = run(argv)
    if code == 0 and out and not err:
        return  # --help, --version, or a command that worked
    check(argv)


# examples the fuzzers found, kept as regular tests

FOUND = [
    # before the fixes: an error line of 330 digits, of 5000 characters, or an int() limit message
    (["estimate", "--shape", "2", "--batch", "2", "--transient-factor", "1e308"], "about 2^"),
    (["estimate", "--shape", "2", "--batch", "9" * 5000], "too large"),
    (
        [
            "estimate",
            "--shape",
            "2",
            "--batch",
            "2",
            "--framework",
            "torch",
            "--num-workers",
            "9" * 3000,
            "--prefetch-factor",
            "9" * 3000,
        ],
        "too large",
    ),
    # before the fixes: "embedded null byte", naming neither the trace nor the path
    (["report", "bad\x00name.json"], "cannot read trace 'bad\\x00name.json'"),
    # before the fixes: int() took other scripts' digits and underscores, which shapes and sizes refuse
    (["estimate", "--shape", "2", "--batch", "\u0663"], "expected an integer"),
    (["estimate", "--shape", "2", "--batch", "1_000"], "expected an integer"),
    (["tune", MISSING_FACTORY, "--workers", "2,\uff14"], "expected an integer"),
    (["estimate", "--shape", "2", "--batch", "2", "--labels", "1_0"], "number of classes"),
    (["estimate", "--shape", "2", "--batch", "2", "--transient-factor", "\u0662"], "expected a number"),
    (["tune", MISSING_FACTORY, "--tolerance", "0.\u0661"], "expected a number"),
]


@pytest.mark.parametrize(("argv", "fragment"), FOUND, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else v)
def test_found_inputs_are_one_short_line(argv, fragment):
    code, _, err = check(argv)
    assert code == 2
    assert fragment in err


def test_deprecated_numpy_alias_prints_no_warning():
    # numpy warns that 'a' is deprecated; with warnings shown, that was a second line on stderr.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, _, err = check(["estimate", "--shape", "2", "--batch", "2", "--dtype", "a"])
    assert code == 2 and "unknown dtype 'a'" in err


def test_factory_with_a_syntax_error_is_one_line(tmp_path):
    factory = tmp_path / "broken.py"
    factory.write_text("def make(:\n    pass\n")
    code, _, err = check(["tune", f"{factory}:make"])
    assert code == 2
    assert "broken.py:make" in err and "line 1" in err


# the same property through a real process

SUBPROCESS_ARGV = [
    ["estimate", "--shape", "256\u00d7256\u00d73", "--batch", "64", "--json"],
    ["estimate", "--shape", "256\u2179256", "--batch", "64"],
    ["estimate", "--shape", "3x", "--batch", "64"],
    ["estimate", "--shape", "0x3", "--batch", "64"],
    ["estimate", "--shape", "99999999999x99999999999", "--batch", "64"],
    ["estimate", "--shape", "2", "--batch", "\u0663"],
    ["estimate", "--shape", "2", "--batch", "9" * 5000],
    ["estimate", "--shape", "2", "--batch", "4", "--dtype", "object"],
    ["estimate", "--shape", "2", "--batch", "4", "--dtype", "float128"],
    ["estimate", "--shape", "2", "--batch", "4", "--labels", "int", "--label-dtype", "V8"],
    ["estimate", "--shape", "2", "--batch", "2", "--transient-factor", "1e308"],
    ["table", "--unit", "\udcff"],
    ["tune", MISSING_FACTORY, "--budget", "nan"],
    ["tune", MISSING_FACTORY, "--budget", "-1"],
    ["tune", MISSING_FACTORY, "--budget", "1e30"],
    ["tune", MISSING_FACTORY, "--budget", ""],
    ["tune", MISSING_FACTORY, "--tolerance", "inf"],
    ["tune", MISSING_FACTORY, "--workers", "2,,4"],
    ["report", "no-such-trace.json"],
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv", SUBPROCESS_ARGV, ids=lambda argv: " ".join(argv).encode("ascii", "replace").decode())
def test_console_process_exit_codes(argv, tmp_path):
    # Arguments reach a process as bytes; a lone surrogate stands for an undecodable byte.
    args = [arg.encode("utf-8", "surrogateescape") for arg in argv]
    result = subprocess.run([sys.executable, "-m", "queuetune", *args], capture_output=True, cwd=tmp_path, timeout=100)
    err = result.stderr.decode("utf-8", "replace")
    if "--json" in argv and result.returncode == 0:
        assert json.loads(result.stdout)["batch"]["inputs"]["input"]["shape"] == [256, 256, 3]
        return
    assert result.returncode == 2, err
    assert result.stdout == b""
    assert len(err.splitlines()) == 1 and err.startswith(ERROR_PREFIX) and "Traceback" not in err, err


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "--shape", "3x", "--batch", "64"],
        ["tune", MISSING_FACTORY, "--budget", "1.5 parsec"],
        ["table", "--dtype", "object"],
    ],
)
def test_console_script_exit_codes(argv, tmp_path):
    script = Path(sys.executable).parent / "queuetune"
    result = subprocess.run([str(script), *argv], capture_output=True, text=True, cwd=tmp_path, timeout=100)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(ERROR_PREFIX)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=trace_records())
def test_trace_loads_or_fails_clearly_and_what_loads_analyses(record):
    from queuetune.analysis.report import analyze
    from queuetune.record.trace import Trace

    try:
        trace = Trace.from_dict(json.loads(json.dumps(record)))
    except ValueError as exc:
        assert "versions 1 to 2" in str(exc)
        return
    report = analyze(trace)
    assert report.produced_batches == len(trace.produced)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "argv", [["table"], ["estimate", "--shape", "224x224x3", "--batch", "64"], ["table", "--json"]]
)
def test_a_reader_that_goes_away_ends_the_command_quietly(argv, tmp_path):
    """``queuetune table | head -1``: no error line, no traceback, the command's own code."""
    code, err = queuetune_process(argv, tmp_path, close_stdout=True)
    assert code == 0, err
    assert err == ""
    assert_nothing_left_running()
