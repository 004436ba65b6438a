"""The queue model: fit a pipeline's build and step times from a trace, then simulate its
throughput and in-flight memory for each queue depth (tf.data's closed form as a check)."""

from .closed_form import compare_with_closed_form, tfdata_empty_probability, tfdata_expected_wait
from .distribution import Distribution
from .fit import dispatch_time, fit, fit_unbuffered, handover_time, kept_by_consumer, transit_time
from .pipeline import PipelineModel
from .rules import LoaderRules
from .simulate import Prediction, predict_curve, simulate

__all__ = [
    "Distribution",
    "LoaderRules",
    "PipelineModel",
    "Prediction",
    "compare_with_closed_form",
    "dispatch_time",
    "fit",
    "fit_unbuffered",
    "handover_time",
    "kept_by_consumer",
    "predict_curve",
    "simulate",
    "tfdata_empty_probability",
    "tfdata_expected_wait",
    "transit_time",
]
