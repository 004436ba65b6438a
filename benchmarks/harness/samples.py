"""Map-style datasets of real work for advice.py's pipelines: files read with a latency,
JPEGs decoded, cheap random tensors, Python strings read by forked workers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

IMAGES = 64  # JPEGs made at start-up, read in turn


IMAGE_SIZE = (500, 375)


SIDE = 128  # decoded images are resized to SIDE x SIDE


LATENCY = 0.005  # io-bound: the sleep after each file read, seconds


READ_BYTES = 65536  # io-bound: the bytes of each file a sample keeps


STRINGS = 1_000_000  # copy-on-read: the Python strings the dataset holds


STRING_BYTES = 64  # copy-on-read: a sample's bytes


class FileReads:
    """io-bound: sample ``i`` is file ``i % len(paths)`` read whole, then a sleep of
    ``LATENCY``; its first ``READ_BYTES`` bytes (zero-padded) as uint8."""

    def __init__(self, paths: list[Path], length: int) -> None:
        self.paths, self.length = paths, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Any:
        import torch

        data = self.paths[i % len(self.paths)].read_bytes()
        time.sleep(LATENCY)
        kept = bytearray(data[:READ_BYTES].ljust(READ_BYTES, b"\0"))
        return torch.frombuffer(kept, dtype=torch.uint8), i % 10


class Decoded:
    """decode: sample ``i`` is JPEG ``i % len(paths)`` decoded, resized to SIDE x SIDE, float CHW in [0, 1]."""

    def __init__(self, paths: list[Path], length: int) -> None:
        self.paths, self.length = paths, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Any:
        import numpy as np
        import torch
        from PIL import Image

        with Image.open(self.paths[i % len(self.paths)]) as image:
            small = image.convert("RGB").resize((SIDE, SIDE), Image.Resampling.BILINEAR)
        array = np.asarray(small, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return torch.from_numpy(np.ascontiguousarray(array)), i % 10


class Cheap:
    """model-bound: sample ``i`` is ``torch.rand(3, 96, 96)`` seeded with ``i``."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Any:
        import torch

        generator = torch.Generator().manual_seed(i)
        return torch.rand(3, 96, 96, generator=generator), i % 10


class Strings:
    """copy-on-read: ``STRINGS`` Python strings in a list; sample ``i`` is string
    ``i``'s first ``STRING_BYTES`` bytes as uint8 (reading it writes its reference count)."""

    def __init__(self) -> None:
        self.items = [f"sample {i:07d}: a line of text as a tokenizer would read it" for i in range(STRINGS)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        import torch

        kept = bytearray(self.items[i].encode()[:STRING_BYTES].ljust(STRING_BYTES, b"\0"))
        return torch.frombuffer(kept, dtype=torch.uint8), i % 10


def jpeg_paths(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.jpg"))
