"""``queuetune run`` and ``queuetune doctor``: a program with every loader watched; what
killed prefetchers left behind."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queuetune.common.jsonio import dumps

from .arguments import UsageError, reader_gone, together

if TYPE_CHECKING:
    from queuetune.run.result import ProgramResult


def configure_run(parser: argparse.ArgumentParser) -> None:
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


def run_run(args: argparse.Namespace) -> int:
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
            reader_gone()

    # Shown as soon as it is written: where the program ends with os._exit, nothing comes after.
    result = run_program(
        target, args.out, while_running=together(contexts), html=args.html, show=show, resume=args.resume
    )
    if result.terminated:  # as SIGTERM would: no wait for the program's threads, no exit handlers
        from queuetune.run.endings import TERMINATED

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(TERMINATED)
    return result.exit_code


# doctor


def configure_doctor(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shm",
        action="store_true",
        help="look for shared-memory files (in /dev/shm) that killed prefetchers left, and remove them "
        "(the one check today, also made without this flag)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")


def run_doctor(args: argparse.Namespace) -> int:
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
