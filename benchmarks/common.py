"""What every benchmark prints about the machine it ran on."""
from __future__ import annotations

import os
import platform
from pathlib import Path


def machine() -> str:
    """Architecture, cores and processor model."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores" + (f" ({model})" if model else "")
