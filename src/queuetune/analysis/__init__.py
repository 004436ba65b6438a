"""Analysis: what a trace says. The report (:mod:`.report`) and the passes it is
made of, each giving one section of it: the counts (:mod:`.counts`), batches in
flight (:mod:`.in_flight`), the timings (:mod:`.timing`), the consumer's waits
(:mod:`.waits`), coverage (:mod:`.coverage`) and memory by cause
(:mod:`.memory`); ranks side by side (:mod:`.ranks`) and resumes across
restarts (:mod:`.resumes`). Pure functions of the trace: no clock, no process,
nothing printed.

>>> from queuetune.analysis import analyze
>>> from queuetune.record.trace import Trace
>>> analyze(Trace()).verdict
'unknown'
"""

from __future__ import annotations

from .report import Report, analyze

__all__ = ["Report", "analyze"]
