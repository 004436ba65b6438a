"""The small types that cross the package's edges: a loader's settings and the
kinds of loader a session watches.

>>> from typing import get_args
>>> "dataloader" in get_args(LoaderKind)
True
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

#: A loader's settings, by its framework's own names (its knobs): plain JSON
#: data, as a trace's meta, a tuning result and ``queuetune estimate`` hold them.
Settings: TypeAlias = dict[str, Any]

#: The kinds of loader a session watches, as its labels name them.
LoaderKind: TypeAlias = Literal["dataloader", "pydataset", "generator", "tf.data", "ray dataset", "prefetcher"]
