import os
import sys

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, os.path.dirname(__file__))

from helpers import assert_nothing_left_running  # noqa: E402
from ray_cluster import DRIVER_ENV  # noqa: E402

os.environ.update(DRIVER_ENV)  # before anything imports ray


@pytest.fixture(autouse=True)
def nothing_left_running():
    """Every test ends with no queuetune thread and no child process alive."""
    yield
    assert_nothing_left_running()
