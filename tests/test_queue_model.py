"""The queue model: exact results on constant times, tf.data's closed form on
exponential ones, monotonicity in depth, ordered delivery, traces, bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuetune.frameworks import rules_of
from queuetune.model import (
    Distribution,
    PipelineModel,
    compare_with_closed_form,
    dispatch_time,
    fit,
    fit_unbuffered,
    handover_time,
    kept_by_consumer,
    predict_curve,
    simulate,
    tfdata_empty_probability,
    tfdata_expected_wait,
    transit_time,
)
from queuetune.model.simulate import WARMUP
from queuetune.record.trace import Consumed, Produced, Trace


def fitted(trace, ordered=True):
    """The model of a recorded run, by the rules of the loader its meta names."""
    return fit(trace, rules_of(trace.meta), ordered)


def fitted_unbuffered(unbuffered, buffered):
    return fit_unbuffered(unbuffered, buffered, rules_of(buffered.meta))


def transit(trace):
    return transit_time(trace, rules_of(trace.meta))


def dispatch(trace):
    return dispatch_time(trace, rules_of(trace.meta))


C = Distribution.constant
MiB = 2.0**20


def model(producer, consumer, workers=1, batch_bytes=MiB, ordered=True):
    return PipelineModel(producer, consumer, workers, batch_bytes, ordered)


# --- constant times: exact answers ---------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 2, 3, 5, 10, 32])
def test_slow_consumer_sets_throughput_and_fills_the_queue(depth):
    # 1 worker builds in 10 ms, the step takes 20 ms: the consumer is the bottleneck.
    p = simulate(model(C(0.010), C(0.020)), depth)
    assert p.throughput == pytest.approx(50.0, rel=1e-9)
    assert p.input_wait_fraction == pytest.approx(0.0, abs=1e-9)
    assert p.empty_fraction == 0.0
    # The queue stays full: depth batches started and not taken, plus the one held.
    assert p.peak_in_flight_batches == depth + 1
    assert p.peak_queued_batches == depth
    assert p.peak_built_batches == depth + 1
    assert p.mean_in_flight_batches == pytest.approx(depth + 1, rel=1e-6)
    # Each take empties a place that the worker refills 10 ms into the 20 ms step.
    assert p.mean_queued_batches == pytest.approx(depth - 0.5, rel=1e-6)
    assert p.mean_built_batches == pytest.approx(depth + 0.5, rel=1e-6)
    assert p.peak_in_flight_bytes == (depth + 1) * MiB
    assert p.mean_in_flight_bytes == pytest.approx((depth + 1) * MiB, rel=1e-6)


@pytest.mark.parametrize("depth", range(1, 11))
def test_slow_loader_throughput_grows_with_depth_up_to_the_workers(depth):
    # 4 workers build in 20 ms (200 batches/s together), the step takes 2 ms (500/s).
    # Batches arrive in groups of min(depth, 4) every 20 ms; with 1920 batches the
    # warm-up (96) and the counted ones (1824) are whole numbers of groups, so the
    # window starts and ends at the same point of the cycle and the rate is exact.
    p = simulate(model(C(0.020), C(0.002), workers=4), depth, batches=1920)
    # A place under the bound is freed when the consumer takes a batch, so
    # min(depth, workers) builds run at once, even at depth 1.
    expected = min(depth, 4) / 0.020
    assert p.throughput == pytest.approx(expected, rel=1e-9)
    assert p.input_wait_fraction == pytest.approx(1 - expected * 0.002, abs=1e-9)
    assert p.peak_in_flight_batches <= depth + 1
    if depth >= 4:
        assert p.throughput == pytest.approx(min(4 / 0.020, 1 / 0.002), rel=1e-9)


def test_depth_one_overlaps_one_build_with_the_step():
    # Not 1/(build + step) = 45.5/s: the worker starts the next batch when the
    # consumer takes one, so depth 1 with build 20 ms and step 2 ms gives 1/20 ms.
    p = simulate(model(C(0.020), C(0.002), workers=4), 1)
    assert p.throughput == pytest.approx(50.0, rel=1e-9)
    assert p.peak_in_flight_batches == 2
    equal = simulate(model(C(0.010), C(0.010)), 1)
    assert equal.throughput == pytest.approx(100.0, rel=1e-9)


def test_extra_workers_beyond_the_depth_stay_idle():
    few = simulate(model(C(0.020), C(0.002)), 3, workers=3)
    many = simulate(model(C(0.020), C(0.002)), 3, workers=16)
    assert few.throughput == pytest.approx(many.throughput, rel=1e-9)
    assert many.peak_in_flight_batches <= 4


# --- monotonicity and ordered delivery -------------------------------------------------------

PRODUCERS = [
    Distribution.exponential(0.02),
    Distribution.lognormal(0.02, 1.5),
    Distribution.stalls(0.01, 0.3, 0.05),
]


@pytest.mark.parametrize("producer", PRODUCERS, ids=repr)
@pytest.mark.parametrize("workers", [1, 4])
def test_throughput_and_peak_do_not_fall_with_depth(producer, workers):
    curve = predict_curve(model(producer, Distribution.exponential(0.005), workers), range(1, 17))
    throughput = [p.throughput for p in curve]
    peaks = [p.peak_in_flight_batches for p in curve]
    # Same seed, same draws at every depth: only scheduling differs, so allow 1 %.
    for before, after in itertools.pairwise(throughput):
        assert after >= before * 0.99
    assert peaks == sorted(peaks)
    assert all(p.peak_in_flight_batches <= p.depth + 1 for p in curve)
    assert throughput[-1] > throughput[0]


def test_ordered_delivery_is_never_faster_than_unordered():
    stalls = Distribution.stalls(0.01, 0.3, 0.05)
    step = C(0.004)
    ordered = predict_curve(model(stalls, step, workers=4), range(1, 17))
    unordered = predict_curve(model(stalls, step, workers=4, ordered=False), range(1, 17))
    for o, u in zip(ordered, unordered):
        assert o.ordered and not u.ordered
        assert o.throughput <= u.throughput * 1.001
    # Head-of-line blocking: one stalled batch holds up the finished ones behind it.
    at4 = {p.ordered: p.throughput for p in (ordered[3], unordered[3])}
    assert at4[True] < 0.6 * at4[False]


def test_unordered_equals_ordered_with_one_worker():
    dist = Distribution.lognormal(0.01, 1.0)
    a = simulate(model(dist, C(0.008)), 4)
    b = simulate(model(dist, C(0.008), ordered=False), 4)
    assert a.throughput == b.throughput
    assert a.mean_in_flight_batches == b.mean_in_flight_batches


# --- tf.data's closed form -------------------------------------------------------------------


def test_closed_form_values():
    assert tfdata_empty_probability(1.0, 1.0, 3) == 0.25
    assert tfdata_empty_probability(0.5, 1.0, 1) == pytest.approx(0.5 / 0.75)
    assert tfdata_empty_probability(2.0, 1.0, 1) == pytest.approx(1 / 3)
    assert tfdata_empty_probability(0.0, 1.0, 5) == 1.0
    assert tfdata_empty_probability(3.0, 1.0, 0) == 1.0
    # Continuous through x == y, and no overflow for a deep buffer and a slow consumer.
    assert tfdata_empty_probability(1.0 + 1e-12, 1.0, 7) == pytest.approx(1 / 8)
    assert tfdata_empty_probability(1.0 - 1e-12, 1.0, 7) == pytest.approx(1 / 8)
    assert 0.0 <= tfdata_empty_probability(10.0, 1.0, 1000) < 1e-300
    assert tfdata_empty_probability(0.5, 1.0, 1000) == pytest.approx(0.5)
    assert tfdata_expected_wait(0.5, 2.0, 1) == pytest.approx(2.0 * 0.75 / (1 - 0.25**2))
    with pytest.raises(ValueError):
        tfdata_empty_probability(1.0, 0.0, 1)
    with pytest.raises(ValueError):
        tfdata_empty_probability(-1.0, 1.0, 1)
    with pytest.raises(ValueError):
        tfdata_empty_probability(1.0, 1.0, -1)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("ratio", [0.5, 1.0, 2.0])
def test_simulation_agrees_with_tfdata_closed_form(n, ratio):
    # One worker, exponential times: consumer mean x = ratio, producer mean y = 1.
    # 40 000 batches give 38 000 counted requests; a binomial standard error is
    # at most 0.0026, and the queue's memory inflates it: over 20 seeds the
    # simulated empty fraction had a standard deviation of at most 0.0048 (wait:
    # 0.0065 s) for these cases. 0.02 and 0.03 are about 4 of those, while an
    # off-by-one in the depth moves the answer by 0.04 or more for n <= 2.
    c = compare_with_closed_form(ratio, 1.0, n, batches=40_000, seed=0)
    assert c["simulated_empty"] == pytest.approx(c["closed_form_empty"], abs=0.02)
    assert c["simulated_wait"] == pytest.approx(c["closed_form_wait"], abs=0.03)
    assert abs(c["simulated_empty"] - c["closed_form_empty"]) <= 5 * c["empty_stderr"] + 1e-3
    # As a fraction of time, the consumer idles like an M/M/1 queue of n + 1
    # places (n under the bound, one held), whose empty probability has the same form.
    p = simulate(model(Distribution.exponential(1.0), Distribution.exponential(ratio)), n, batches=40_000)
    assert p.input_wait_fraction == pytest.approx(tfdata_empty_probability(ratio, 1.0, n + 1), abs=0.02)


def test_closed_form_off_by_one_is_detected():
    c = compare_with_closed_form(1.0, 1.0, 1, batches=40_000)
    assert c["simulated_empty"] == pytest.approx(0.5, abs=0.02)
    assert abs(c["simulated_empty"] - tfdata_empty_probability(1.0, 1.0, 2)) > 0.1


# --- traces ------------------------------------------------------------------------------


def hand_trace(meta=None):
    # Two workers; builds of 0.1, 0.2, ... 0.6 s; two runs with steps 0.5 0.5 | 0.25 0.75.
    produced = [
        Produced(start=i, end=i + 0.1 * (i + 1), nbytes=size, worker="ab"[i % 2])
        for i, size in enumerate([100, 300, 200, 400, 500, 600])
    ]
    consumed = [
        Consumed(requested=0.0, consumed=1.0, run=0),
        Consumed(requested=1.5, consumed=1.6, run=0),
        Consumed(requested=2.1, consumed=2.1, run=0),
        Consumed(requested=10.0, consumed=10.0, run=1),
        Consumed(requested=10.25, consumed=10.5, run=1),
        Consumed(requested=11.25, consumed=11.3, run=1),
    ]
    return Trace(meta=meta or {}, produced=produced, consumed=consumed)


def serial_trace(build=0.002, step=0.002, n=40):
    # A plain generator run in the consumer's thread (depth 0): each batch is
    # built when asked for, then the step runs.
    produced, consumed, t = [], [], 0.0
    for _ in range(n):
        produced.append(Produced(start=t, end=t + build, nbytes=64, worker="thread-1"))
        consumed.append(Consumed(requested=t, consumed=t + build))
        t += build + step
    return Trace(meta={"framework": "python", "loader": "generator", "depth": 0}, produced=produced, consumed=consumed)


def test_a_generator_built_on_request_has_no_dispatch_delay_and_reads_ahead_in_parallel():
    model = fitted(serial_trace())
    # The build starts at the request, not a step after the last hand-over.
    assert dispatch(serial_trace()) == pytest.approx(0.0, abs=1e-9)
    assert model.dispatch == pytest.approx(0.0, abs=1e-9)
    # One thread reading ahead overlaps build and step: about 1 / 2 ms, not 1 / 4 ms.
    (at_two,) = predict_curve(model, depths=[2], workers=[1], seed=0)
    assert at_two.throughput == pytest.approx(500.0, rel=0.05)
    # The same trace from a loader that reads ahead would count the step as dispatch.
    ahead = serial_trace()
    ahead.meta.depth = 2
    assert dispatch(ahead) == pytest.approx(0.002)


def request_trace(build: float, step: float, n: int = 40) -> Trace:
    """Requests of ``build`` seconds (``prefetch(0)``: each builds its batch), then a step."""
    t, consumed = 0.0, []
    for _ in range(n):
        consumed.append(Consumed(requested=t, consumed=t + build))
        t += build + step
    produced = [Produced(c.requested, c.consumed, 64) for c in consumed]
    return Trace(meta={"framework": "python", "loader": "iterable", "depth": 0}, produced=produced, consumed=consumed)


def cycled_trace(request: float, cycle: float, n: int = 40) -> Trace:
    """A read-ahead run: requests of ``request`` seconds, one batch every ``cycle``."""
    consumed = [Consumed(requested=i * cycle, consumed=i * cycle + request) for i in range(n)]
    return Trace(meta={"framework": "python", "loader": "iterable", "depth": 0}, consumed=consumed)


def test_a_read_ahead_out_of_sight_is_modelled_from_a_run_without_it():
    # Bare, a request takes 11 ms (10 ms of building, 1 ms of the iterator) and
    # the step 4 ms. Read ahead, the builds bound it (one every 10 ms), and each
    # request waits 6 ms for its batch: what stays with the consumer is
    # 11 - 10 = 1 ms, not the 7 ms a request lasts.
    assert kept_by_consumer(request_trace(0.011, 0.004), cycled_trace(0.007, 0.010)) == pytest.approx(0.001)
    model = fitted_unbuffered(request_trace(0.011, 0.004), cycled_trace(0.007, 0.010))
    assert model.producer.mean == pytest.approx(0.010) and model.consumer.mean == pytest.approx(0.005)
    # The place frees as the request pops the batch: at depth 1 the next build
    # starts then, not after the 1 ms the consumer keeps.
    assert model.handover == 0.0
    at_one, deep = predict_curve(model, depths=[1, 4], workers=[1], seed=0)
    assert at_one.throughput == pytest.approx(100.0, rel=0.02)
    assert deep.throughput == pytest.approx(100.0, rel=0.02)
    # The step bounds it (every batch ready, 1 ms to take it): the requests' lower quartile.
    fast = fitted_unbuffered(request_trace(0.004, 0.008), cycled_trace(0.001, 0.009))
    assert fast.producer.mean == pytest.approx(0.003) and fast.consumer.mean == pytest.approx(0.009)
    # Fitted to the bare run alone, the model would put the 1 ms in the build.
    assert fitted(request_trace(0.011, 0.004)).producer.mean == pytest.approx(0.011)


def test_sampling_a_measured_distribution_keeps_its_rare_values():
    # 1 stall in 50 measured: every pass over the values draws it once, so a
    # simulation of 2000 batches sees 40 of them, not 40 give or take 6.
    values = [0.01] * 49 + [0.5]
    drawn = Distribution(values).sample(np.random.default_rng(0), 2000)
    assert (drawn == 0.5).sum() == 40
    assert drawn.mean() == pytest.approx(np.mean(values))
    # ... in a shuffled order, not the order measured.
    assert drawn[:50].tolist() != values


def test_fit_builds_the_distributions():
    m = fitted(hand_trace())
    assert np.sort(m.producer.values) == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    # Batches 1, 3, 4, 5 were built before they were asked for; their waits
    # (0.1, 0, 0.25, 0.05) are hand-over time, mean 0.1, added to each step.
    assert handover_time(hand_trace()) == pytest.approx(0.1)
    # Steps never cross runs: 2.1 -> 10.0 is not a step.
    assert np.sort(m.consumer.values) == pytest.approx(np.array([0.25, 0.5, 0.5, 0.75]) + 0.1)
    assert m.workers == 2
    assert m.batch_bytes == 350.0
    assert m.ordered
    assert not fitted(hand_trace(), ordered=False).ordered
    assert simulate(m, 2, batches=100).throughput > 0


@pytest.mark.parametrize(
    "framework, settings_, workers",
    [
        ("keras", {"workers": 4, "max_queue_size": 10}, 4),
        ("torch", {"num_workers": 3}, 3),
        ("torch", {"num_workers": 0}, 1),
        ("queuetune", {"workers": 3, "mode": "thread"}, 3),
        ("queuetune", {"workers": "auto"}, 2),
        (None, {}, 2),
    ],
)
def test_fit_reads_the_workers_setting(framework, settings_, workers):
    assert fitted(hand_trace({"framework": framework, "settings": settings_})).workers == workers


def test_fit_single_worker_name():
    trace = hand_trace()
    for p in trace.produced:
        p.worker = ""
    assert fitted(trace).workers == 1


# --- the loaders' rules: assignment, release, transit ------------------------------------------


def test_transit_delays_a_waiting_consumer_until_the_queue_covers_it():
    # 1 worker, 10 ms builds, 2 ms steps, 3 ms from a worker's end to the consumer.
    slow = PipelineModel(C(0.010), C(0.002), 1, MiB, transit=0.003)
    # Depth 1: the next build starts at the take, so each batch costs build + transit.
    assert simulate(slow, 1).throughput == pytest.approx(1 / 0.013, rel=1e-9)
    # Depth 2: the worker builds while the last batch travels; transit is hidden.
    assert simulate(slow, 2).throughput == pytest.approx(100.0, rel=1e-9)
    assert simulate(model(C(0.010), C(0.002)), 1).throughput == pytest.approx(100.0, rel=1e-9)


def test_release_at_request_submits_while_the_consumer_waits():
    # 2 workers, 10 ms builds, 2 ms steps, depth 1. Freed at the take, one batch
    # is built at a time: 100/s. Freed at the request (Keras), the next batch is
    # submitted while the consumer waits: two builds overlap, 2 batches per 12 ms.
    take = PipelineModel(C(0.010), C(0.002), 2, MiB)
    request = PipelineModel(C(0.010), C(0.002), 2, MiB, release="request")
    assert simulate(take, 1).throughput == pytest.approx(100.0, rel=1e-9)
    assert simulate(request, 1).throughput == pytest.approx(2 / 0.012, rel=1e-9)
    assert simulate(request, 1).peak_in_flight_batches == 2


def test_release_at_the_take_waits_for_the_hand_over():
    # 1 worker, 10 ms builds, 2 ms steps of which the first 1 ms takes the batch
    # from the loader: torch sends the next index after that, so at depth 1 a
    # batch costs 11 ms. Freed at the request (Keras), the hand-over does not delay it.
    take = PipelineModel(C(0.010), C(0.002), 1, MiB, handover=0.001)
    assert simulate(take, 1).throughput == pytest.approx(1 / 0.011, rel=1e-9)
    assert simulate(take, 2).throughput == pytest.approx(100.0, rel=1e-9)
    request = PipelineModel(C(0.010), C(0.002), 1, MiB, release="request", handover=0.001)
    assert simulate(request, 1).throughput == pytest.approx(100.0, rel=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_round_robin_is_never_faster_than_a_shared_pool(seed):
    def curve(assignment):
        m = PipelineModel(Distribution.exponential(0.02), C(0.007), 4, MiB, assignment=assignment)
        return [simulate(m, d, seed=seed).throughput for d in (2, 4, 8, 16)]

    shared, round_robin = curve("shared"), curve("round_robin")
    # Up to one batch per worker the two rules start every batch at the same time.
    assert round_robin[:2] == pytest.approx(shared[:2], rel=1e-12)
    # Deeper, a long build holds up the batches queued behind it on its worker.
    for rr, sh in zip(round_robin[2:], shared[2:]):
        assert rr < sh


def test_round_robin_equals_shared_on_constant_times():
    for depth in (2, 4, 8):
        rr = PipelineModel(C(0.02), C(0.007), 4, MiB, assignment="round_robin")
        assert simulate(rr, depth).throughput == pytest.approx(simulate(model(C(0.02), C(0.007), 4), depth).throughput)


@pytest.mark.parametrize(
    "meta, rules",
    [
        ({"framework": "torch", "settings": {"num_workers": 2}}, ("round_robin", "take")),
        ({"framework": "keras", "settings": {"workers": 2, "max_queue_size": 3}}, ("shared", "request")),
        ({"framework": "queuetune", "settings": {"workers": 2, "mode": "thread"}}, ("shared", "take")),
        ({}, ("shared", "take")),
    ],
)
def test_fit_takes_the_loaders_rules(meta, rules):
    m = fitted(hand_trace(meta))
    assert (m.assignment, m.release) == rules
    assert m.handover == pytest.approx(handover_time(hand_trace(meta)))


def test_transit_is_measured_from_waited_batches_or_assumed_for_processes():
    # hand_trace: batches 0 and 2 were waited for (end after the request).
    assert transit(hand_trace()) == 0.0  # fewer than 3 waited batches, threads
    processes = hand_trace({"framework": "torch", "settings": {"num_workers": 2}})
    assert transit(processes) == pytest.approx(handover_time(processes))
    produced = [Produced(r - 0.5, r + 0.1, 1) for r in (1.0, 2.0, 3.0, 4.0)]
    consumed = [Consumed(r, r + 0.13) for r in (1.0, 2.0, 3.0)] + [Consumed(4.2, 4.21)]
    waited = Trace(meta={"framework": "torch", "settings": {"num_workers": 1}}, produced=produced, consumed=consumed)
    # 0.13 - 0.1 from end to hand-over for three waited batches; too few ready ones
    # for a hand-over time, so the whole trip is transit.
    assert transit(waited) == pytest.approx(0.03)


def test_dispatch_delays_each_start_when_the_workers_bound_throughput():
    # 1 worker, 10 ms builds, 2 ms steps: producer-bound, so a 1 ms wait before
    # every build costs 1 ms a batch at any depth.
    late = PipelineModel(C(0.010), C(0.002), 1, MiB, dispatch=0.001)
    for depth in (1, 2, 8):
        assert simulate(late, depth).throughput == pytest.approx(1 / 0.011, rel=1e-9)
    # Consumer-bound (1 ms builds, 10 ms steps) with room to read ahead, it is hidden.
    hidden = PipelineModel(C(0.001), C(0.010), 1, MiB, dispatch=0.001)
    assert simulate(hidden, 2).throughput == pytest.approx(100.0, rel=1e-9)


def test_dispatch_time_is_measured_from_the_event_the_loaders_rule_names():
    keras = Trace(
        meta={"framework": "keras", "settings": {"workers": 1, "max_queue_size": 1}},
        # batch i starts 2 ms after the request at i + 0.6 (the previous end, i + 0.5, is earlier)
        produced=[Produced(0.0, 0.5, 1, worker="w")] + [Produced(i + 0.602, i + 1.5, 1, worker="w") for i in range(6)],
        consumed=[Consumed(i + 0.6, i + 0.7) for i in range(7)],
    )
    assert dispatch(keras) == pytest.approx(0.002)
    # The same times read by torch's rule: the place frees at the hand-over
    # (i + 0.7), after the start, so the latest event before it is the previous
    # batch's end at i + 0.5: 102 ms.
    torch_meta = {"framework": "torch", "settings": {"num_workers": 1}}
    torch_rule = Trace(meta=torch_meta, produced=keras.produced, consumed=keras.consumed)
    assert dispatch(torch_rule) == pytest.approx(0.102)
    assert fitted(keras).dispatch == pytest.approx(0.002)
    # Too few batches after each worker's first: no estimate.
    assert dispatch(Trace(produced=keras.produced[:3], consumed=keras.consumed[:3])) == 0.0


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"assignment": "random"}, ValueError, "assignment must be one of"),
        ({"release": "never"}, ValueError, "release must be one of"),
        ({"transit": -1.0}, ValueError, "transit"),
        ({"transit": "1ms"}, TypeError, "transit"),
        ({"handover": 0.02}, ValueError, "cannot exceed the shortest step"),
        ({"dispatch": -0.001}, ValueError, "dispatch"),
        ({"dispatch": None}, TypeError, "dispatch"),
    ],
)
def test_bad_rules(kwargs, error, message):
    with pytest.raises(error, match=message):
        PipelineModel(C(0.01), C(0.01), 1, MiB, **kwargs)


def test_too_short_traces_are_refused():
    short = hand_trace()
    short.produced = short.produced[:4]
    with pytest.raises(ValueError, match="4 produced batches"):
        fitted(short)
    few_steps = hand_trace()
    few_steps.consumed = few_steps.consumed[:2] + few_steps.consumed[3:5]
    with pytest.raises(ValueError, match="2 consumer steps"):
        fitted(few_steps)
    with pytest.raises(ValueError):
        fitted(Trace())
    instant = hand_trace()
    for p in instant.produced:
        p.end = p.start
    with pytest.raises(ValueError, match="positive mean"):
        fitted(instant)


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, error",
    [
        (0, ValueError),
        (-3, ValueError),
        (1.5, TypeError),
        (2.0, TypeError),
        ("4", TypeError),
        (True, TypeError),
        (None, TypeError),
    ],
)
def test_bad_depths_and_workers(bad, error):
    m = model(C(0.01), C(0.01))
    if bad != 0:  # depth 0 is a loader with no read-ahead
        with pytest.raises(error):
            simulate(m, bad)
    if bad is not None:
        with pytest.raises(error):
            simulate(m, 2, workers=bad)
        with pytest.raises(error):
            PipelineModel(C(0.01), C(0.01), bad, 1.0)
    if bad != 0:
        with pytest.raises(error):
            predict_curve(m, [1, bad])


def test_depth_zero_builds_each_batch_when_asked():
    p = simulate(model(C(0.010), C(0.020), workers=4), 0, batches=200)
    assert p.throughput == pytest.approx(1 / 0.030)
    assert p.input_wait_fraction == pytest.approx(1 / 3)
    assert (p.peak_in_flight_batches, p.peak_queued_batches, p.peak_built_batches) == (1, 0, 1)
    assert p.workers == 1


def test_bad_batches_and_models():
    m = model(C(0.01), C(0.01))
    with pytest.raises(ValueError):
        simulate(m, 1, batches=5)
    with pytest.raises(ValueError):
        simulate(m, 1, seed=-1)
    with pytest.raises(TypeError):
        PipelineModel([0.1], C(0.01), 1, 1.0)
    with pytest.raises(ValueError):
        PipelineModel(C(0.01), C(0.01), 1, -1.0)
    with pytest.raises(TypeError):
        PipelineModel(C(0.01), C(0.01), 1, 1.0, ordered="yes")
    with pytest.raises(TypeError):
        predict_curve(m, 4)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Distribution([]),
        lambda: Distribution([0.1, -0.1]),
        lambda: Distribution([0.1, math.nan]),
        lambda: Distribution([0.1, math.inf]),
        lambda: Distribution([0.0, 0.0]),
        lambda: C(-1.0),
        lambda: C(0.0),
        lambda: Distribution.exponential(math.nan),
        lambda: Distribution.lognormal(0.01, -1.0),
        lambda: Distribution.stalls(0.01, 0.1, 1.5),
        lambda: Distribution.stalls(0.0, 0.1, 0.0),
    ],
)
def test_bad_distributions_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


def test_distributions_reject_non_numbers():
    with pytest.raises(TypeError):
        Distribution([0.1, "0.2"])
    with pytest.raises(TypeError):
        Distribution([True])
    with pytest.raises(TypeError):
        Distribution(0.1)
    with pytest.raises(TypeError):
        C(None)


def test_distribution_sampling():
    rng = np.random.default_rng(3)
    measured = Distribution([0.01, 0.02, 0.04])
    assert set(measured.sample(rng, 500).tolist()) == {0.01, 0.02, 0.04}
    assert measured.mean == pytest.approx(0.07 / 3) and measured.minimum == 0.01
    assert Distribution.exponential(0.02).sample(rng, 200_000).mean() == pytest.approx(0.02, rel=0.02)
    heavy = Distribution.lognormal(0.02, 1.0).sample(rng, 200_000)
    assert heavy.mean() == pytest.approx(0.02, rel=0.03) and np.median(heavy) < 0.02
    stalled = Distribution.stalls(0.01, 0.5, 0.1).sample(rng, 100_000)
    assert set(np.round(stalled, 9).tolist()) == {0.01, 0.51}
    assert (stalled > 0.1).mean() == pytest.approx(0.1, abs=0.01)
    assert C(0.3).values is None and measured.values.tolist() == [0.01, 0.02, 0.04]
    assert "stalls" in repr(Distribution.stalls(0.01, 0.5, 0.1)) and "3 values" in repr(measured)


# --- the API ------------------------------------------------------------------------------


def test_predict_curve_shape_and_reproducibility():
    m = model(Distribution.lognormal(0.02, 1.0), Distribution.exponential(0.005), workers=2)
    curve = predict_curve(m)
    assert [p.depth for p in curve] == list(range(1, 33))
    assert {p.workers for p in curve} == {2}
    grid = predict_curve(m, depths=[1, 4], workers=[1, 3])
    assert [(p.workers, p.depth) for p in grid] == [(1, 1), (1, 4), (3, 1), (3, 4)]
    assert predict_curve(m, [2], workers=3)[0].workers == 3
    assert simulate(m, 4, seed=7) == simulate(m, 4, seed=7)
    assert simulate(m, 4, seed=7).throughput != simulate(m, 4, seed=8).throughput
    d = curve[0].to_dict()
    assert (
        d["depth"] == 1
        and d["batches"] == 2000
        and set(d)
        >= {
            "throughput",
            "input_wait_fraction",
            "mean_in_flight_batches",
            "peak_in_flight_batches",
            "mean_in_flight_bytes",
            "peak_in_flight_bytes",
            "mean_queued_batches",
            "peak_queued_batches",
        }
    )


# --- invariants --------------------------------------------------------------------------

durations = st.floats(min_value=0.001, max_value=0.1)
kinds = st.sampled_from(["constant", "exponential"])


@settings(max_examples=150, deadline=None)
@given(
    producer=st.tuples(kinds, durations),
    consumer=st.tuples(kinds, durations),
    workers=st.integers(1, 6),
    depth=st.integers(1, 10),
    ordered=st.booleans(),
    batches=st.integers(20, 300),
    seed=st.integers(0, 2**32),
    rules=st.tuples(st.sampled_from(["shared", "round_robin"]), st.sampled_from(["take", "request"])),
    transit=st.sampled_from([0.0, 0.001, 0.05]),
    handover=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_invariants(producer, consumer, workers, depth, ordered, batches, seed, rules, transit, handover):
    make = {"constant": C, "exponential": Distribution.exponential}
    prod, cons = make[producer[0]](producer[1]), make[consumer[0]](consumer[1])
    m = PipelineModel(prod, cons, workers, 10.0, ordered, rules[0], rules[1], transit, handover=handover * cons.minimum)
    p = simulate(m, depth, batches=batches, seed=seed)
    assert 0.0 <= p.input_wait_fraction <= 1.0
    assert 0.0 <= p.empty_fraction <= 1.0
    assert p.peak_in_flight_batches <= depth + 1
    # Freed at the request, the place of the awaited batch is refilled while the
    # consumer waits: depth + 1 batches can be built and not taken.
    extra = 1 if rules[1] == "request" else 0
    assert p.peak_queued_batches <= depth + extra
    assert p.peak_built_batches <= depth + 1
    assert p.mean_queued_batches <= p.mean_built_batches + 1e-9
    assert p.mean_built_batches <= p.mean_in_flight_batches + 1e-9
    assert p.mean_in_flight_batches <= p.peak_in_flight_batches + 1e-9
    assert p.peak_in_flight_bytes == p.peak_in_flight_batches * 10.0
    counted = batches - int(batches * WARMUP)
    wall = counted / p.throughput
    if cons.minimum:
        # Every counted step lasts at least the shortest step time.
        assert p.throughput <= 1 / cons.minimum * (1 + 1e-9)
    # Batches taken in the window were built in it (at most workers per shortest
    # build, plus one in progress per worker) or were waiting at its start (at most depth).
    if prod.minimum:
        assert counted <= workers * (wall / prod.minimum + 1) + depth + 1 + 1e-6


@pytest.mark.parametrize("depth", [0, 1, 4])
def test_warmup_leaves_out_the_batches_given(depth):
    # 10 slow builds, then fast ones: left out, only the consumer's 20 ms steps remain
    # (at depth 0 each step also builds its batch: 30 ms).
    m = model(Distribution.replay([0.1] * 10 + [0.01] * 30), C(0.02), workers=2)
    rate = 1 / (0.03 if depth == 0 else 0.02)
    assert simulate(m, depth, batches=40, warmup=12).throughput == pytest.approx(rate)
    assert simulate(m, depth, batches=40, warmup=0).throughput < 0.8 * rate
    default = simulate(m, depth, batches=40, warmup=int(40 * WARMUP))
    assert simulate(m, depth, batches=40).throughput == default.throughput


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (21, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_warmups(bad, error):
    with pytest.raises(error, match="warmup"):
        simulate(model(C(0.01), C(0.01)), 1, batches=40, warmup=bad)
