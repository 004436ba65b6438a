"""``python -m queuetune``: the same command line as the ``queuetune`` script."""

import sys

from queuetune.cli import main

if __name__ == "__main__":
    sys.exit(main())
