"""The tuner: the smallest queue that keeps throughput, from trials and the queue model.

``tune(factory)`` is the entry point; the modules hold its parts: :mod:`.job`
(the factory's contract), :mod:`.trials` (one measured run), :mod:`.measures`
(throughput from a trace), :mod:`.predict` (the model's curve), :mod:`.decide`
(the decision) and :mod:`.tuner` (the whole).
"""

from __future__ import annotations

from .decide import (
    Candidate,
    Trial,
    decide,
    pick_settings,
    summarise,
    sureness,
    trial_noise,
    unsure,
    weakest_reference,
)
from .job import Factory, Job, as_job, build, framework_of, load_factory
from .measures import after_warmup, startup_backlog, throughput
from .predict import Predicted, predict
from .trials import run_trial
from .tuner import TuneResult, tune, worker_choices

__all__ = [
    "Candidate",
    "Factory",
    "Job",
    "Predicted",
    "Trial",
    "TuneResult",
    "after_warmup",
    "as_job",
    "build",
    "decide",
    "framework_of",
    "load_factory",
    "pick_settings",
    "predict",
    "run_trial",
    "startup_backlog",
    "summarise",
    "sureness",
    "throughput",
    "trial_noise",
    "tune",
    "unsure",
    "weakest_reference",
    "worker_choices",
]
