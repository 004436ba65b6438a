"""What :func:`queuetune.resumes.spans` finds of an epoch split by a restart, over
sizes, batch sizes, stop points, checkpoints and ways to resume nobody chose:
a resume that continues the order reads every sample once; one that begins the
epoch again, doubles what was taken; one that skips batches of another order,
doubles and misses as many."""

from __future__ import annotations

import random

from hypothesis import assume, given
from hypothesis import strategies as st

from queuetune.resumes import REORDERED, RESTARTED, Batch, Part, spans


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
