"""What :func:`queuetune.analysis.resumes.spans` finds of an epoch split by a restart, over
sizes, batch sizes, stop points, checkpoints and ways to resume nobody chose:
a resume that continues the order reads every sample once; one that begins the
epoch again, doubles what was taken; one that skips batches of another order,
doubles and misses as many."""

from __future__ import annotations

import random

from hypothesis import assume, given
from hypothesis import strategies as st

from queuetune.analysis.resumes import LOST, REORDERED, RESTARTED, UNSET, Batch, Part, spans


def batches_of(order: list[int], size: int, start: float = 0.0, step: float = 0.05) -> list[Batch]:
    out = []
    for n, i in enumerate(range(0, len(order), size)):
        t = start + n * step
        out.append(Batch(t, t + step / 2, order[i : i + size]))
    return out


cases = st.fixed_dictionaries(
    {
        "samples": st.integers(2, 80),
        "size": st.integers(1, 9),
        "seed": st.integers(0, 2**16),
        "stop": st.floats(0.0, 1.0),
        "checkpoint_back": st.integers(0, 3),
    }
)


def stopped_part(case: dict) -> tuple[Part, list[list[int]], int]:
    """The stopped run: its epoch's batches up to the stop; those up to its last checkpoint; how many those are."""
    order = list(range(case["samples"]))
    random.Random(case["seed"]).shuffle(order)
    whole = batches_of(order, case["size"])
    handed = max(1, min(len(whole) - 1, int(case["stop"] * len(whole)))) if len(whole) > 1 else 0
    kept = max(1, handed - case["checkpoint_back"])
    part = Part({(0, 0): whole[:handed]}, samples=case["samples"], batches=len(whole), ended=False)
    part.checkpoint = whole[kept - 1].got if handed else None
    return part, [b.samples or [] for b in whole], kept


@given(cases)
def test_continuing_the_order_from_the_checkpoint_hands_over_every_sample_once(case):
    stopped, whole, kept = stopped_part(case)
    assume(len(whole) >= 2)
    rest = list(batches_of([i for batch in whole[kept:] for i in batch], case["size"], start=10.0))
    resumed = Part({(0, 0): rest}, samples=case["samples"], batches=len(whole), resumed={(0, 0)})
    (span,) = spans([stopped, resumed])
    assert (span.twice, span.never, span.before, span.after, span.assumed) == (0, 0, kept, len(rest), False)
    assert span.text().startswith("epoch 0 spans runs 1 and 2: every sample once")


@given(cases)
def test_beginning_the_epoch_again_doubles_what_was_taken(case):
    stopped, whole, kept = stopped_part(case)
    assume(len(whole) >= 2)
    again = batches_of([i for batch in whole for i in batch], case["size"], start=10.0)
    (span,) = spans([stopped, Part({(0, 0): again}, samples=case["samples"], batches=len(whole))])
    assert span.twice == sum(len(b) for b in whole[:kept]) and span.never == 0
    assert span.cause == RESTARTED and span.assumed


@given(cases, st.integers(0, 2**16))
def test_skipping_batches_of_another_order_doubles_and_misses_as_many(case, other):
    stopped, whole, kept = stopped_part(case)
    assume(len(whole) >= 2)
    order = list(range(case["samples"]))
    random.Random(other).shuffle(order)
    reordered = batches_of(order, case["size"], start=10.0)
    then = reordered[kept:]
    (span,) = spans([stopped, Part({(0, 0): then}, samples=case["samples"], batches=len(reordered))])
    assert span.twice == span.never  # as many samples taken as the epoch holds
    taken = {i for batch in whole[:kept] for i in batch}
    assert span.twice == len(taken & {i for b in then for i in b.samples or []})
    assert span.cause in (None, REORDERED) and (span.cause is None) == (span.twice == 0)


@given(cases)
def test_a_resumed_run_stopped_again_leaves_the_rest_not_reached(case):
    stopped, whole, kept = stopped_part(case)
    assume(len(whole) >= 3 and kept < len(whole) - 1)
    part_of_rest = batches_of([i for batch in whole[kept:-1] for i in batch], case["size"], start=10.0)
    resumed = Part({(0, 0): part_of_rest}, samples=case["samples"], batches=len(whole), ended=False)
    (span,) = spans([stopped, resumed])
    assert (span.twice, span.never, span.not_reached) == (0, 0, len(whole[-1]))


def test_a_restart_between_epochs_or_unknown_samples_give_no_span():
    whole = batches_of(list(range(8)), 2)
    ended = Part({(0, 0): whole}, samples=8, batches=4)
    assert spans([ended, Part({(0, 0): whole}, samples=8, batches=4)]) == []
    unknown = Part({(0, 0): [Batch(0, 1, None)]}, samples=8, batches=4, ended=False)
    assert spans([unknown, Part({(0, 0): whole}, samples=8, batches=4)]) == []


def run_of(ids: list[list[int]], start: float, dropped_first: int) -> list[Batch]:
    """A run's batches of ``ids``: the first ``dropped_first`` taken and dropped at
    once (the next asked for 10 µs later), the others each after a 50 ms step."""
    out, t = [], start
    for n, batch in enumerate(ids):
        step = 1e-5 if n < dropped_first else 0.05
        out.append(Batch(t, t + 1e-5, batch))
        t += 1e-5 + step
    return out


@given(st.integers(2, 60), st.integers(1, 6), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5), st.booleans())
def test_an_epoch_stopped_again_and_again_is_counted_across_every_run(samples, size, stops, islice_resumes):
    """Each run resumes where the one before stopped (from its state, or, where
    ``islice_resumes``, skipping the batches taken with the same order, dropped unused
    at once): every span reads every sample once, the last one the whole epoch."""
    whole = [b.samples or [] for b in batches_of(list(range(samples)), size)]
    assume(len(whole) >= 2)
    cuts = sorted({max(1, min(len(whole) - 1, int(f * len(whole)))) for f in stops})
    # Batches dropped unused are told by the steps after them: a run needs two of its own.
    assume(not islice_resumes or all(b - a >= 2 for a, b in zip(cuts, [*cuts[1:], len(whole)])))
    parts, begun = [], 0
    for n, cut in enumerate([*cuts, len(whole)]):
        skip = begun if islice_resumes else 0
        made = run_of(whole[begun - skip : cut], 100.0 * n, skip)
        said = {(0, 0)} if n and not islice_resumes else set()
        parts.append(Part({(0, 0): made}, resumed=said, samples=samples, batches=len(whole), ended=cut == len(whole)))
        begun = cut
    found = spans(parts)
    assert len(found) == len(cuts)
    assert all(span.twice == span.never == 0 for span in found), [s.text() for s in found]
    assert found[-1].before + found[-1].after == len(whole) and found[-1].not_reached == 0
    assert all(span.assumed == islice_resumes for span in found)


def test_the_sampler_epoch_drawn_tells_a_resume_known_or_a_set_epoch_forgotten():
    first = batches_of([3, 1, 0, 2, 5, 4, 7, 6], 2)
    other = batches_of([4, 5, 6, 7, 0, 1, 2, 3], 2, start=10.0)
    stopped = Part({(0, 1): first[:2]}, sampler_epochs={(0, 1): 1}, samples=8, batches=4, ended=False)
    same = Part({(0, 0): first[2:]}, sampler_epochs={(0, 0): 1}, samples=8, batches=4)
    (span,) = spans([stopped, same])
    assert span.once and not span.assumed and span.epoch == 1
    forgot = Part({(0, 0): other[2:]}, sampler_epochs={(0, 0): 0}, samples=8, batches=4)
    (span,) = spans([stopped, forgot])
    assert span.twice == span.never == 4 and span.cause == UNSET.format(drew=1, draws=0)
    assert "call sampler.set_epoch(1)" in span.text()


@given(st.integers(0, 5), st.integers(0, 8))
def test_an_epoch_ended_before_the_restart_and_the_next_drawn_after_it(drew, draws):
    whole = batches_of(list(range(8)), 2)
    stopped = Part({(0, 0): whole}, sampler_epochs={(0, 0): drew}, samples=8, batches=4, ended=False)
    resumed = Part({(0, 0): batches_of(list(range(8)), 2, start=9.0)}, sampler_epochs={(0, 0): draws}, samples=8)
    found = spans([stopped, resumed])
    if draws == drew + 1:
        assert found == []
    else:
        (span,) = found
        assert span.lost == draws - drew - 1 and not span.once and span.cause == LOST.format(drew=drew, draws=draws)
        assert ("lost" if draws > drew + 1 else "handed over again") in span.text()
