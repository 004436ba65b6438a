"""``queuetune report``: saved traces analysed, one or a launch's ranks."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queuetune.common.jsonio import dumps
from queuetune.record.trace import Trace

from .arguments import UsageError

if TYPE_CHECKING:
    from queuetune.tune.headline import Headline
    from queuetune.tune.recommend import Recommendation


def configure_report(parser: argparse.ArgumentParser) -> None:
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


def run_report(args: argparse.Namespace) -> int:
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


def _emit(text: str, path: str | None) -> None:
    if path is None:
        print(text)
    else:
        with open(path, "w", encoding="utf-8") as file:
            file.write(text + "\n")


# tune
