"""A probe's report as rows of (measure, value) in reading order, each part
from the section of the report it shows (:mod:`queuetune.analysis.report`):
the terminal's table and the HTML page's measures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analysis.counts import Counts
from ..analysis.coverage import Coverages
from ..analysis.device import Device
from ..analysis.in_flight import InFlight
from ..analysis.memory import Memory
from ..analysis.report import Remarks, section_of
from ..analysis.timing import Timings
from ..analysis.waits import Waits
from ..common.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from ..analysis.coverage import Coverage
    from ..analysis.in_flight import NodeHeld
    from ..analysis.memory import Causes
    from ..analysis.report import Report
    from ..analysis.timing import Timing
    from ..analysis.waits import Start

Rows = list[tuple[str, str]]


def report_rows(report: Report) -> Rows:
    """(label, value) rows, in reading order.

    >>> from queuetune.analysis.report import analyze
    >>> from queuetune.record.trace import Produced, Trace
    >>> report_rows(analyze(Trace(produced=[Produced(0.0, 1.0, 2048)])))[0]
    ('produced (built)', '1 batches')
    """
    flight = section_of(InFlight, report)
    return [
        *count_rows(section_of(Counts, report)),
        *in_flight_rows(flight, (report.meta.settings or {}).get("max_bytes")),
        *timing_rows(section_of(Timings, report)),
        *wait_rows(section_of(Waits, report)),
        *memory_rows(section_of(Memory, report)),
        *device_rows(section_of(Device, report)),
        *node_rows(flight.nodes),
        *coverage_rows(section_of(Coverages, report), report.meta.num_batches),
        *remark_rows(section_of(Remarks, report)),
    ]


def count_rows(counts: Counts) -> Rows:
    """The batches built, and those handed over and read ahead where consumption was recorded."""
    rows = [("produced (built)", f"{counts.produced_batches} batches")]
    if counts.consumed_batches is not None:
        rows.append(("consumed (reached the model)", f"{counts.consumed_batches} batches"))
        ahead = f"{counts.read_ahead_batches} batches, {format_bytes(counts.read_ahead_bytes or 0)}"
        rows.append(("read-ahead at the end (never used)", ahead))
    return rows


def in_flight_rows(flight: InFlight, budget: object = None) -> Rows:
    """The batches in flight at the peak and on average, a Prefetcher's pool (of ``budget``, its
    ``max_bytes``, where that is a number of bytes), and the most built at once."""
    peak = f"{flight.peak_in_flight_batches} batches, {format_bytes(flight.peak_in_flight_bytes)}"
    rows = [("peak in flight (built, not released)", peak)]
    if flight.peak_pool_bytes is not None:
        within = f" of max_bytes={format_bytes(budget)}" if type(budget) is int and budget > 0 else ""
        pool = f"{format_bytes(flight.peak_pool_bytes)}{within}: in flight, in use, spare"
        rows.append(("shared-memory pool (peak)", pool))
    rows.append(("mean in flight", f"{flight.mean_in_flight_batches:.1f} batches"))
    rows.append(("peak being built at once", f"{flight.peak_building_batches} batches"))
    return rows


def timing_rows(timings: Timings) -> Rows:
    """The median batch's bytes, and the times of builds and steps."""
    rows = []
    if timings.batch_bytes.median is not None:
        rows.append(("batch size (median)", format_bytes(int(timings.batch_bytes.median))))
    rows.append(("producer time per batch", _timing(timings.producer_time)))
    rows.append(("consumer time per step", _timing(timings.consumer_step)))
    return rows


def wait_rows(waits: Waits) -> Rows:
    """The start, and the input wait of the steady state and of whole runs."""
    rows = []
    if waits.start is not None:
        rows.append(("start", _start(waits.start)))
    if waits.input_bound_fraction is not None:
        steady = f"{shown_seconds(waits.steady_wait_seconds)} of {shown_seconds(waits.steady_seconds)}"
        whole = f"{shown_seconds(waits.input_wait_seconds)} of {shown_seconds(waits.wall_seconds)}"
        rows.append(("input wait (steady state)", f"{steady}{_waits(waits)}; with the start, {whole}"))
    return rows


def memory_rows(memory: Memory) -> Rows:
    """Real memory by cause, copy-on-read, and the peaks of the process and its workers."""
    rows = []
    use = memory.memory
    if use is not None and use.peak is not None:
        rows.append(("real memory (peak, by cause)", _causes(use.peak)))
        finding = use.finding()
        if finding:
            rows.append(("copy-on-read", finding))
    if use is not None:
        rows.extend(("note", note) for note in use.notes)
    if memory.peak_rss_bytes is not None:
        rows.append(("peak RSS (process)", format_bytes(memory.peak_rss_bytes)))
        rows.append(("peak unique memory of workers", format_bytes(memory.peak_children_bytes or 0)))
    return rows


def device_rows(device: Device) -> Rows:
    """Copies to a device, where any were seen: a Prefetcher's device stage (the
    peaks of its pinned staging buffers and of its batches on the device ahead
    of the step, and each batch's copy), a loader's pinning, the step's copies.

    >>> from queuetune.analysis.device import DeviceUse
    >>> device_rows(Device(DeviceUse(4, 0.002, 0.005, 8192, 4096)))  # doctest: +NORMALIZE_WHITESPACE
    [('pinned bytes (peak)', '8.0 KiB'), ('device bytes ahead (peak)', '4.0 KiB'),
     ('staged to handed over', 'median 2.00 ms, largest 5.00 ms (n=4)')]
    >>> staged = DeviceUse(2, 0.004, 0.005, 8192, 4096, staging_median_seconds=0.001, copy_median_seconds=0.0005,
    ...                    copy_max_seconds=0.0006)
    >>> device_rows(Device(staged))[3:]  # doctest: +NORMALIZE_WHITESPACE
    [('staging into pinned buffers', 'median 1.00 ms'),
     ('copy to the device (device-timed)', 'median 500 µs, largest 600 µs')]
    >>> use = DeviceUse(pins=9, pin_median_seconds=0.003, step_copies=8, step_copy_median_seconds=0.012,
    ...                 step_copy_share=0.4, pageable_share=1.0)
    >>> device_rows(Device(use))  # doctest: +NORMALIZE_WHITESPACE
    [('pinned by the loader', 'median 3.00 ms a batch (n=9)'),
     ('copies to the device in the step', '40 % of the steps, median 12.0 ms a step (n=8), 100 % from pageable memory')]
    >>> device_rows(Device(None))
    []
    """
    use = device.device
    if use is None:
        return []
    rows: Rows = []
    if use.copies or use.peak_pinned_bytes or use.peak_device_bytes:
        copy = f"median {shown_seconds(use.staged_median_seconds)}, largest {shown_seconds(use.staged_max_seconds)}"
        rows += [
            ("pinned bytes (peak)", format_bytes(use.peak_pinned_bytes)),
            ("device bytes ahead (peak)", format_bytes(use.peak_device_bytes)),
            ("staged to handed over", f"{copy} (n={use.copies})" if use.copies else "-"),
        ]
        if use.staging_median_seconds is not None:
            rows.append(("staging into pinned buffers", f"median {shown_seconds(use.staging_median_seconds)}"))
        if use.copy_median_seconds is not None:
            timed = f"median {shown_seconds(use.copy_median_seconds)}, largest {shown_seconds(use.copy_max_seconds)}"
            rows.append(("copy to the device (device-timed)", timed))
    if use.pins:
        rows.append(("pinned by the loader", f"median {shown_seconds(use.pin_median_seconds)} a batch (n={use.pins})"))
    if use.step_copies:
        share = "-" if use.step_copy_share is None else f"{use.step_copy_share * 100:.0f} %"
        median = shown_seconds(use.step_copy_median_seconds)
        text = f"{share} of the steps, median {median} a step (n={use.step_copies})"
        if use.pageable_share is not None:
            text += f", {use.pageable_share * 100:.0f} % from pageable memory"
        rows.append(("copies to the device in the step", text))
    return rows


def node_rows(nodes: dict[str, NodeHeld]) -> Rows:
    """What each node built and held."""
    return [
        (
            f"node {node}",
            f"built {held.produced_batches} ({format_bytes(held.produced_bytes)}); held at most "
            f"{held.peak_held_batches} ({format_bytes(held.peak_held_bytes)}); at the end "
            f"{held.read_ahead_batches} ({format_bytes(held.read_ahead_bytes)})",
        )
        for node, held in nodes.items()
    ]


def coverage_rows(coverages: Coverages, num_batches: int | None) -> Rows:
    """Each epoch's coverage (``num_batches``: the batches a whole epoch has, where known)."""
    return [(f"coverage run {c.run} epoch {c.epoch}", _coverage(c, num_batches)) for c in coverages.coverage]


def remark_rows(remarks: Remarks) -> Rows:
    """The errors, then the notes."""
    return [("error", error) for error in remarks.errors] + [("note", note) for note in remarks.notes]


def _causes(peak: Causes) -> str:
    parts = [
        ("batches in flight", peak.in_flight),
        ("workers' baseline", peak.worker_baseline),
        ("workers' growth", peak.worker_growth),
        ("shared memory beyond in flight", peak.shared_beyond),
        ("the consumer", peak.consumer),
    ]
    shown = ", ".join(f"{name} {format_bytes(size)}" for name, size in parts)
    return f"{format_bytes(peak.total)} (PSS of the process tree and its shared memory): {shown}"


def _start(start: Start) -> str:
    text = (
        f"first batch after {format_seconds(start.first_batch_seconds)}, "
        f"{start.built_before_asked} batches built before the first request"
    )
    if start.runs > 1:
        text += f"; {format_seconds(start.seconds)} to the first batch over {start.runs} runs"
    return text


def _timing(t: Timing) -> str:
    if not t.n:
        return "-"
    return f"median {shown_seconds(t.median)}, p95 {shown_seconds(t.p95)} (n={t.n})"


def _waits(waits: Waits) -> str:
    """The input wait's share; where the consumer also waited for batches already
    built, the two apart: the builds' share is the one the verdict reads."""
    handed, steady = waits.steady_handover_seconds, waits.steady_seconds
    if not (waits.handover_seen and handed and steady):
        return f" ({waits.input_bound_fraction:.1%}): {waits.verdict}"
    return (
        f": {shown_seconds(waits.steady_starved_seconds)} ({waits.input_bound_fraction:.1%}) for batches not yet "
        f"built: {waits.verdict}; {shown_seconds(handed)} ({handed / steady:.1%}) for the hand-over of batches "
        "already built"
    )


def shown_seconds(seconds: float | None) -> str:
    """A duration in the unit that fits it (:func:`~queuetune.common.units.format_seconds`); ``-`` for none.

    >>> shown_seconds(None), shown_seconds(1.5)
    ('-', '1.50 s')
    """
    return "-" if seconds is None else format_seconds(seconds)


def _coverage(cov: Coverage, num_batches: int | None = None) -> str:
    """One epoch's coverage in words (``num_batches``: the batches a whole epoch has, where known)."""
    total = f" of {cov.total}" if cov.total is not None else ""
    text = (
        f"{cov.consumed}{total} {cov.unit}es consumed"
        if cov.unit == "batch"
        else f"{cov.consumed}{total} samples consumed"
    )
    if cov.unit == "sample key":
        text += f", told apart by key; more than once: {len(cov.duplicates)} ({cov.extra} extra)"
        if cov.repeats:
            shown = [f"{_key(r.item)} ×{r.count} (workers {', '.join(r.workers)})" for r in cov.repeats[:2]]
            text += ", e.g. " + ", ".join(shown) + (", …" if len(cov.duplicates) > len(shown) else "")
        if cov.partial:
            text += f"; coverage partial: {cov.unkeyed} of {cov.batches} batches not keyed, left out of these counts"
        text += _cut_short(cov, num_batches)
        return text + (f"; {cov.cause}" if cov.cause else "")
    text += f"; more than once: {_listing(cov.duplicates)}"
    text += _cut_short(cov, num_batches)
    if cov.never_count is not None:
        listed = _listing(cov.never)
        more = " …" if cov.never_count > len(cov.never) and not listed.endswith("…") else ""
        text += f"; never: {cov.never_count}" + (f" ({listed}{more})" if cov.never else "")
    return text


def _cut_short(cov: Coverage, num_batches: int | None) -> str:
    unit = "batches" if cov.unit == "batch" else "samples"
    if cov.resumed_after is not None and not cov.cut_short:
        text = f"; resumed after {cov.resumed_after} batches handed over before the restart"
        return text + (f": {cov.not_reached} {unit} not consumed in this run" if cov.not_reached is not None else "")
    if not cov.cut_short:
        return ""
    text = f"; epoch cut short after {cov.batches}" + (f" of {num_batches}" if num_batches is not None else "")
    text += " batches"
    if cov.not_reached is not None:
        text += f": {cov.not_reached} {'batches' if cov.unit == 'batch' else 'samples'} not reached"
    return text


def _key(item: int) -> str:
    """A sample's key: small integers as they are (a user's ids), fingerprints in hex."""
    return str(item) if abs(item) < 2**31 else f"{item % 2**64:016x}"


def _listing(items: list[int]) -> str:
    return ", ".join(map(str, items[:10])) + (" …" if len(items) > 10 else "") if items else "none"
