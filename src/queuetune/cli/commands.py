"""The ``queuetune`` command: its commands, and :func:`main`, which runs one and turns what
goes wrong into one line and an exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from queuetune import __version__

from .arguments import (
    INTERRUPTED,
    PROG,
    USAGE_ERROR,
    Command,
    FactoryFailed,
    Parser,
    UsageError,
    file_error,
    reader_gone,
)
from .estimates import configure_demo, configure_estimate, configure_table, run_demo, run_estimate, run_table
from .reports import configure_report, run_report
from .running import configure_doctor, configure_run, run_doctor, run_run
from .tuning import configure_tune, run_tune

if TYPE_CHECKING:
    pass


COMMANDS: list[Command] = [
    Command("table", "print the article's table of input batch sizes", configure_table, run_table),
    Command("estimate", "estimate the bytes of a batch and of a loader's read-ahead", configure_estimate, run_estimate),
    Command("demo", "reproduce the article's experiment on the installed Keras 3", configure_demo, run_demo),
    Command("report", "analyse a saved trace", configure_report, run_report),
    Command("tune", "find the smallest queue that keeps throughput", configure_tune, run_tune),
    Command("run", "run a Python program with every loader it iterates watched", configure_run, run_run),
    Command("doctor", "find and remove what killed prefetchers left behind", configure_doctor, run_doctor),
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per entry of :data:`COMMANDS`.

    >>> build_parser().parse_args(["table", "--json"]).json
    True
    """
    parser = Parser(prog=PROG, description="Estimate and right-size the batch queues of input pipelines.")
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
        reader_gone()
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
        return _fail(file_error(exc), USAGE_ERROR)


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
