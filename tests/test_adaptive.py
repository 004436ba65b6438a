"""The depth controller on scripted observations."""
from __future__ import annotations

import pytest

from queuetune.adaptive import DepthController


def feed(controller, pattern):
    """pattern: 'w' waited, 'f' ready with the queue full, '.' ready, not full."""
    changes = []
    for step in pattern:
        new = controller.observe(waited=step == "w", full=step == "f")
        if new is not None:
            changes.append(new)
    return changes


def test_grows_after_two_waits_in_a_row():
    c = DepthController()
    assert feed(c, "w.w.w") == []
    assert feed(c, "ww") == [2]
    assert feed(c, "wwww") == [3, 4]


def test_shrinks_only_after_a_long_calm_with_the_queue_full():
    c = DepthController(depth=4, shrink_after=8)
    assert feed(c, "f" * 7 + "." + "f" * 7) == []
    assert feed(c, "f") == [3]


def test_a_wait_soon_after_shrinking_sets_a_floor():
    c = DepthController(depth=4, shrink_after=8)
    assert feed(c, "f" * 8) == [3]
    assert feed(c, "ww") == [4]
    assert c.floor == 4
    assert feed(c, "f" * 100) == []  # no more swinging between 3 and 4


def test_never_past_max_depth_or_when_it_cannot_grow():
    c = DepthController(max_depth=3)
    assert feed(c, "w" * 20) == [2, 3]
    c = DepthController()
    assert [c.observe(waited=True, full=False, can_grow=False) for _ in range(5)] == [None] * 5


@pytest.mark.parametrize("kwargs", [{"depth": 0}, {"max_depth": 0}, {"depth": 5, "max_depth": 4}, {"grow_after": 0}])
def test_bad_settings(kwargs):
    with pytest.raises(ValueError):
        DepthController(**kwargs)
