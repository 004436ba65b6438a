"""``queuetune tune``: the smallest queue that keeps the throughput, measured."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from queuetune.common.jsonio import dumps
from queuetune.common.units import _shown, parse_bytes
from queuetune.frameworks import TUNED

from .arguments import FactoryFailed, UsageError, argument_type, guarded, int_list, nonnegative, number, positive

if TYPE_CHECKING:
    pass


def configure_tune(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("factory", metavar="FILE.py:FACTORY", help="a function that builds the loader and its consumer")
    parser.add_argument(
        "--framework",
        choices=list(TUNED),
        help="fail unless the loader is of this framework",
    )
    parser.add_argument("--budget", type=argument_type(parse_bytes), help="most bytes in flight, e.g. 2GiB")
    parser.add_argument(
        "--tolerance",
        type=argument_type(_fraction),
        default=0.02,
        help="throughput that may be given up (default 0.02)",
    )
    parser.add_argument("--steps", type=positive("steps"), default=100, help="batches per trial (default 100)")
    parser.add_argument(
        "--warmup",
        type=nonnegative("warmup"),
        default=10,
        help="batches left out of each trial's throughput (default 10)",
    )
    parser.add_argument(
        "--rounds", type=positive("rounds"), default=3, help="trials of each setting, interleaved (default 3)"
    )
    parser.add_argument(
        "--workers",
        type=int_list("workers"),
        help="worker counts to consider, e.g. 2,4 (default: the loader's and 1, 2, 4, ... up to the cores)",
    )
    parser.add_argument(
        "--sure",
        type=argument_type(_fraction),
        default=0.9,
        help="how sure the trials must be that a setting keeps throughput (default 0.9)",
    )
    parser.add_argument(
        "--max-trials",
        type=positive("max trials"),
        help="trials in all, the settings measured again included (default: twice the rounds' trials)",
    )
    parser.add_argument("--plot", metavar="FILE.png", help="draw throughput and in-flight memory against depth")
    parser.add_argument("--save", metavar="RESULT.json", help="save the result as JSON")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _fraction(text: str) -> float:
    value = number(text)
    if not 0 <= value < 1:
        raise ValueError(f"expected a number from 0 up to 1, got {_shown(text)}")
    return value


def run_tune(args: argparse.Namespace) -> int:
    from queuetune.render.explain import explain
    from queuetune.terminal import print_tune, tune_progress
    from queuetune.tune import as_job, framework_of, load_factory, tune

    if args.warmup >= args.steps:
        raise UsageError(f"argument --warmup: must be less than --steps ({args.steps}), got {args.warmup}")
    try:
        factory = guarded(args.factory, load_factory(args.factory))
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
