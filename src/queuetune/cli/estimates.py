"""``queuetune table``, ``estimate`` and ``demo``: the article's table, an estimate before
anything runs, the article's experiment."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queuetune.common.jsonio import dumps
from queuetune.common.units import parse_bytes
from queuetune.estimate.memory import ARTICLE_BATCHES, ARTICLE_SIZES, FRAMEWORKS, BatchSpec, footprint, seed_table
from queuetune.frameworks import ESTIMATED, get
from queuetune.frameworks.base import Setting

from .arguments import UsageError, argument_type, int_list, labels, nonnegative, number, positive, unit

if TYPE_CHECKING:
    pass


# table


def configure_table(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", default="float32", help="element dtype (default: float32)")
    parser.add_argument("--channels", type=positive("channels"), default=3, help="channels (default: 3)")
    parser.add_argument(
        "--batches",
        type=int_list("batch size"),
        default=list(ARTICLE_BATCHES),
        help="comma-separated batch sizes (default: 32,64,...,65536)",
    )
    parser.add_argument(
        "--sizes",
        type=int_list("image size"),
        default=list(ARTICLE_SIZES),
        help="comma-separated square image sizes (default: 32,64,...,1024)",
    )
    parser.add_argument(
        "--unit", type=argument_type(unit), default="GiB", help="B, KiB, MiB, GiB, GB, ... (default: GiB)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the table as a heatmap into FILE.png")


def run_table(args: argparse.Namespace) -> int:
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
        "count": nonnegative(setting.name),
        "positive": positive(setting.name),
        "bytes": argument_type(parse_bytes),
        "text": str,
    }
    return kinds[setting.kind]


def configure_estimate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", required=True, help="per-sample shape, e.g. 256x256x3")
    parser.add_argument("--batch", type=positive("batch size"), required=True, help="batch size")
    parser.add_argument("--dtype", default="float32", help="input dtype (default: float32)")
    parser.add_argument(
        "--labels", type=argument_type(labels), help="one-hot over N classes, or 'int' for integer labels"
    )
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
        type=argument_type(number),
        default=None,
        help="multiply the consumed batch for transient copies (the article suggests 2)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run_estimate(args: argparse.Namespace) -> int:
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


def configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=positive("steps"), default=10, help="predict(steps=...) (default 10)")
    parser.add_argument(
        "--batch-size", type=positive("batch size"), default=128, help="samples per batch (default 128)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run_demo(args: argparse.Namespace) -> int:
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
