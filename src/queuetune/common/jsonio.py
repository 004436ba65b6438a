"""JSON text of plain data (reports, traces, tune results), with numpy scalars made plain."""

from __future__ import annotations

import json
from typing import Any


def dumps(data: Any, indent: int | None = 2) -> str:
    """Serialise report-like data to JSON.

    >>> import numpy as np
    >>> dumps({"n": np.int64(3)}, indent=None)
    '{"n": 3}'
    """
    return json.dumps(data, indent=indent, default=_plain)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
