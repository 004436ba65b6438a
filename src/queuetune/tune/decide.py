"""The trials summed up per setting, and the decision: the least memory that keeps throughput."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any

from ..analysis.report import Report
from ..frameworks import Framework
from .predict import Predicted


@dataclass
class Trial:
    """One measured run of one setting."""

    settings: dict[str, Any]
    depth: int
    round: int
    batches: int
    throughput: float
    peak_in_flight_batches: int
    peak_in_flight_bytes: int
    input_bound_fraction: float | None
    peak_rss_bytes: int | None
    bytes_estimated: bool = False


@dataclass
class Candidate:
    """A setting, its trials summarised (median throughput, highest peak memory),
    and what the model predicted for it."""

    settings: dict[str, Any]
    depth: int
    throughput: float
    peak_in_flight_batches: int
    peak_in_flight_bytes: int
    peak_rss_bytes: int | None
    input_bound_fraction: float | None
    trials: int
    predicted_throughput: float | None = None
    predicted_peak_in_flight_batches: float | None = None
    is_default: bool = False
    relative: float | None = None
    predicted_share: float | None = None
    sureness: float | None = None

    def share(self, candidates: list[Candidate]) -> float:
        """Its throughput as a share of the best: the median over rounds of its
        share of that round's best when rounds were paired, else of medians."""
        relatives = [c.relative for c in candidates if c.relative is not None]
        if self.relative is not None and relatives:
            return self.relative / max(relatives)
        best = max(c.throughput for c in candidates)
        return self.throughput / best if best else 0.0

    def label(self) -> str:
        """Its settings (those set) and its depth, in words.

        >>> Candidate({"workers": 4, "x": None}, 5, 1.0, 5, 5, None, None, 1).label()
        'workers=4 (depth 5)'
        """
        shown = {k: v for k, v in self.settings.items() if v is not None}
        text = ", ".join(f"{k}={v}" for k, v in shown.items())
        return f"{text} (depth {self.depth})" if text else f"depth {self.depth}"


def pick_settings(
    predictions: list[Predicted],
    default: dict[str, Any],
    tolerance: float,
    budget: int | None,
    count: int,
) -> list[dict[str, Any]]:
    """The settings to try: the default, the shallowest predicted to keep
    throughput (under ``budget``), and its neighbours; ``count`` at most."""
    picked: list[dict[str, Any]] = [dict(default)]
    fits = [p for p in predictions if budget is None or p.peak_built_bytes <= budget]
    if fits:
        best = max(p.throughput for p in fits)
        keeping = sorted(
            (p for p in fits if p.throughput >= (1 - tolerance) * best),
            key=lambda p: (p.peak_built_bytes, -p.throughput),
        )
        ordered = sorted(fits, key=lambda p: (p.workers, p.depth))
        if keeping:
            first = keeping[0]
            position = ordered.index(first)
            neighbours = [first, *ordered[max(0, position - 1) : position], *ordered[position + 1 : position + 3]]
            for p in neighbours:
                settings = {**default, **p.settings}
                if settings not in picked:
                    picked.append(settings)
                if len(picked) >= count:
                    break
    return picked[:count]


def trial_of(settings: dict[str, Any], framework: Framework, round_: int, report: Report, rate: float) -> Trial:
    """One trial's record from its report and throughput."""
    depth = framework.depth(settings)
    peak_batches, peak_bytes, estimated = report.peak_in_flight_batches, report.peak_in_flight_bytes, False
    estimate = framework.estimated_peak(depth, int(report.batch_bytes.median or 0))
    if estimate is not None:
        (peak_batches, peak_bytes), estimated = estimate, True
    return Trial(
        settings=dict(settings),
        depth=depth,
        round=round_,
        batches=report.consumed_batches or 0,
        throughput=rate,
        peak_in_flight_batches=peak_batches,
        peak_in_flight_bytes=peak_bytes,
        input_bound_fraction=report.input_bound_fraction,
        peak_rss_bytes=report.peak_rss_bytes,
        bytes_estimated=estimated,
    )


def setting_key(settings: dict[str, Any]) -> str:
    """One setting's trials group under this key (settings are dicts, not hashable)."""
    return json.dumps(settings, sort_keys=True)


def summarise(trials: list[Trial], default: dict[str, Any], predictions: list[Predicted]) -> list[Candidate]:
    """One candidate per setting tried, sorted by depth: its trials' median
    throughput and highest peaks, its share of each round's best, and the model's
    prediction for it."""
    groups: dict[str, list[Trial]] = {}
    for t in trials:
        groups.setdefault(setting_key(t.settings), []).append(t)
    # Trials of one round ran back to back: comparing within a round cancels
    # what the machine did between rounds.
    round_best: dict[int, float] = {}
    for t in trials:
        round_best[t.round] = max(round_best.get(t.round, 0.0), t.throughput)
    best_predicted = max((p.throughput for p in predictions), default=0.0)
    summary = []
    for group in groups.values():
        settings = group[0].settings
        predicted = next((p for p in predictions if {**default, **p.settings} == settings), None)
        fractions = [t.input_bound_fraction for t in group if t.input_bound_fraction is not None]
        rss = [t.peak_rss_bytes for t in group if t.peak_rss_bytes is not None]
        summary.append(
            Candidate(
                settings=settings,
                depth=group[0].depth,
                throughput=statistics.median(t.throughput for t in group),
                peak_in_flight_batches=max(t.peak_in_flight_batches for t in group),
                peak_in_flight_bytes=max(t.peak_in_flight_bytes for t in group),
                peak_rss_bytes=max(rss) if rss else None,
                input_bound_fraction=statistics.median(fractions) if fractions else None,
                trials=len(group),
                predicted_throughput=predicted.throughput if predicted else None,
                predicted_peak_in_flight_batches=predicted.peak_built_batches if predicted else None,
                is_default=settings == default,
                relative=statistics.median(
                    t.throughput / round_best[t.round] if round_best[t.round] else 0.0 for t in group
                ),
                predicted_share=predicted.throughput / best_predicted if predicted and best_predicted else None,
            )
        )
    return sorted(summary, key=lambda c: c.depth)


def trial_noise(trials: list[Trial]) -> float:
    """How much one trial's throughput varies, as a fraction: the standard
    deviation of log throughput left over once each setting's and each round's
    own level are taken out (a two-way fit over the rounds in which every
    setting ran). 0 with fewer than two settings or two such rounds.

    >>> def t(q, r, rate): return Trial({"q": q}, q, r, 50, rate, q, q, None, None)
    >>> round(trial_noise([t(1, 0, 100.0), t(2, 0, 110.0), t(1, 1, 200.0), t(2, 1, 230.0)]), 3)
    0.022
    """
    table: dict[str, dict[int, float]] = {}
    for t in trials:
        if t.throughput > 0:
            table.setdefault(setting_key(t.settings), {})[t.round] = math.log(t.throughput)
    rows = list(table.values())
    complete = sorted(set.intersection(*(set(row) for row in rows))) if rows else []
    if len(rows) < 2 or len(complete) < 2:
        return 0.0
    y = [[row[r] for r in complete] for row in rows]
    row_mean = [statistics.fmean(values) for values in y]
    col_mean = [statistics.fmean(column) for column in zip(*y)]
    grand = statistics.fmean(row_mean)
    squares = sum(
        (v - row_mean[i] - col_mean[j] + grand) ** 2 for i, values in enumerate(y) for j, v in enumerate(values)
    )
    return math.sqrt(squares / ((len(rows) - 1) * (len(complete) - 1)))


def sureness(candidate: Candidate, candidates: list[Candidate], tolerance: float, noise: float) -> float | None:
    """How sure the trials are that ``candidate`` keeps ``1 - tolerance`` of the
    best throughput and of the default's: for each of the two, the chance under
    the trials' noise (``noise``: one trial's standard deviation of log
    throughput, see :func:`trial_noise`) that its share was measured as high as
    it was if it truly kept that share no better than the floor, a normal
    approximation on the log scale from its trials and the other's; the lower
    of the two. The best measured is not sure of itself when it is not the
    default: it may lead by the noise alone, and the default is what it must
    keep. 1.0 for the default when it is the best; None without a measured
    noise (fewer than two rounds of two settings).

    >>> best = Candidate({"q": 10}, 11, 100.0, 11, 1100, None, None, 3, is_default=True)
    >>> near = Candidate({"q": 2}, 3, 99.0, 3, 300, None, None, 3)
    >>> round(sureness(near, [best, near], 0.02, noise=0.01), 2)
    0.89
    >>> sureness(near, [best, near], 0.02, noise=0.0) is None
    True
    """
    if noise <= 0:
        return None
    return min(sure_against(candidate, other, candidates, tolerance, noise) for other in references(candidates))


def references(candidates: list[Candidate]) -> list[Candidate]:
    """What a setting must keep the throughput of: the best measured, and the
    default where it is another candidate."""
    best = max(candidates, key=lambda c: c.share(candidates))
    default = next((c for c in candidates if c.is_default), None)
    return [best] if default is None or default is best else [best, default]


def sure_against(
    candidate: Candidate, other: Candidate, candidates: list[Candidate], tolerance: float, noise: float
) -> float:
    """How sure the trials are that ``candidate`` keeps ``1 - tolerance`` of
    ``other``'s throughput (see :func:`sureness`); 1.0 for ``other`` itself."""
    if candidate is other:
        return 1.0
    mine, theirs = candidate.share(candidates), other.share(candidates)
    if mine <= 0 or theirs <= 0:
        return 0.0
    spread = noise * math.sqrt(1 / max(1, candidate.trials) + 1 / max(1, other.trials))
    return statistics.NormalDist().cdf((math.log(mine / theirs) - math.log(1 - tolerance)) / spread)


def weakest_reference(candidate: Candidate, candidates: list[Candidate], tolerance: float, noise: float) -> Candidate:
    """The reference (:func:`references`) the trials are least sure ``candidate``
    keeps up with: the setting to measure it again beside."""
    others = [c for c in references(candidates) if c is not candidate] or references(candidates)
    return min(others, key=lambda other: sure_against(candidate, other, candidates, tolerance, noise))


def decide(
    candidates: list[Candidate], tolerance: float, budget: int | None, noise: float = 0.0, sure: float = 0.9
) -> Candidate | None:
    """The least peak in-flight memory among candidates that keep throughput (and
    fit ``budget``); ties go to the shallower queue.

    A candidate keeps throughput when its measured share of the best (compared
    round by round where the trials were paired, see :meth:`Candidate.share`)
    is at least ``1 - tolerance`` and, when the trials' ``noise`` is known, the
    trials are at least ``sure`` that it keeps that share of the best and of
    the default (:func:`sureness`); the default, when it measured best, always
    does. Where the default keeps throughput, only a setting that holds less
    than it may be chosen over it. Each candidate's ``sureness`` is filled in;
    where none is sure, the default is chosen.

    >>> a = Candidate({"q": 10}, 11, 100.0, 11, 1100, None, None, 3)
    >>> b = Candidate({"q": 2}, 3, 99.0, 3, 300, None, None, 3)
    >>> decide([a, b], 0.02, None).settings
    {'q': 2}
    >>> decide([a, b], 0.02, None, noise=0.02).settings  # 99 % of the best, give or take 1.6 %
    {'q': 10}
    """
    if not candidates:
        return None
    floor = 1 - tolerance
    best = max(candidates, key=lambda c: c.share(candidates))
    for c in candidates:
        c.sureness = sureness(c, candidates, tolerance, noise)

    def keeps(c: Candidate) -> bool:
        if c is best and (c.is_default or c.sureness is None or c.sureness >= sure):
            return True
        if c.is_default:
            return c.share(candidates) >= floor or not any(keeps(o) for o in candidates if not o.is_default)
        return c.share(candidates) >= floor and (c.sureness is None or c.sureness >= sure)

    keeping = [c for c in candidates if keeps(c) and (budget is None or c.peak_in_flight_bytes <= budget)]
    default = next((c for c in keeping if c.is_default), None)
    if default is not None:
        # Where the default keeps throughput, another setting must hold less to be worth a change.
        keeping = [c for c in keeping if c is default or c.peak_in_flight_bytes < default.peak_in_flight_bytes]
    if not keeping:
        return None
    return min(keeping, key=lambda c: (c.peak_in_flight_bytes, c.depth, -c.throughput))


def unsure(
    candidates: list[Candidate], tolerance: float, budget: int | None, noise: float, sure: float = 0.9
) -> Candidate | None:
    """The candidate that more trials could settle: the one of least memory among
    :func:`unsettled` (the decision's, with ``noise``). None when there is none
    (or no noise to be unsure with).

    >>> a = Candidate({"q": 10}, 11, 100.0, 11, 1100, None, None, 3)
    >>> b = Candidate({"q": 2}, 3, 99.0, 3, 300, None, None, 3)
    >>> unsure([a, b], 0.02, None, noise=0.02).settings
    {'q': 2}
    """
    chosen = decide(candidates, tolerance, budget, noise, sure)
    if chosen is None or noise <= 0:
        return None
    open_ = unsettled(candidates, chosen, tolerance, sure)
    return min(open_, key=lambda c: (c.peak_in_flight_bytes, c.depth), default=None)


def unsettled(candidates: list[Candidate], chosen: Candidate, tolerance: float, sure: float) -> list[Candidate]:
    """The candidates of less memory than ``chosen`` whose share of the best
    reaches ``1 - tolerance`` but of which the trials are not ``sure`` (their
    ``sureness`` as :func:`decide` filled it in). Each is under any budget the
    chosen one is under, having less memory.

    >>> a = Candidate({"q": 10}, 11, 100.0, 11, 1100, None, None, 3, sureness=1.0)
    >>> b = Candidate({"q": 2}, 3, 99.0, 3, 300, None, None, 3, sureness=0.7)
    >>> [c.settings for c in unsettled([a, b], a, 0.02, 0.9)]
    [{'q': 2}]
    """
    floor = 1 - tolerance
    return [
        c
        for c in candidates
        if c.peak_in_flight_bytes < chosen.peak_in_flight_bytes
        and c.share(candidates) >= floor
        and c.sureness is not None
        and c.sureness < sure
    ]
