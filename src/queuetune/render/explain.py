"""The tuner's decision in words: what the console, ``--json`` and the benchmarks print."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analysis.report import section_of
from ..analysis.waits import MODERATE, Waits
from ..common.units import format_bytes

if TYPE_CHECKING:
    from ..tune import Candidate, TuneResult


def explain(result: TuneResult) -> list[str]:
    """The tuner's decision in words and numbers, a sentence a line.

    >>> from queuetune.tune import Candidate, TuneResult
    >>> c = Candidate({"buffer": 1}, 2, 10.0, 2, 200, None, None, 1, is_default=True)
    >>> explain(TuneResult("python", {"buffer": 1}, [c], c, [], None, 0.02, None))[-1]
    'The default is already the smallest setting that keeps throughput.'
    """
    lines = _bottleneck(None if result.baseline is None else section_of(Waits, result.baseline))
    if result.modelled_from:
        shown = ", ".join(f"{k}={v}" for k, v in result.modelled_from.items())
        lines.append(
            f"Model: fitted to a run with {shown}, where each request builds its batch (the loader builds "
            "its read-ahead out of the probe's sight), beside the default run."
        )
    lines += _candidates(result) + _trials(result)
    return lines + (_none_chosen(result) if result.chosen is None else _chosen(result, result.chosen))


def _bottleneck(waits: Waits | None) -> list[str]:
    """The side the default run waited on, from its steady state's waits."""
    fraction = None if waits is None else waits.input_bound_fraction
    if waits is None or fraction is None:
        return []
    side = "loading" if fraction >= MODERATE else "the model"
    return [
        f"Bottleneck: {side} (the consumer waited for input {fraction:.0%} of the default run's "
        f"steady state: {waits.verdict})."
    ]


def _candidates(result: TuneResult) -> list[str]:
    """Each setting tried: its throughput, its share of the best, and what it held in flight."""
    candidates = result.candidates
    floor = 1 - result.tolerance
    lines = []
    for c in candidates:
        predicted = f"; predicted {c.predicted_share:.1%}" if c.predicted_share is not None else ""
        sure = f"; sure to {c.sureness:.0%} it keeps {floor:.0%}" if c.sureness is not None else ""
        lines.append(
            f"{c.label()}{' (default)' if c.is_default else ''}: {c.throughput:.1f} batches/s "
            f"({c.share(candidates):.1%} of the best, round by round{predicted}{sure}), peak "
            f"{c.peak_in_flight_batches} batches / {format_bytes(c.peak_in_flight_bytes)} in flight "
            f"over {c.trials} trial(s)"
        )
    return lines


def _trials(result: TuneResult) -> list[str]:
    """The trials' noise, the trials measured again, and the settings not sure enough to choose."""
    floor = 1 - result.tolerance
    lines = []
    if result.noise:
        lines.append(
            f"Trial noise: {result.noise:.1%} a trial. A setting keeps throughput when it measured at least "
            f"{floor:.0%} of the best and the trials are at least {result.sure:.0%} sure it keeps {floor:.0%} of "
            "the best and of the default."
        )
    if result.extra_trials:
        lines.append(
            f"Measured again: {result.extra_trials} more trial(s), beside the best or the default, of settings "
            f"the first rounds could not settle (at most {result.max_trials} trials in all)."
        )
    doubted = result.doubted
    if doubted:
        lines.append(
            f"Not sure enough, so not chosen: {', '.join(c.label() for c in doubted)} "
            f"(more trials or steps would tell; see max_trials)."
        )
    return lines


def _none_chosen(result: TuneResult) -> list[str]:
    """Why no setting was chosen, and the fastest under the budget."""
    candidates = result.candidates
    limit = f" under the budget of {format_bytes(result.budget)}" if result.budget else ""
    lines = [f"No setting kept {1 - result.tolerance:.0%} of the best throughput{limit}."]
    under = [c for c in candidates if result.budget and c.peak_in_flight_bytes <= result.budget]
    if under:
        fastest = max(under, key=lambda c: c.share(candidates))
        lines.append(
            f"Under the budget the fastest was {fastest.label()}, at "
            f"{fastest.share(candidates):.1%} of the best throughput."
        )
    return lines


def _chosen(result: TuneResult, chosen: Candidate) -> list[str]:
    """The setting chosen, how sure the trials are, and how it compares with the default."""
    floor = 1 - result.tolerance
    sure = ""
    if chosen.sureness is not None and chosen.sureness < 1:
        sure = f" (the trials are {chosen.sureness:.0%} sure it keeps {floor:.0%})"
    lines = [f"Chosen: {chosen.label()}{sure}."]
    deepest = max((p.depth for p in result.predictions), default=None)
    if deepest is not None and chosen.depth >= deepest and not chosen.is_default:
        lines.append(
            f"The chosen depth is the deepest tried ({deepest}): throughput may still rise "
            "deeper (try a larger max_depth, or a budget)."
        )
    default = result.default
    if default is not None and default is not chosen and default.peak_in_flight_bytes and default.throughput:
        saved = default.peak_in_flight_bytes - chosen.peak_in_flight_bytes
        ratio = chosen.throughput / default.throughput
        if saved >= 0:
            lines.append(
                f"Against the default ({default.label()}): {ratio:.1%} of its throughput with "
                f"{format_bytes(saved)} less in flight at peak "
                f"({chosen.peak_in_flight_bytes / default.peak_in_flight_bytes:.0%} of its peak)."
            )
        else:
            lines.append(
                f"The default ({default.label()}) is slower: the chosen setting reaches {ratio:.1%} "
                f"of its throughput for {format_bytes(-saved)} more in flight at peak."
            )
    elif default is chosen:
        lines.append("The default is already the smallest setting that keeps throughput.")
    return lines
