"""Copy-on-read named on a busy machine, and put before the hand-over's own
advice in the headline (issue 59, part 4): a DataLoader of two forked workers
reading a Python list of paths shuffled, in batches of 2,000, copies most of
the list within its first batches, then holds; with every core busy, the
tree's memory was read too seldom to see that rise, and the headline told a
loader slowed by copying pages to pin its memory."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
from tests.helpers import assert_nothing_left_running, busy_cores  # noqa: E402

import queuetune  # noqa: E402
from queuetune.analysis.memory import COPY_ON_READ_FIX  # noqa: E402
from queuetune.record import real_memory  # noqa: E402
from queuetune.record.trace import Trace  # noqa: E402
from queuetune.tune.headline import headline  # noqa: E402
from queuetune.tune.recommend import Recommendation  # noqa: E402

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset, RandomSampler  # noqa: E402


class Paths(Dataset[int]):
    """``samples`` file paths in a Python list: each a str object of 80 bytes,
    51 to a page, whose reference count a read writes."""

    def __init__(self, samples: int) -> None:
        self.paths = [f"/data/images/train/{i:08d}.jpg" for i in range(samples)]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> int:
        return len(self.paths[index])


def read_paths(samples: int = 500_000, batches: int = 40) -> tuple[queuetune.Report, Trace]:
    """The report of ``batches`` batches of 2,000 paths read shuffled by two
    forked workers, 5 ms a step: each worker reads 40,000 of the 500,000, by
    when it has touched 98 % of the pages (38 MiB of str objects)."""
    dataset = Paths(samples)
    sampler = RandomSampler(dataset, num_samples=batches * 2000)
    loader = DataLoader(dataset, batch_size=2000, sampler=sampler, num_workers=2, multiprocessing_context="fork")
    watched = queuetune.watch(loader)
    for _ in watched:
        time.sleep(0.005)
    report = queuetune.report(watched)
    probe = queuetune.probe_of(watched)
    trace = probe.trace()
    probe.close()
    return report, trace


def readings(trace: Trace) -> dict[int, list[tuple[float, float]]]:
    """Each worker's readings of its own memory (seconds into the run, MiB), for
    the failure's message."""
    found: dict[int, list[tuple[float, float]]] = {}
    for m in trace.memory:
        for pid, _, uss, shm in m.workers or []:
            found.setdefault(pid, []).append((round(m.t - trace.start, 3), round((uss - shm) / 2**20, 1)))
    return found


def runs(count: int) -> list[dict[str, object]]:
    """``count`` runs of :func:`read_paths` in this process: whether each named
    copy-on-read, and its headline."""
    found = []
    for _ in range(count):
        report, trace = read_paths()
        use = report.memory
        line = headline(report, Recommendation(None, why="none"))
        found.append(
            {
                "named": use is not None and use.copy_on_read,
                "text": line.text(),
                "bottleneck": line.bottleneck,
                "next_step": line.next_step,
                "readings": readings(trace),
            }
        )
    return found


@pytest.mark.skipif(not real_memory.supported(), reason="needs Linux's /proc/PID/smaps_rollup")
@pytest.mark.timeout(400)
def test_copy_on_read_of_a_shuffled_list_is_named_in_20_runs_of_20_with_every_core_busy():
    # The runs are a program of their own, as a training script is: the suite's own
    # process, grown large by a thousand tests and every framework imported, takes
    # several times as long to read as a program's, so its readings come more seldom
    # than any user's would (in CI, 5 runs of 20 went unnamed so).
    with busy_cores():
        done = subprocess.run([sys.executable, __file__, "20"], capture_output=True, text=True, timeout=380, cwd=ROOT)
    assert_nothing_left_running()
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found) == 20
    unnamed = [(run["text"], run["readings"]) for run in found if not run["named"]]
    assert not unnamed, unnamed
    for run in found:
        text = run["text"]
        assert "Memory: workers copy what they read (copy-on-read)" in text
        assert "pin_memory" not in text and "Prefetcher" not in text
        if run["bottleneck"] == "the hand-over":
            assert run["next_step"].startswith("workers copy what they read (copy-on-read), which slows the hand-over")
            assert COPY_ON_READ_FIX in run["next_step"]


if __name__ == "__main__":
    print(json.dumps(runs(int(sys.argv[1]))))
