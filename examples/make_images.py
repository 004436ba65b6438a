"""Make an ImageFolder of JPEG files for examples/train_torchvision.py.

    python examples/make_images.py images --count 2000

writes ``images/class_0/00000.jpg`` ... (320x240, quality 90, ten classes), seeded
so that every run makes the same files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from images import make_images


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where to write the class folders")
    parser.add_argument("--count", type=int, default=2000, help="images in all (default 2000)")
    parser.add_argument("--classes", type=int, default=10, help="class folders (default 10)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.classes < 1:
        parser.error("--count and --classes must be at least 1")
    paths = make_images(args.folder, args.count, args.classes)
    print(f"{len(paths)} JPEGs of 320x240 in {args.classes} classes under {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
