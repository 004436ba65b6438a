"""The queue model's curve over the settings a framework can reach."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..frameworks import Framework, reachable_depths, rules_of
from ..model import Prediction, fit, fit_unbuffered, predict_curve
from ..trace import Trace


@dataclass
class Predicted(Prediction):
    """What the model predicts for one setting: the :class:`~queuetune.model.Prediction`
    at its depth and workers, the setting, and ``peak_built_bytes`` (built and not
    yet released, what the probe reports as in flight)."""

    settings: dict[str, Any]
    peak_built_bytes: float

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Predicted:
        """Read back what :meth:`to_dict` wrote (a saved result).

        >>> row = {f.name: 0 for f in fields(Predicted)} | {"settings": {"buffer": 1}}
        >>> Predicted.from_dict(row).settings
        {'buffer': 1}
        """
        return cls(**{f.name: data[f.name] for f in fields(cls)})


def predict(
    trace: Trace,
    framework: Framework,
    worker_counts: list[int | None],
    max_depth: int,
    seed: int,
    unbuffered: Trace | None = None,
) -> list[Predicted]:
    """The model fitted to ``trace`` (or to ``unbuffered`` beside it, see
    :func:`~queuetune.model.fit_unbuffered`), simulated at every depth the
    framework's settings reach with each worker count (empty when the traces
    cannot make a model)."""
    try:
        rules = rules_of(trace.meta)
        model = fit(trace, rules) if unbuffered is None else fit_unbuffered(unbuffered, trace, rules)
    except ValueError:
        return []
    rows = []
    for count in worker_counts:
        depths = reachable_depths(framework, count, max_depth)
        if not depths:
            continue
        for p in predict_curve(model, depths=depths, workers=[count or 1], seed=seed):
            settings = framework.settings_for(p.depth, count)
            assert settings is not None  # a reachable depth has settings
            fields_of = {f.name: getattr(p, f.name) for f in fields(Prediction)}
            rows.append(
                Predicted(**fields_of, settings=settings, peak_built_bytes=p.peak_built_batches * model.batch_bytes)
            )
    return rows
