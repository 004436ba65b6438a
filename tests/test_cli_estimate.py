"""The command line: `queuetune table`, `queuetune estimate`, and how every error is reported."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from helpers import ARTICLE_ROWS, FOOTPRINT_KEYS
from queuetune import __version__
from queuetune.cli import Command, build_parser, commands, main

MiB = 2**20
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run(argv: list[str]) -> tuple[int, str, str]:
    """Run ``main`` in-process; return (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1 and len(err.splitlines()) == 1
    assert err.startswith("queuetune: error: ")
    return err


def cells(line: str) -> list[str]:
    """A table row's cells, between rich's vertical rules (``│``, ``┃`` in the header)."""
    return [cell.strip() for cell in line.replace("┃", "│").strip().strip("│").split("│")]


def table_rows(out: str) -> list[list[str]]:
    return [cells(line) for line in out.splitlines() if line.lstrip().startswith("│") and cells(line)[0].isdigit()]


# table


def test_table_prints_the_article_exactly(capsys):
    assert main(["table"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert table_rows(captured.out) == ARTICLE_ROWS
    header = next(line for line in captured.out.splitlines() if "batch" in line and "┃" in line)
    assert cells(header) == [
        "batch",
        "32x32",
        "64x64",
        "128x128",
        "256x256",
        "512x512",
        "1024x1024",
    ]


def test_table_json_schema(capsys):
    assert main(["table", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"unit", "dtype", "channels", "batches", "sizes", "values"}
    assert data["unit"] == "GiB" and data["dtype"] == "float32" and data["channels"] == 3
    assert data["batches"] == [2**k for k in range(5, 17)]
    assert data["sizes"] == [32, 64, 128, 256, 512, 1024]
    assert data["values"][0][0] == 0.0003662109375
    assert data["values"][5][5] == 12
    assert data["values"][-1][-1] == 768
    for batch, row in zip(data["batches"], data["values"]):
        assert row == [size * size * 3 * batch * 4 / 2**30 for size in data["sizes"]]


def test_table_options(capsys):
    argv = [
        "table",
        "--json",
        "--dtype",
        "uint8",
        "--channels",
        "1",
        "--batches",
        "1,2",
        "--sizes",
        "10",
        "--unit",
        "b",
    ]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {
        "unit": "B",
        "dtype": "uint8",
        "channels": 1,
        "batches": [1, 2],
        "sizes": [10],
        "values": [[100.0], [200.0]],
    }


@pytest.mark.plot
def test_table_plot_writes_a_png(tmp_path, capsys):
    path = tmp_path / "table.png"
    assert main(["table", "--plot", str(path)]) == 0
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    captured = capsys.readouterr()
    assert table_rows(captured.out) == ARTICLE_ROWS
    assert "table.png" in captured.out


@pytest.mark.plot
def test_table_plot_with_json_keeps_stdout_json(tmp_path, capsys):
    path = tmp_path / "small.png"
    assert main(["table", "--json", "--batches", "1", "--sizes", "1", "--plot", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["values"] == [[3 * 4 / 2**30]]
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def test_table_plot_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    code = main(["table", "--plot", str(tmp_path / "x.png")])
    captured = capsys.readouterr()
    err = assert_one_line_error(code, captured.out, captured.err)
    assert "pip install 'queuetune[plot]'" in err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.plot
def test_table_plot_into_a_missing_directory(tmp_path, capsys):
    target = tmp_path / "missing" / "x.png"
    code = main(["table", "--plot", str(target)])
    captured = capsys.readouterr()
    err = assert_one_line_error(code, captured.out, captured.err)
    assert err == f"queuetune: error: {target}: No such file or directory\n"


# estimate


def test_estimate_just_the_batch(capsys):
    assert main(["estimate", "--shape", "256x256x3", "--batch", "64"]) == 0
    out = capsys.readouterr().out
    assert "50,331,648" in out and "48.0 MiB" in out
    assert "footprint" not in out


def test_estimate_json_without_framework(capsys):
    assert main(["estimate", "--shape", "256x256x3", "--batch", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"batch", "footprint"}
    assert data["footprint"] is None
    assert data["batch"]["nbytes"] == 48 * MiB
    assert data["batch"]["batch_size"] == 64
    assert data["batch"]["inputs"] == {"input": {"shape": [256, 256, 3], "dtype": "float32"}}
    assert data["batch"]["labels"] is None
    assert data["batch"]["lines"] == [
        {"name": "input", "shape": [64, 256, 256, 3], "dtype": "float32", "bytes": 48 * MiB}
    ]


def estimate_json(*extra: str) -> dict:
    code, out, err = run(["estimate", "--shape", "128x128x3", "--batch", "64", "--json", *extra])
    assert (code, err) == (0, "")
    return json.loads(out)


def test_estimate_json_schema_with_framework():
    data = estimate_json("--framework", "keras", "--workers", "4", "--max-queue-size", "10")
    fp = data["footprint"]
    assert set(fp) == FOOTPRINT_KEYS
    assert fp["framework"] == "keras"
    assert fp["settings"] == {"workers": 4, "use_multiprocessing": False, "max_queue_size": 10}
    assert fp["batch_bytes"] == 12 * MiB
    assert fp["depth"] == 11
    assert fp["batches_bytes"] == 12 * 12 * MiB
    for line in fp["lines"]:
        assert set(line) == {"label", "batches", "bytes", "explanation"}
    assert [(line["label"], line["batches"]) for line in fp["lines"]] == [("queued", 11), ("consumed", 1)]


@pytest.mark.parametrize(
    ("extra", "depth", "total_batches"),
    [
        (["--framework", "keras", "--workers", "4"], 11, 12),
        (["--framework", "keras", "--workers", "4", "--max-queue-size", "2"], 3, 4),
        (["--framework", "keras", "--workers", "1"], 0, 1),
        (["--framework", "keras"], 0, 1),
        (["--framework", "keras", "--workers", "1", "--use-multiprocessing"], 11, 12),
        (["--framework", "torch", "--num-workers", "4", "--prefetch-factor", "2"], 8, 9),
        (["--framework", "torch", "--num-workers", "4", "--pin-memory"], 8, 17),
        (["--framework", "torch"], 0, 1),
        # tf.data's prefetch builds only into room in its buffer: depth = buffer
        (["--framework", "tfdata", "--buffer", "8"], 8, 9),
        (["--framework", "tfdata"], 1, 2),
        (["--framework", "generator"], 1, 2),
        (["--framework", "generator", "--backend", "torch"], 0, 1),
        (["--framework", "none"], 0, 1),
        (["--framework", "keras", "--workers", "4", "--transient-factor", "2"], 11, 13),
        (["--transient-factor", "2"], 0, 2),
        # 512 MiB // (2 x 12 MiB) = 21 held, 2 being built, 1 prefetched; then the consumed batch
        (["--framework", "ray", "--concurrency", "2", "--object-store-memory", "512MiB"], 24, 25),
        (
            ["--framework", "ray", "--concurrency", "1", "--prefetch-batches", "4", "--object-store-memory", "120MiB"],
            10,
            11,
        ),
        (["--framework", "ray", "--concurrency", "2", "--object-store-bytes", "1GiB"], 24, 25),
        # 30% of 8 GiB = 2576980377 B of store, half of it the budget: 51 blocks held
        (["--framework", "ray", "--concurrency", "2", "--prefetch-batches", "0", "--ram-bytes", "8GiB"], 53, 54),
    ],
)
def test_estimate_depths(extra, depth, total_batches):
    fp = estimate_json(*extra)["footprint"]
    assert fp["depth"] == depth
    assert fp["total_batches"] == total_batches
    assert fp["batches_bytes"] == total_batches * 12 * MiB


def test_estimate_labels():
    data = estimate_json("--labels", "10")
    assert data["batch"]["labels"] == {"shape": [10], "dtype": "float32"}
    assert data["batch"]["nbytes"] == 12 * MiB + 64 * 10 * 4
    data = estimate_json("--labels", "int")
    assert data["batch"]["labels"] == {"shape": [], "dtype": "int64"}
    assert data["batch"]["nbytes"] == 12 * MiB + 64 * 8
    data = estimate_json("--labels", "int", "--label-dtype", "int32")
    assert data["batch"]["nbytes"] == 12 * MiB + 64 * 4


def test_estimate_dtype():
    assert estimate_json("--dtype", "uint8")["batch"]["nbytes"] == 3 * MiB
    assert estimate_json("--dtype", "bfloat16")["batch"]["nbytes"] == 6 * MiB


def test_estimate_console_breakdown(capsys):
    argv = [
        "estimate",
        "--shape",
        "128x128x3",
        "--batch",
        "64",
        "--labels",
        "10",
        "--framework",
        "torch",
        "--num-workers",
        "4",
        "--pin-memory",
        "--transient-factor",
        "2",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for label in ("input", "labels", "prefetched", "pinned copies", "consumed", "transient", "worker processes"):
        assert label in out
    batch = 12 * MiB + 64 * 10 * 4
    # 18 batches, and the 4 worker processes' own memory (16 MiB each, a typical figure).
    total_line = [line for line in out.splitlines() if "total" in line][-1]
    assert f"{18 * batch + 4 * 16 * MiB:,}" in total_line and " 18 " in total_line


def test_estimate_ray_json_schema():
    fp = estimate_json("--framework", "ray", "--concurrency", "2", "--ram-bytes", "16GiB")["footprint"]
    assert set(fp) == FOOTPRINT_KEYS
    store = int(16 * 2**30 * 3 / 10)
    assert fp["settings"] == {
        "prefetch_batches": 1,
        "concurrency": 2,
        "object_store_memory": store // 2,
        "object_store_bytes": store,
        "ram_bytes": 16 * 2**30,
    }
    assert [(line["label"], line["batches"]) for line in fp["lines"]] == [
        ("held ahead", (store // 2) // (2 * 12 * MiB)),
        ("being built", 2),
        ("prefetched", 1),
        ("consumed", 1),
    ]
    assert fp["depth"] == 102 + 2 + 1
    assert fp["batches_bytes"] == (102 + 2 + 1 + 1) * 12 * MiB
    for line in fp["lines"]:
        assert set(line) == {"label", "batches", "bytes", "explanation"}


def test_estimate_ray_default_concurrency_is_this_machines_cpus():
    from queuetune.common import cores

    fp = estimate_json("--framework", "ray", "--object-store-memory", "2GiB")["footprint"]
    assert fp["settings"]["concurrency"] == cores.available()
    assert fp["settings"]["prefetch_batches"] == 1
    assert fp["depth"] == 85 + cores.available() + 1


def test_estimate_ray_console(capsys):
    argv = [
        "estimate",
        "--shape",
        "128x128x3",
        "--batch",
        "64",
        "--framework",
        "ray",
        "--concurrency",
        "2",
        "--object-store-memory",
        "2GiB",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for label in ("held ahead", "being built", "prefetched", "consumed", "total"):
        assert label in out
    total_line = [line for line in out.splitlines() if "total" in line][-1]
    assert f"{89 * 12 * MiB:,}" in total_line and " 89 " in total_line  # 85 held, 2 built, 1 prefetched, 1


# errors: one line on stderr, exit code 2, never a traceback

# fmt: off
BAD_ARGV = [
    [],
    ["frobnicate"],
    ["table", "--unit", "parsec"],
    ["table", "--dtype", "float7"],
    ["table", "--channels", "0"],
    ["table", "--channels", "-3"],
    ["table", "--channels", "2.5"],
    ["table", "--channels", "True"],
    ["table", "--batches", "32,,64"],
    ["table", "--batches", "0"],
    ["table", "--batches", "abc"],
    ["table", "--sizes", "-1"],
    ["table", "--sizes", "1e3"],
    ["table", "--batches", "99999999999999", "--sizes", "999999999"],
    ["table", "--no-such-option"],
    ["table", "extra"],
    ["estimate"],
    ["estimate", "--shape", "256x256x3"],
    ["estimate", "--batch", "64"],
    ["estimate", "--shape", "256xx3", "--batch", "64"],
    ["estimate", "--shape", "", "--batch", "64"],
    ["estimate", "--shape", "256x0x3", "--batch", "64"],
    ["estimate", "--shape", "256x256x3", "--batch", "0"],
    ["estimate", "--shape", "256x256x3", "--batch", "-64"],
    ["estimate", "--shape", "256x256x3", "--batch", "6.4"],
    ["estimate", "--shape", "256x256x3", "--batch", "many"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--dtype", "float7"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--labels", "0"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--labels", "ten"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--labels", "10", "--label-dtype", "x"],
    ["estimate", "--shape", "65536x65536x65536", "--batch", "65536"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "mxnet"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "keras", "--workers", "-1"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "keras", "--max-queue-size", "0"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "keras", "--num-workers", "2"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "torch", "--prefetch-factor", "2"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "torch", "--num-workers", "2",
     "--prefetch-factor", "0"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "torch", "--use-multiprocessing"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "tfdata", "--buffer", "-1"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "generator", "--backend", "mxnet"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--workers", "4"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--transient-factor", "0.5"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--transient-factor", "nan"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--transient-factor", "inf"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--transient-factor", "two"],
    ["estimate", "--shape", "256x256x3", "--batch", "2305843009213693952", "--framework", "keras", "--workers", "2"],
    ["estimate", "--shape", "a\nb", "--batch", "1"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray", "--object-store-memory", "0"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray", "--object-store-memory", "-1GiB"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray", "--object-store-memory", "2 parsecs"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray", "--object-store-memory", "8MiB"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray", "--object-store-memory", "1GiB",
     "--ram-bytes", "16GiB"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray", "--object-store-memory", "1GiB",
     "--concurrency", "0"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray", "--object-store-memory", "1GiB",
     "--prefetch-batches", "-1"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray", "--object-store-memory", "1GiB",
     "--num-workers", "2"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "torch", "--object-store-memory", "1GiB"],
    ["estimate", "--shape", "256x256x3", "--batch", "64", "--object-store-memory", "1GiB"],
    ["table", "--unit", "G\u2028iB"],
    ["table", "x\ny"],
]
# fmt: on


@pytest.mark.parametrize("argv", BAD_ARGV, ids=lambda argv: " ".join(argv) or "(nothing)")
def test_bad_input_is_one_line_and_exit_2(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    assert_one_line_error(code, captured.out, captured.err)


# argv, and what its one-line error must name
# fmt: off
ERROR_CASES = [
    (["estimate", "--shape", "256xx3", "--batch", "64"], "malformed shape '256xx3'"),
    (["table", "--unit", "parsec"], "parsec"),
    (["table", "--dtype", "float7"], "float7"),
    (["estimate", "--shape", "2x2", "--batch", "64", "--framework", "mxnet"], "mxnet"),
    (["estimate", "--shape", "2x2", "--batch", "0"], "--batch"),
    (["estimate", "--shape", "2x2", "--batch", "1", "--framework", "torch", "--prefetch-factor", "2"],
     "prefetch_factor"),
    (["estimate", "--shape", "65536x65536x65536", "--batch", "65536"], "exceeds 2^63 bytes"),
    (["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray"], "ray needs the object store"),
    (["estimate", "--shape", "256x256x3", "--batch", "64", "--framework", "ray", "--object-store-memory", "8MiB"],
     "smaller than one batch"),
    (["estimate", "--shape", "2", "--batch", "1", "--framework", "ray", "--object-store-memory", "0"],
     "--object-store-memory"),
    (["estimate", "--shape", "2", "--batch", "1", "--framework", "ray", "--ram-bytes", "1GiB",
      "--object-store-bytes", "1GiB"], "not object_store_bytes and ram_bytes"),
    (["estimate", "--shape", "2", "--batch", "1", "--framework", "ray", "--ram-bytes", "1GiB",
      "--concurrency", "-2"], "--concurrency"),
    (["estimate", "--shape", "2", "--batch", "1", "--framework", "keras", "--ram-bytes", "1GiB"],
     "'ram_bytes' does not apply to framework 'keras'"),
]
# fmt: on


@pytest.mark.parametrize(("argv", "fragment"), ERROR_CASES)
def test_error_messages_name_the_problem(argv, fragment, capsys):
    main(argv)
    assert fragment in capsys.readouterr().err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"queuetune {__version__}"


def test_help_exits_zero(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "table" in out and "estimate" in out
    assert main(["estimate", "--help"]) == 0
    assert "--max-queue-size" in capsys.readouterr().out


def test_parser_is_built_from_the_command_list(monkeypatch, capsys):
    def configure(parser):
        parser.add_argument("--n", type=int, default=1)

    def run_extra(args):
        print(f"extra {args.n}")
        return 0

    extra = Command("extra", "an added command", configure, run_extra)
    monkeypatch.setattr(commands, "COMMANDS", [*commands.COMMANDS, extra])
    assert main(["extra", "--n", "3"]) == 0
    assert capsys.readouterr().out == "extra 3\n"
    assert build_parser().parse_args(["table"]).command == "table"


def console_script() -> Path:
    script = Path(sys.executable).parent / "queuetune"
    assert script.exists(), f"the console script is not installed at {script}; run `pip install -e .`"
    return script


def test_console_script_exit_codes():
    script = str(console_script())
    bad = subprocess.run([script, "estimate", "--shape", "256xx3", "--batch", "64"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.splitlines() == ["queuetune: error: malformed shape '256xx3': dimension 2 is empty"]
    usage = subprocess.run([script, "table", "--bogus"], capture_output=True, text=True)
    assert usage.returncode == 2
    assert len(usage.stderr.splitlines()) == 1 and "Traceback" not in usage.stderr
    good = subprocess.run([script, "table"], capture_output=True, text=True)
    assert good.returncode == 0
    assert table_rows(good.stdout) == ARTICLE_ROWS


# fuzzing the command line: every input either works (exit 0) or is one error line (exit 2)

_VALUES = st.one_of(
    st.sampled_from(
        [
            "0",
            "1",
            "2",
            "4",
            "10",
            "-1",
            "2.5",
            "nan",
            "inf",
            "int",
            "",
            "256x256x3",
            "256xx3",
            "3x3",
            "float32",
            "bfloat16",
            "f4",
            "float7",
            "GiB",
            "gb",
            "parsec",
            "keras",
            "torch",
            "tfdata",
            "generator",
            "none",
            "jax",
            "32,64",
            "1,,2",
            "99999999999999999999",
            "2305843009213693952",
            "65536x65536x65536",
        ]
    ),
    st.text(max_size=12),
)
_TABLE_OPTIONS = ["--dtype", "--channels", "--batches", "--sizes", "--unit"]
_ESTIMATE_OPTIONS = [
    "--shape",
    "--batch",
    "--dtype",
    "--labels",
    "--label-dtype",
    "--framework",
    "--workers",
    "--max-queue-size",
    "--num-workers",
    "--prefetch-factor",
    "--buffer",
    "--backend",
    "--transient-factor",
]
_FLAGS = ["--json", "--use-multiprocessing", "--pin-memory"]


@st.composite
def argvs(draw) -> list[str]:
    command = draw(st.sampled_from(["table", "estimate", "estimate", "other"]))
    argv = [] if command == "other" else [command]
    options = _TABLE_OPTIONS if command == "table" else _ESTIMATE_OPTIONS
    if command == "estimate" and draw(st.booleans()):
        argv += ["--shape", draw(_VALUES), "--batch", draw(_VALUES)]
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        kind = draw(st.integers(min_value=0, max_value=9))
        if kind == 0:
            argv.append(draw(st.sampled_from(_FLAGS)))
        elif kind == 1:
            argv.append(draw(st.text(max_size=8)))
        else:
            argv += [draw(st.sampled_from(options)), draw(_VALUES)]
    return argv


@settings(max_examples=300, deadline=None)
@given(argvs())
def test_cli_fuzz(argv):
    assume("--plot" not in argv)  # never write files from a fuzzer
    code, out, err = run(argv)
    assert code in (0, 2)
    if code == 2:
        assert_one_line_error(code, out, err)
    else:
        assert err == ""
