"""The article's experiment as data: what the article measured, what each run of
it on the installed Keras did (:class:`RunResult`), the whole result
(:class:`DemoResult`, ``queuetune demo --json``) and the advice drawn from it.
Running it is :mod:`queuetune.demo`'s."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..analysis.report import MODERATE, Verdict


@dataclass(frozen=True)
class Article:
    """What the article measured: its setting, the samples that reached the model,
    and those the generator built, by queue size."""

    source: str
    reached_model_samples: int
    built_samples: dict[str, int]


ARTICLE = Article(
    source="Keras 2 predict_generator(steps=10), batch 128",
    reached_model_samples=1280,
    built_samples={"max_queue_size=10": 2688, "max_queue_size=2": 1536},
)


@dataclass(frozen=True)
class RunResult:
    """What one configuration did: samples (and batches) that reached the model
    against those the loader built, the peak in flight, the estimate for its
    settings, the start and the input wait (fractions of the steady state)."""

    loader: str
    label: str
    workers: int
    max_queue_size: int | None
    batch_size: int
    predicted_samples: int
    consumed_batches: int | None
    consumed_samples: int
    produced_batches: int
    produced_samples: int
    read_ahead_batches: int | None
    peak_in_flight_batches: int
    peak_in_flight_bytes: int
    estimated_footprint_bytes: int
    estimated_depth: int
    estimated_batches: float
    input_wait_seconds: float | None
    wall_seconds: float | None
    first_batch_seconds: float | None
    built_before_asked: int | None
    steady_wait_seconds: float | None
    steady_seconds: float | None
    input_bound_fraction: float | None
    verdict: Verdict


@dataclass(frozen=True)
class DemoResult:
    """The experiment on the installed Keras: its setting, each run, the article's
    figures beside them, and one sentence of advice (``queuetune demo --json``
    is :meth:`to_dict`)."""

    keras: str
    backend: str
    model: str
    #: The least time a step of ``predict`` took, in milliseconds (see :func:`queuetune.demo.run_demo`).
    step_ms: float
    steps: int
    batch_size: int
    batch_bytes: int
    runs: list[RunResult]
    article: Article
    advice: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def advice(results: list[RunResult]) -> str:
    """One sentence from the measured input-bound fraction of the deepest queue.

    >>> from dataclasses import fields
    >>> blank = dict.fromkeys(f.name for f in fields(RunResult))
    >>> def run(label, queue, peak):
    ...     return RunResult(**{**blank, "label": label, "max_queue_size": queue,
    ...                         "input_bound_fraction": 0.3, "peak_in_flight_bytes": peak})
    >>> advice([run("q10", 10, 100), run("q2", 2, 40)])[:36]
    'Loading is the bottleneck (30% of th'
    """
    queued = [r for r in results if r.max_queue_size is not None]
    if not queued:
        return "No queued loader was measured."
    deepest = max(queued, key=lambda r: r.max_queue_size or 0)
    shallowest = min(queued, key=lambda r: r.max_queue_size or 0)
    fraction = deepest.input_bound_fraction
    if fraction is None:
        return "Consumption was not recorded, so the bottleneck is unknown."
    saved = deepest.peak_in_flight_bytes - shallowest.peak_in_flight_bytes
    if fraction >= MODERATE:
        return (
            f"Loading is the bottleneck ({fraction:.0%} of the time the model waited for input "
            f"with {deepest.label}): a deep queue buys nothing here, so lower max_queue_size "
            f"before the batch size ({shallowest.label} held {_mib(saved)} MiB less at peak)."
        )
    return (
        f"The model is the bottleneck (it waited for input {fraction:.0%} of the time with "
        f"{deepest.label}): the queue keeps it fed, so keep the default unless memory is short; "
        f"{shallowest.label} would hold {_mib(saved)} MiB less at peak."
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f}"
