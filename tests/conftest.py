import os
import signal
import sys

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, os.path.dirname(__file__))

from helpers import assert_nothing_left_running  # noqa: E402
from ray_cluster import DRIVER_ENV  # noqa: E402

os.environ.update(DRIVER_ENV)  # before anything imports ray

# A shell that starts the suite in the background has it ignore SIGINT; the
# tests that send SIGINT need Python's own handler (KeyboardInterrupt).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def nothing_left_running():
    """Every test ends with no queuetune thread and no child process alive."""
    yield
    assert_nothing_left_running()
