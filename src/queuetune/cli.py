"""The ``queuetune`` command line: parses arguments and wires them to the library."""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from queuetune import __version__
from queuetune.common.jsonio import dumps
from queuetune.common.units import _shown, nonnegative_int, parse_bytes, positive_int, unit_factor
from queuetune.estimate.memory import ARTICLE_BATCHES, ARTICLE_SIZES, FRAMEWORKS, BatchSpec, footprint, seed_table
from queuetune.frameworks import ESTIMATED, TUNED, get
from queuetune.frameworks.base import Setting
from queuetune.record.trace import Trace

if TYPE_CHECKING:
    from queuetune.run.result import ProgramResult
    from queuetune.tune.headline import Headline
    from queuetune.tune.recommend import Recommendation

__all__ = ["COMMANDS", "Command", "build_parser", "main"]

PROG = "queuetune"
USAGE_ERROR = 2
# The exit code of a command stopped by Ctrl-C: 128 + SIGINT.
INTERRUPTED = 130


class UsageError(ValueError):
    """A command line argparse rejected."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Abbreviations would change meaning as subcommands gain options.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


@dataclass(frozen=True)
class Command:
    """A subcommand: ``configure`` adds its arguments, ``run`` does the work and returns the exit code."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# Argument types: argparse turns ArgumentTypeError into "argument --x: <message>".


def _arg(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return convert(text)
        except (ValueError, TypeError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = convert.__name__
    return parse


_INT_RE = re.compile(r"[+-]?[0-9]+")


def _int(text: str) -> int:
    # ASCII digits only, as in shapes and byte sizes: int() would also take "1_000" and "\u0663".
    stripped = text.strip()
    if not _INT_RE.fullmatch(stripped):
        raise ValueError(f"expected an integer, got {_shown(text)}")
    if len(stripped.lstrip("+-").lstrip("0")) > 19 or abs(int(stripped)) >= 2**63:
        raise ValueError(f"integer {_shown(text)} is too large (2^63 or more)")
    return int(stripped, 10)


def _positive(what: str) -> Callable[[str], int]:
    return _arg(lambda text: positive_int(_int(text), what))


def _nonnegative(what: str) -> Callable[[str], int]:
    return _arg(lambda text: nonnegative_int(_int(text), what))


def _int_list(what: str) -> Callable[[str], list[int]]:
    def parse(text: str) -> list[int]:
        parts = text.split(",")
        return [positive_int(_int(part), what) for part in parts]

    return _arg(parse)


def _float(text: str) -> float:
    try:
        if not text.isascii():
            raise ValueError
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {_shown(text)}") from None


def _labels(text: str) -> int | str:
    if text.strip() == "int":
        return "int"
    try:
        classes = _int(text)
    except ValueError:
        raise ValueError(f"expected a number of classes or 'int', got {_shown(text)}") from None
    return positive_int(classes, "number of classes")


def _unit(text: str) -> str:
    return unit_factor(text)[0]


# table


def _configure_table(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", default="float32", help="element dtype (default: float32)")
    parser.add_argument("--channels", type=_positive("channels"), default=3, help="channels (default: 3)")
    parser.add_argument(
        "--batches",
        type=_int_list("batch size"),
        default=list(ARTICLE_BATCHES),
        help="comma-separated batch sizes (default: 32,64,...,65536)",
    )
    parser.add_argument(
        "--sizes",
        type=_int_list("image size"),
        default=list(ARTICLE_SIZES),
        help="comma-separated square image sizes (default: 32,64,...,1024)",
    )
    parser.add_argument("--unit", type=_arg(_unit), default="GiB", help="B, KiB, MiB, GiB, GB, ... (default: GiB)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the table as a heatmap into FILE.png")


def _run_table(args: argparse.Namespace) -> int:
    from queuetune.render.text import seed_table_view
    from queuetune.terminal import print_renderable

    table = seed_table(args.batches, args.sizes, args.channels, args.dtype, args.unit)
    if args.plot:
        from queuetune.render.plot import plot_table

        plot_table(table).savefig(os.fspath(args.plot))
    if args.json:
        print(json.dumps(table))
    else:
        print_renderable(seed_table_view(table))
        if args.plot:
            print(f"plot written to {args.plot!r}")
    return 0


# estimate


def _setting_flags() -> list[tuple[Setting, str]]:
    """Each setting the frameworks' estimates take, once (valued ones first, then
    flags), with the help text that names the frameworks that have it."""
    found: dict[str, tuple[Setting, list[str]]] = {}
    for name in ESTIMATED:
        for setting in get(name).settings or ():
            found.setdefault(setting.name, (setting, []))[1].append(name)
    ordered = sorted(found.values(), key=lambda entry: entry[0].kind == "flag")
    return [(setting, f"{'/'.join(names)}: {setting.help}".replace("%", "%%")) for setting, names in ordered]


def _setting_type(setting: Setting) -> Callable[[str], Any]:
    kinds: dict[str, Callable[[str], Any]] = {
        "count": _nonnegative(setting.name),
        "positive": _positive(setting.name),
        "bytes": _arg(parse_bytes),
        "text": str,
    }
    return kinds[setting.kind]


def _configure_estimate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", required=True, help="per-sample shape, e.g. 256x256x3")
    parser.add_argument("--batch", type=_positive("batch size"), required=True, help="batch size")
    parser.add_argument("--dtype", default="float32", help="input dtype (default: float32)")
    parser.add_argument("--labels", type=_arg(_labels), help="one-hot over N classes, or 'int' for integer labels")
    parser.add_argument("--label-dtype", help="label dtype (default: float32 one-hot, int64 integer)")
    parser.add_argument("--framework", choices=list(FRAMEWORKS), help="loader whose read-ahead to count")
    loader = parser.add_argument_group("loader settings (defaults are the framework's own)")
    for setting, text in _setting_flags():
        if setting.kind == "flag":
            loader.add_argument(setting.flag, dest=setting.name, action="store_true", default=None, help=text)
        else:
            loader.add_argument(setting.flag, dest=setting.name, type=_setting_type(setting), help=text)
    parser.add_argument(
        "--transient-factor",
        type=_arg(_float),
        default=None,
        help="multiply the consumed batch for transient copies (the article suggests 2)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _run_estimate(args: argparse.Namespace) -> int:
    from queuetune.render.text import batch_table, footprint_table
    from queuetune.terminal import print_renderable

    spec = BatchSpec.single(args.shape, args.batch, args.dtype, labels=args.labels, label_dtype=args.label_dtype)
    names = [setting.name for setting, _ in _setting_flags()]
    settings = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if settings and args.framework is None:
        flags = ", ".join("--" + name.replace("_", "-") for name in settings)
        raise UsageError(f"{flags} need(s) --framework")
    fp = None
    if args.framework is not None or args.transient_factor is not None:
        factor = 1.0 if args.transient_factor is None else args.transient_factor
        fp = footprint(spec, args.framework or "none", transient_factor=factor, **settings)
    if args.json:
        print(json.dumps({"batch": spec.to_dict(), "footprint": None if fp is None else fp.to_dict()}))
        return 0
    print_renderable(batch_table(spec))
    if fp is not None:
        print_renderable(footprint_table(fp))
    return 0


# demo


def _configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=_positive("steps"), default=10, help="predict(steps=...) (default 10)")
    parser.add_argument(
        "--batch-size", type=_positive("batch size"), default=128, help="samples per batch (default 128)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _run_demo(args: argparse.Namespace) -> int:
    from queuetune.demo import run_demo
    from queuetune.terminal import demo_status, print_demo

    with demo_status() as progress:
        result = run_demo(steps=args.steps, batch_size=args.batch_size, progress=progress)
    if args.json:
        print(dumps(result.to_dict()))
    else:
        print_demo(result)
    return 0


# report


def _configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "trace",
        nargs="+",
        help="traces saved with Trace.save() or by queuetune run (JSON), or folders of them "
        "(a torchrun job's ranks are merged)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON (a list for several)")
    parser.add_argument("--plot", metavar="FILE.png", help="draw batches and bytes in flight over time (one trace)")
    parser.add_argument("--html", metavar="FILE.html", help="write one self-contained HTML report of every trace")
    parser.add_argument(
        "--format",
        choices=("text", "json", "perfetto"),
        default="text",
        help="text (default), json (as --json), or perfetto: Chrome trace-event JSON for ui.perfetto.dev",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write the --format output here instead of stdout")


def _load_trace(path: str | Path) -> Trace:
    """The trace at ``path``; a ValueError naming the file when it is not one."""
    try:
        return Trace.load(path)
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if os.fspath(path) in message else f"{os.fspath(path)}: {message}") from None


def _run_report(args: argparse.Namespace) -> int:
    from queuetune.analysis.ranks import analyze_ranks, check_one_launch, ranked
    from queuetune.analysis.report import analyze
    from queuetune.terminal import print_report
    from queuetune.tune.headline import advise

    if args.plot and len(args.trace) > 1:
        raise UsageError("--plot draws one trace; give one, or use --html")
    if args.output and not (args.json or args.format != "text"):
        raise UsageError("--output needs --format json or --format perfetto")
    paths = _trace_files(args.trace)
    traces = [_load_trace(path) for path in paths]
    reports = [analyze(trace) for trace in traces]
    advice = [advise(trace, report) for trace, report in zip(traces, reports)]
    merged = None
    if ranked(traces):
        check_one_launch(traces, paths)
        merged = analyze_ranks(traces, reports)
    if args.plot:
        from queuetune.render.plot import plot_in_flight

        plot_in_flight(reports[0]).savefig(os.fspath(args.plot))
    if args.html:
        from queuetune.render.html import Section, html_report

        sections = [
            Section(_label(trace, path), trace, report, recommendation.text(), line.text())
            for path, trace, report, (recommendation, line) in zip(paths, traces, reports, advice)
        ]
        Path(args.html).write_text(html_report(sections, ranks=merged), encoding="utf-8")
    form = "json" if args.json else args.format
    if form == "perfetto":
        from queuetune.render.perfetto import chrome_trace

        labels = [_label(trace, path) for path, trace in zip(paths, traces)]
        _emit(dumps(chrome_trace(list(zip(labels, traces, reports))), indent=None), args.output)
    elif form == "json" and merged is not None:
        data = merged.to_dict()
        data["reports"] = [_advised(report.to_dict(series=False), *told) for report, told in zip(reports, advice)]
        _emit(dumps(data), args.output)
    elif form == "json":
        texts = [dumps(_advised(report.to_dict(), *told)) for report, told in zip(reports, advice)]
        _emit(texts[0] if len(texts) == 1 else "[" + ",\n".join(texts) + "]", args.output)
    else:
        for report, (_, line) in zip(reports, advice):
            print_report(report, headline=line)
        if merged is not None:
            from queuetune.terminal import print_ranks

            print_ranks(merged)
        if args.plot:
            print(f"plot written to {args.plot}")
        if args.html:
            print(f"HTML report written to {args.html}")
    return 0


def _advised(data: dict[str, Any], recommendation: Recommendation, line: Headline) -> dict[str, Any]:
    """A report's JSON with its headline and recommendation beside it."""
    return {"headline": line.to_dict(), **data, "recommendation": recommendation.to_dict()}


def _trace_files(arguments: list[str]) -> list[str]:
    """The traces named, a folder standing for the ``*.json`` files in it (but
    the summaries ``queuetune run`` writes beside its traces)."""
    from queuetune.program import SUMMARY

    paths: list[str] = []
    for argument in arguments:
        if os.path.isdir(argument):
            found = sorted(str(p) for p in Path(argument).glob("*.json") if not p.name.startswith(SUMMARY + "."))
            if not found:
                raise UsageError(f"no traces (*.json) in {argument}")
            paths.extend(found)
        else:
            paths.append(argument)
    return paths


def _label(trace: Any, path: str) -> str:
    name = trace.meta.name or path
    return name if trace.meta.rank is None else f"rank {trace.meta.rank}: {name}"


def _together(contexts: list[Callable[[Any], Any]]) -> Callable[[Any], Any] | None:
    """One context that enters each of ``contexts(session)`` in turn."""
    if not contexts:
        return None

    def enter(session: Any) -> Any:
        from contextlib import ExitStack

        stack = ExitStack()
        with stack:
            for make in contexts:
                stack.enter_context(make(session))
            return stack.pop_all()

    return enter


def _emit(text: str, path: str | None) -> None:
    if path is None:
        print(text)
    else:
        with open(path, "w", encoding="utf-8") as file:
            file.write(text + "\n")


# tune


def _configure_tune(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("factory", metavar="FILE.py:FACTORY", help="a function that builds the loader and its consumer")
    parser.add_argument(
        "--framework",
        choices=list(TUNED),
        help="fail unless the loader is of this framework",
    )
    parser.add_argument("--budget", type=_arg(parse_bytes), help="most bytes in flight, e.g. 2GiB")
    parser.add_argument(
        "--tolerance", type=_arg(_fraction), default=0.02, help="throughput that may be given up (default 0.02)"
    )
    parser.add_argument("--steps", type=_positive("steps"), default=100, help="batches per trial (default 100)")
    parser.add_argument(
        "--warmup",
        type=_nonnegative("warmup"),
        default=10,
        help="batches left out of each trial's throughput (default 10)",
    )
    parser.add_argument(
        "--rounds", type=_positive("rounds"), default=3, help="trials of each setting, interleaved (default 3)"
    )
    parser.add_argument(
        "--workers",
        type=_int_list("workers"),
        help="worker counts to consider, e.g. 2,4 (default: the loader's and 1, 2, 4, ... up to the cores)",
    )
    parser.add_argument(
        "--sure",
        type=_arg(_fraction),
        default=0.9,
        help="how sure the trials must be that a setting keeps throughput (default 0.9)",
    )
    parser.add_argument(
        "--max-trials",
        type=_positive("max trials"),
        help="trials in all, the settings measured again included (default: twice the rounds' trials)",
    )
    parser.add_argument("--plot", metavar="FILE.png", help="draw throughput and in-flight memory against depth")
    parser.add_argument("--save", metavar="RESULT.json", help="save the result as JSON")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _fraction(text: str) -> float:
    value = _float(text)
    if not 0 <= value < 1:
        raise ValueError(f"expected a number from 0 up to 1, got {_shown(text)}")
    return value


def _run_tune(args: argparse.Namespace) -> int:
    from queuetune.render.explain import explain
    from queuetune.terminal import print_tune, tune_progress
    from queuetune.tune import as_job, framework_of, load_factory, tune

    if args.warmup >= args.steps:
        raise UsageError(f"argument --warmup: must be less than --steps ({args.steps}), got {args.warmup}")
    try:
        factory = _guarded(args.factory, load_factory(args.factory))
    except SyntaxError as exc:
        raise ValueError(f"cannot import {args.factory}: {exc.msg} (line {exc.lineno})") from None
    except (ValueError, TypeError):
        raise
    except Exception as exc:  # the file's own code, run as it is imported
        raise FactoryFailed(args.factory.rpartition(":")[0], exc) from None
    if args.framework is not None:
        found = framework_of(as_job(factory()).loader).name
        if found != args.framework:
            raise ValueError(f"{args.factory} builds a {found} loader, not {args.framework}")
    with tune_progress() as progress:
        result = tune(
            factory,
            steps=args.steps,
            warmup=args.warmup,
            rounds=args.rounds,
            tolerance=args.tolerance,
            budget=args.budget,
            workers=args.workers,
            progress=progress,
            sure=args.sure,
            max_trials=args.max_trials,
        )
    text = dumps({**result.to_dict(), "explanation": explain(result)})
    if args.save:
        with open(args.save, "w") as file:
            file.write(text)
    if args.plot:
        from queuetune.render.plot import plot_tune

        plot_tune(result).savefig(os.fspath(args.plot))
    if args.json:
        print(text)
    else:
        print_tune(result)
    return 0 if result.chosen is not None else 1


# run


def _configure_run(parser: argparse.ArgumentParser) -> None:
    parser.usage = (
        "queuetune run [--out DIR | --resume DIR] [--live | --no-live] [--html | --no-html] [--tensorboard LOGDIR]\n"
        "                     [--json] (script.py | -m module) [args ...]"
    )
    parser.add_argument("--out", metavar="DIR", help="folder for the traces (default: queuetune-run-<time>)")
    parser.add_argument(
        "--resume",
        metavar="DIR",
        help="this run resumes the stopped (or killed) run whose folder is DIR: it writes into DIR/resume-<K>, "
        "and each epoch that spans the restart is counted across both runs",
    )
    parser.add_argument(
        "--live",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a live line per loader on stderr, when it is a terminal (default: on)",
    )
    parser.add_argument(
        "--html",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write DIR/report.html, one self-contained page of every loader (default: on)",
    )
    parser.add_argument(
        "--tensorboard",
        metavar="LOGDIR",
        help="write input wait, bytes in flight and batches/s of every loader as TensorBoard scalars, each second",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print what was found as JSON (summary.json's content, with the folder, summary and page) "
        "instead of tables, after the program's own output",
    )
    parser.add_argument("-m", dest="module", action="store_true", help="run a module, as python -m does")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="the script (or module) and its arguments")


def _run_run(args: argparse.Namespace) -> int:
    from queuetune.program import run_program
    from queuetune.run.runner import Target
    from queuetune.sinks.live_line import live_line
    from queuetune.terminal import print_program

    if not args.program:
        raise UsageError("give a script to run, or -m module")
    first, rest = args.program[0], args.program[1:]
    target = Target(module=first, args=rest) if args.module else Target(path=first, args=rest)
    contexts: list[Callable[[Any], Any]] = []
    if args.live:
        contexts.append(live_line)
    if args.tensorboard:
        from queuetune.program import prepare_out
        from queuetune.sinks.tensorboard import session_scalars, writer_class

        writer_class()  # a missing tensorboard is an error before the program starts
        logdir = str(prepare_out(args.tensorboard, "TensorBoard scalars"))
        contexts.append(lambda session: session_scalars(session, logdir))

    def show(result: ProgramResult) -> None:
        try:
            if args.json:
                paths = {"out": result.out, "summary": result.summary, "html": result.html}
                print(dumps({**result.to_dict(), **{k: None if v is None else str(v) for k, v in paths.items()}}))
            else:
                print_program(result)
            sys.stdout.flush()
        except BrokenPipeError:  # `queuetune run job.py | head`: the program's code stands
            _reader_gone()

    # Shown as soon as it is written: where the program ends with os._exit, nothing comes after.
    result = run_program(
        target, args.out, while_running=_together(contexts), html=args.html, show=show, resume=args.resume
    )
    if result.terminated:  # as SIGTERM would: no wait for the program's threads, no exit handlers
        from queuetune.run.endings import TERMINATED

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(TERMINATED)
    return result.exit_code


# doctor


def _configure_doctor(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shm",
        action="store_true",
        help="look for shared-memory files (in /dev/shm) that killed prefetchers left, and remove them "
        "(the one check today, also made without this flag)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")


def _run_doctor(args: argparse.Namespace) -> int:
    from queuetune.prefetch import shm
    from queuetune.render.text import shm_lines

    if not shm.available():
        print(f"no shared memory to check: {shm.files.ROOT} is not a writable folder")
        return 0
    found = shm.pools()
    removed = [] if args.dry_run else shm.sweep_orphans()
    for line in shm_lines(found, removed, dry_run=args.dry_run):
        print(line)
    return 0


COMMANDS: list[Command] = [
    Command("table", "print the article's table of input batch sizes", _configure_table, _run_table),
    Command(
        "estimate", "estimate the bytes of a batch and of a loader's read-ahead", _configure_estimate, _run_estimate
    ),
    Command("demo", "reproduce the article's experiment on the installed Keras 3", _configure_demo, _run_demo),
    Command("report", "analyse a saved trace", _configure_report, _run_report),
    Command("tune", "find the smallest queue that keeps throughput", _configure_tune, _run_tune),
    Command("run", "run a Python program with every loader it iterates watched", _configure_run, _run_run),
    Command("doctor", "find and remove what killed prefetchers left behind", _configure_doctor, _run_doctor),
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per entry of :data:`COMMANDS`.

    >>> build_parser().parse_args(["table", "--json"]).json
    True
    """
    parser = _Parser(prog=PROG, description="Estimate and right-size the batch queues of input pipelines.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


def _one_line(message: str) -> str:
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in message)


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (0 ok, 2 for anything it cannot
    do: bad input, a file it cannot read or write; 130 for Ctrl-C; ``run``: the
    program's own).

    Errors are reported as one line, ``queuetune: error: <message>``, on stderr;
    one about a file names it. Without a command, the line lists the commands.

    >>> main(["--version"])
    queuetune 0.1.0
    0
    """
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    code: int | None = None
    try:
        try:
            args = parser.parse_args(argv)
            code = args.run(args)
        except SystemExit as exc:  # --help and --version
            code = exc.code if isinstance(exc.code, int) else 0
        sys.stdout.flush()  # a reader gone away is seen here, not as Python exits
        return code
    except BrokenPipeError:
        # The reader went away: the command (or the program it ran) keeps its code.
        _reader_gone()
        return 0 if code is None else code
    except KeyboardInterrupt:  # outside a program's run, which keeps its own (queuetune run's report, say)
        return _fail("interrupted", INTERRUPTED)
    except FactoryFailed as exc:
        code = _fail(str(exc), USAGE_ERROR)
        print(exc.traceback, end="", file=sys.stderr)
        return code
    except UsageError as exc:
        if _missing_command(exc):
            unknown = _unknown_global_flags(argv)
            if unknown:
                return _fail(f"unrecognized arguments: {' '.join(unknown)} ({PROG} -h for more)", USAGE_ERROR)
            return _fail(f"give a command: {', '.join(c.name for c in COMMANDS)} ({PROG} -h for more)", USAGE_ERROR)
        return _fail(str(exc), USAGE_ERROR)
    except (ValueError, TypeError, ImportError) as exc:
        return _fail(str(exc) or type(exc).__name__, USAGE_ERROR)
    except OSError as exc:
        return _fail(_file_error(exc), USAGE_ERROR)


def _reader_gone() -> None:
    """What reads our output went away (``queuetune report DIR | head``): nothing
    more is said, now or as Python exits."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (a test's capture): nothing is flushed to a pipe at exit
        pass


def _missing_command(exc: UsageError) -> bool:
    """Whether argparse refused a command line for having no command."""
    return str(exc).endswith("required: COMMAND")


def _unknown_global_flags(argv: Sequence[str]) -> list[str]:
    """The options before the command that ``queuetune`` itself does not take.

    >>> _unknown_global_flags(["--frobnicate", "-x"]), _unknown_global_flags(["--version"])
    (['--frobnicate', '-x'], [])
    """
    names = {c.name for c in COMMANDS}
    unknown = []
    for arg in argv:
        if arg in names:
            break
        if arg.startswith("-") and arg not in ("-h", "--help", "--version"):
            unknown.append(arg)
    return unknown


class FactoryFailed(Exception):
    """A user's factory (``queuetune tune FILE:NAME``) raised: the message names
    it and its exception; ``traceback`` is the factory's own, without queuetune's frames."""

    def __init__(self, factory: str, exc: BaseException) -> None:
        super().__init__(
            f"{factory} raised {type(exc).__name__}: {exc}" if str(exc) else f"{factory} raised {type(exc).__name__}"
        )
        tb = exc.__traceback__
        while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next
        self.traceback = "".join(traceback.format_exception(type(exc), exc, tb))


# queuetune's own source folder, whose frames a factory's traceback leaves out.
_OURS = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _is_ours(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_OURS)


def _guarded(name: str, factory: Callable[..., Any]) -> Callable[..., Any]:
    """``factory``, whose exceptions become :class:`FactoryFailed`."""

    @functools.wraps(factory)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return factory(*args, **kwargs)
        except Exception as exc:
            raise FactoryFailed(name, exc) from None

    return call


def _file_error(exc: OSError) -> str:
    """An OSError as one line naming the file first.

    >>> _file_error(FileNotFoundError(2, "No such file or directory", "/missing/x.png"))
    '/missing/x.png: No such file or directory'
    """
    if exc.filename is None:
        return str(exc) or type(exc).__name__
    return f"{os.fsdecode(exc.filename)}: {exc.strerror or exc}"


if __name__ == "__main__":
    sys.exit(main())
