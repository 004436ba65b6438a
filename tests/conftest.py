import importlib.util
import os
import signal
import sys

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, os.path.dirname(__file__))

from helpers import assert_nothing_left_running
from ray_cluster import DRIVER_ENV

os.environ.update(DRIVER_ENV)  # before anything imports ray

# Importing readline (pytest imports pdb, which imports it) sets COLUMNS and LINES
# in the process's C environment, unseen by os.environ, and every subprocess a test
# starts inherits them: queuetune's tables honour COLUMNS, so a test's child would
# print at readline's width. Unless the suite itself was given them, they go.
for _name in ("COLUMNS", "LINES"):
    if _name not in os.environ:
        os.unsetenv(_name)

# A shell that starts the suite in the background has it ignore SIGINT; the
# tests that send SIGINT need Python's own handler (KeyboardInterrupt).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Each marker's test needs this module; without it, the test is skipped.
NEEDS = {
    "keras": "keras",
    "torch": "torch",
    "tf": "tensorflow",
    "ray": "ray",
    "plot": "matplotlib",
    "tensorboard": "tensorboard",
    "pillow": "PIL",
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, module in NEEDS.items():
        if item.get_closest_marker(marker) is not None and importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (the test is marked {marker!r})")


@pytest.fixture(autouse=True)
def nothing_left_running():
    """Every test ends with no queuetune thread and no child process alive."""
    yield
    assert_nothing_left_running()
