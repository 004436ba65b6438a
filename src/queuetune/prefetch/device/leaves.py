"""A batch's leaves that go to the device, and the batch made again around their
copies (:func:`split`): dicts, lists and tuples (named tuples too) are walked,
what cannot go stays where it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class _Slot:
    """Where the ``index``-th leaf that moves stood."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def split(batch: Any, moves: Callable[[Any], bool]) -> tuple[list[Any], Any]:
    """The leaves of ``batch`` that ``moves`` takes, in order, and the batch's
    shape with a slot for each (:func:`fill` puts leaves back in).

    >>> leaves, shape = split({"x": 1.5, "y": (2, "a")}, lambda leaf: isinstance(leaf, int))
    >>> leaves, fill(shape, [20])
    ([2], {'x': 1.5, 'y': (20, 'a')})
    """
    found: list[Any] = []
    return found, _walk(batch, moves, found)


def _walk(node: Any, moves: Callable[[Any], bool], found: list[Any]) -> Any:
    if type(node) is dict:
        return {key: _walk(value, moves, found) for key, value in node.items()}
    if type(node) is list:
        return [_walk(value, moves, found) for value in node]
    if isinstance(node, tuple):
        items = [_walk(value, moves, found) for value in node]
        return type(node)(*items) if hasattr(node, "_fields") else type(node)(items)
    if moves(node):
        found.append(node)
        return _Slot(len(found) - 1)
    return node


def fill(shape: Any, leaves: list[Any]) -> Any:
    """``shape`` (from :func:`split`) with each slot's leaf put back."""
    if type(shape) is dict:
        return {key: fill(value, leaves) for key, value in shape.items()}
    if type(shape) is list:
        return [fill(value, leaves) for value in shape]
    if isinstance(shape, tuple):
        items = [fill(value, leaves) for value in shape]
        return type(shape)(*items) if hasattr(shape, "_fields") else type(shape)(items)
    if isinstance(shape, _Slot):
        return leaves[shape.index]
    return shape
