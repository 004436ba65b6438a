"""One module per framework; each is imported only when its loader is used."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise an ImportError naming the extra to install.

    >>> require("json", "none").__name__
    'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{module} is needed for this: pip install 'queuetune[{extra}]' ({exc})") from None
