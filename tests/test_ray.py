"""Ray Data on a two-node cluster on this machine: blocks counted in the remote
tasks on each node, batches where the trainer takes them, matched by rows."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import queuetune  # noqa: E402
from queuetune.analysis.report import analyze  # noqa: E402
from queuetune.record.trace import Trace  # noqa: E402
from queuetune.tune import (  # noqa: E402
    Job,
    machine,
    worker_choices,
)
from ray_cluster import LocalCluster  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

ROW_FLOATS = 16_384  # 64 KiB of float32 per row


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of one CPU each; the driver connects to the head's address with
    the cluster's own token, and nothing under ``~/.ray`` is read or written."""
    home_ray = Path.home() / ".ray"
    before = _listing(home_ray)
    local = LocalCluster(nodes=2, cpus=1, object_store=128 * 2**20)
    try:
        try:
            local.connect(logging_level="ERROR", log_to_driver=False)
            # The remote tasks cannot import this test module: send its functions by value.
            ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
            yield local
        finally:
            local.disconnect()
    finally:
        local.stop()
    assert local.processes() == []
    assert _listing(home_ray) == before
    assert os.environ.get("RAY_AUTH_TOKEN_PATH") != local.token_path


def _listing(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")} if folder.exists() else {}


def collectors() -> list[str]:
    names = ray.util.list_named_actors(all_namespaces=True)
    return [a["name"] for a in names if a["name"].startswith("queuetune-")]


def wait_for_no_collector(seconds: float) -> bool:
    """Whether, within ``seconds``, no collector actor of queuetune's is left in the cluster."""
    deadline = time.monotonic() + seconds
    while collectors() and time.monotonic() < deadline:
        time.sleep(0.2)
    return collectors() == []


@pytest.fixture(autouse=True)
def no_collector_left(cluster):
    """After each test, no collector actor of queuetune's is alive in the cluster."""
    yield
    assert wait_for_no_collector(20)


def build(batch):
    """Each row becomes 64 KiB of float32 holding its id."""
    ids = batch["id"]
    return {"x": np.repeat(ids[:, None].astype(np.float32), ROW_FLOATS, axis=1), "id": ids}


def dataset(rows=24, rows_per_block=2, **map_args):
    return ray.data.range(rows, override_num_blocks=rows // rows_per_block).map_batches(
        build, batch_size=rows_per_block, **map_args
    )


def consume(watched, **kwargs):
    seen = []
    for batch in watched.iter_batches(**kwargs):
        seen.extend(int(i) for i in batch["id"])
    return seen


def test_the_cluster_brings_its_own_token(cluster):
    """Every node and this driver read the token in the cluster's folder, not ~/.ray."""
    assert os.stat(cluster.token_path).st_mode & 0o777 == 0o600
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == cluster.token_path
    environments = []
    for process in cluster.processes():
        try:
            environments.append(process.environ())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    assert len(environments) >= 2  # a head and a worker node at least
    assert {e.get("RAY_AUTH_TOKEN_PATH") for e in environments} == {cluster.token_path}
    assert all(e.get("RAY_AUTH_MODE") == "token" and "RAY_AUTH_TOKEN" not in e for e in environments)


def test_the_clusters_nodes_and_this_driver_wait_minutes_for_a_starved_peer(cluster):
    """Ray's defaults mark a raylet starved for about a minute dead, and its end
    takes this driver, the whole test run, along (see ray_cluster.PATIENCE)."""
    from ray_cluster import PATIENCE

    processes = cluster.processes()
    gcs = [p for p in processes if p.name() == "gcs_server"]
    raylets = [p for p in processes if p.name() == "raylet"]
    assert len(gcs) == 1 and len(raylets) == 2
    for process in gcs + raylets:
        assert {name: process.environ().get(name) for name in PATIENCE} == PATIENCE
    assert {name: os.environ.get(name) for name in PATIENCE} == PATIENCE
    assert int(PATIENCE["RAY_health_check_failure_threshold"]) * 3 >= 600  # checks 3 s apart: 10 minutes


def test_a_cluster_whose_driver_ray_ended_is_reported_and_stopped_after_the_run(cluster, tmp_path):
    """What scripts/test does when the suite fails: a driver ended at once
    (``os._exit``, as Ray ends one) leaves its cluster; the sweep prints what
    the logs say and stops it, and leaves a live driver's cluster alone."""
    import subprocess

    import ray_cluster

    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); from ray_cluster import LocalCluster; "
        "c = LocalCluster(nodes=1, cpus=1, object_store=80 * 2**20); print(c.folder, flush=True); os._exit(3)"
    )
    tests = str(Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", code, tests], capture_output=True, text=True, timeout=240)
    assert done.returncode == 3, done.stderr
    folder = Path(done.stdout.split()[-1])
    assert folder.exists()
    orphans = dict(ray_cluster.orphans())
    assert folder in orphans and Path(cluster.folder) not in orphans
    assert ray_cluster.cluster_processes(folder, orphans[folder])  # the cluster outlived its maker
    assert ray_cluster.after_a_crash() >= 1
    assert not folder.exists()
    assert not ray_cluster.cluster_processes(folder, orphans[folder])
    assert cluster.processes() and ray.is_initialized()


def test_the_clusters_workers_run_at_the_priority_of_the_rest(cluster):
    """Not at Ray's default nice 15, which a busy machine starves (see ray_cluster.py)."""

    @ray.remote
    def niceness() -> int:
        return os.nice(0)

    assert set(ray.get([niceness.remote() for _ in range(4)])) == {0}


def test_blocks_are_counted_on_each_node_and_batches_where_taken(cluster):
    watched = queuetune.watch(dataset(scheduling_strategy="SPREAD"))
    probe = queuetune.probe_of(watched)
    try:
        seen = consume(watched, batch_size=2, prefetch_batches=1)
        probe.settle(quiet=0.3, timeout=10)
        report = probe.report()
    finally:
        probe.close()
    assert sorted(seen) == list(range(24))  # nothing lost or repeated by the counting step
    assert report.produced_batches == 12
    assert report.consumed_batches == 12
    assert report.read_ahead_batches == 0
    assert report.meta.framework == "ray" and report.meta.match == "rows"
    block = 2 * ROW_FLOATS * 4 + 2 * 8  # two rows of x, two int64 ids
    assert report.batch_bytes.median == pytest.approx(block, rel=0.01)
    # Both nodes built blocks, and the nodes' counts add up to the whole.
    node_ids = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(report.nodes) == 2
    assert {report.meta.nodes[short] for short in report.nodes} == node_ids
    assert sum(n.produced_batches for n in report.nodes.values()) == 12
    assert sum(n.produced_bytes for n in report.nodes.values()) == sum(p.nbytes for p in probe.trace().produced)
    assert all(n.read_ahead_batches == 0 for n in report.nodes.values())
    assert 1 <= report.peak_in_flight_batches <= 12
    assert report.input_bound_fraction is not None
    # Each block's rows keyed in the task that built it: 24 rows, each once.
    [cov] = report.coverage
    assert (cov.unit, cov.consumed, cov.duplicates, cov.unkeyed) == ("sample key", 24, [], 0)


def test_rows_read_twice_are_found_by_their_keys(cluster):
    rows = ray.data.from_items([{"id": i % 8, "x": float(i % 8)} for i in range(16)], override_num_blocks=4)
    watched = queuetune.watch(rows.map_batches(lambda b: b, batch_size=None), key=lambda row: row["id"])
    probe = queuetune.probe_of(watched)
    try:
        seen = [int(i) for batch in watched.iter_batches(batch_size=4) for i in batch["id"]]
        report = probe.report()
    finally:
        probe.close()
    assert sorted(seen) == sorted(list(range(8)) * 2)
    [cov] = report.coverage
    assert cov.consumed == 16 and cov.duplicates == list(range(8)) and cov.extra == 8


def test_batches_cut_from_blocks_release_a_block_with_its_last_row(cluster):
    # Blocks of 4 rows, batches of 2: two batches per block, and the report
    # still counts blocks in flight.
    watched = queuetune.watch(dataset(rows=24, rows_per_block=4))
    probe = queuetune.probe_of(watched)
    try:
        seen = consume(watched, batch_size=2)
        probe.settle(quiet=0.3, timeout=10)
        report = probe.report()
        trace = probe.trace()
    finally:
        probe.close()
    assert sorted(seen) == list(range(24))
    assert report.produced_batches == 6
    assert report.consumed_batches == 12
    assert [p.rows for p in trace.produced] == [4] * 6
    assert [c.rows for c in trace.consumed] == [2] * 12
    assert report.read_ahead_batches == 0
    assert report.series["batches"][-1] == 0 and report.series["bytes"][-1] == 0


def test_a_pause_shows_the_blocks_built_ahead_and_where_they_are(cluster):
    # The trainer stops for a second after 4 batches: Ray keeps building, and
    # the report must see the blocks held, on the nodes that built them.
    watched = queuetune.watch(dataset(rows=48, rows_per_block=2, scheduling_strategy="SPREAD"))
    probe = queuetune.probe_of(watched)
    try:
        iterator = iter(watched.iter_batches(batch_size=2, prefetch_batches=1))
        for _ in range(4):
            next(iterator)
        probe.settle(quiet=0.5, timeout=20)
        during = probe.report()
        rest = sum(1 for _ in iterator)
        report = probe.report()
    finally:
        probe.close()
    assert rest == 20
    held = during.produced_batches - 4
    assert held > 2  # more than prefetch_batches + 1 were read ahead in the pause
    assert during.read_ahead_batches == held
    assert sum(n.read_ahead_batches for n in during.nodes.values()) == held
    assert sum(n.read_ahead_bytes for n in during.nodes.values()) == during.read_ahead_bytes
    assert report.produced_batches == 24 and report.read_ahead_batches == 0
    assert report.peak_in_flight_batches >= held


def test_the_counting_step_is_fused_into_the_last_map(cluster):
    watched = queuetune.watch(dataset(rows=8, rows_per_block=2, num_cpus=0.5))
    probe = queuetune.probe_of(watched)
    try:
        consume(watched, batch_size=2)
    finally:
        probe.close()
    assert probe.trace().meta.settings["num_cpus"] == 0.5
    stats = watched.dataset.stats()
    assert "MapBatches(build)->MapBatches(CountBlocks)" in stats


def test_iter_torch_batches_and_rows_are_counted(cluster):
    pytest.importorskip("torch")
    watched = queuetune.watch(dataset(rows=8, rows_per_block=2))
    probe = queuetune.probe_of(watched)
    try:
        batches = list(watched.iter_torch_batches(batch_size=4))
        rows = list(watched.iter_rows())
        probe.settle(quiet=0.3, timeout=10)
        report = probe.report()
    finally:
        probe.close()
    assert [tuple(b["x"].shape) for b in batches] == [(4, ROW_FLOATS)] * 2
    assert len(rows) == 8
    assert report.consumed_batches == 2 + 8
    assert report.produced_batches == 8  # two passes over 4 blocks
    assert [c.rows for c in probe.trace().consumed] == [4, 4] + [1] * 8
    assert report.read_ahead_batches == 0


def test_a_failing_remote_task_reaches_the_trainer_and_the_trace_keeps_what_came_before(cluster, tmp_path):
    def fail_on_ten(batch):
        if 10 in batch["id"]:
            raise OSError("disk gone at row 10")
        return build(batch)

    ds = ray.data.range(24, override_num_blocks=12).map_batches(fail_on_ten, batch_size=2, max_retries=0)
    watched = queuetune.watch(ds)
    probe = queuetune.probe_of(watched)
    seen = []
    try:
        with pytest.raises(Exception, match="disk gone at row 10"):
            for batch in watched.iter_batches(batch_size=2, prefetch_batches=0):
                seen.extend(int(i) for i in batch["id"])
        probe.settle(quiet=0.3, timeout=10)
        path = tmp_path / "trace.json"
        probe.trace().save(path)
    finally:
        probe.close()
    loaded = Trace.load(path)
    assert len(loaded.consumed) == len(seen) // 2
    assert all(p.rows == 2 for p in loaded.produced)
    assert any("disk gone at row 10" in m.value for m in loaded.marks if m.kind == "error")
    assert queuetune.report(watched).errors


def test_the_trace_keeps_rows_and_nodes_through_json(cluster, tmp_path):
    watched = queuetune.watch(dataset(rows=8, rows_per_block=2))
    probe = queuetune.probe_of(watched)
    try:
        consume(watched, batch_size=4)
        probe.settle(quiet=0.3, timeout=10)
        trace = probe.trace()
    finally:
        probe.close()
    path = tmp_path / "t.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert [p.rows for p in loaded.produced] == [2, 2, 2, 2]
    assert [c.rows for c in loaded.consumed] == [4, 4]
    assert all(":" in p.worker for p in loaded.produced)
    assert loaded.meta.nodes == trace.meta.nodes

    assert analyze(loaded).nodes == analyze(trace).nodes


def test_watching_twice_is_refused_and_close_stops_the_collector(cluster):
    watched = queuetune.watch(dataset(rows=4, rows_per_block=2))
    try:
        assert len(collectors()) == 1
        with pytest.raises(ValueError, match="already watched"):
            queuetune.watch(watched)
    finally:
        queuetune.probe_of(watched).close()
    # ray.kill is asynchronous: the actor leaves the cluster's list a moment later.
    assert wait_for_no_collector(20)


# --- tuning ------------------------------------------------------------------------------

MADE: list[dict] = []


def make(concurrency=None):
    """60 blocks of 2 rows (128 KiB), read by a step of 10 ms. On two CPUs Ray's cost per task
    makes the trainer wait for input most of the time, and the trials' throughputs vary widely."""
    MADE.append({"concurrency": concurrency})
    ds = ray.data.range(120, override_num_blocks=60).map_batches(
        build, batch_size=2, compute=ray.data.TaskPoolStrategy(size=concurrency)
    )
    return Job(ds, step=lambda batch: time.sleep(0.01), kwargs={"batch_size": None})


def test_tune_a_ray_dataset(cluster):
    from queuetune.tune import decide, tune

    MADE.clear()
    result = tune(make, steps=40, warmup=5, rounds=1, candidates=3)
    assert result.framework == "ray"
    assert result.default_settings == {"prefetch_batches": 1, "object_store_memory": None, "concurrency": None}
    assert len(result.trials) == len(result.candidates) == 3
    assert all(t.batches == 40 for t in result.trials)
    default = result.default
    assert default is not None and default.settings == result.default_settings
    block = int(result.baseline.batch_bytes.median)  # Ray's size of a block of two rows
    assert block == pytest.approx(2 * ROW_FLOATS * 4, rel=0.01)
    cpus = int(ray.cluster_resources()["CPU"])
    # Ray's own concurrency (every CPU) and, unless told, 1, 2, 3, 4, 6, ... as far as they gain
    choices = set(worker_choices(cpus, machine.MOST_WORKERS))
    tried = [c for c in result.candidates if not c.is_default]
    assert tried
    for c in tried:
        # a budget that holds whole blocks, queuetune's prefetch of 1, and a concurrency considered
        concurrency = c.settings["concurrency"]
        assert c.settings["object_store_memory"] % (2 * block) == 0
        assert c.settings["prefetch_batches"] == 1 and concurrency in choices
        assert c.depth == concurrency + c.settings["object_store_memory"] // (2 * block) + 1
        assert c.depth < default.depth
    # the factory was given the concurrency of each setting it built
    assert {m["concurrency"] for m in MADE} == {None} | {c.settings["concurrency"] for c in tried}
    # the counts predicted are the first of those, as far as more were predicted to gain
    predicted = sorted({p.workers for p in result.predictions})
    assert predicted and predicted == sorted(choices)[: len(predicted)]
    # the choice is the decision rule's on what was measured (which setting wins varies with the noise)
    assert result.chosen is not None
    assert result.chosen == decide(result.candidates, result.tolerance, result.budget, result.noise, result.sure)
    assert set(result.kwargs()) <= {"prefetch_batches", "object_store_memory", "concurrency"}


def test_apply_puts_the_budget_in_the_dataset_context_and_the_prefetch_in_the_iterator_arguments(cluster):
    from queuetune.tune import Candidate, TuneResult

    settings = {"prefetch_batches": 2, "object_store_memory": 4 * 2**20, "concurrency": 1}
    chosen = Candidate(settings, 4, 10.0, 4, 4 * 2**17, None, None, 1)
    result = TuneResult("ray", {}, [chosen], chosen, [], None, 0.02, None, [])
    before = ray.data.DataContext.get_current().execution_options.resource_limits.object_store_memory
    MADE.clear()
    job = result.apply(make)
    assert MADE == [{"concurrency": 1}]
    assert job.loader.context.execution_options.resource_limits.object_store_memory == 4 * 2**20
    assert job.kwargs == {"batch_size": None, "prefetch_batches": 2}
    # other datasets keep Ray's default: only this dataset's own context changed
    assert ray.data.DataContext.get_current().execution_options.resource_limits.object_store_memory == before
    seen = [int(i) for batch in job.loader.iter_batches(**job.kwargs) for i in batch["id"]]
    assert sorted(seen) == list(range(120))


def test_a_ray_job_is_read_by_a_step_through_one_of_its_iterators(cluster):
    from queuetune.tune import as_job

    ds = ray.data.range(4)
    assert as_job(Job(ds, step=len, method="iter_torch_batches")).method == "iter_torch_batches"
    with pytest.raises(ValueError, match="'iter_batches' or 'iter_torch_batches'"):
        as_job(Job(ds, step=len, method="predict"))
    with pytest.raises(ValueError, match="'fit', 'predict' or 'evaluate'"):
        as_job(Job([1, 2], step=len, method="iter_batches"))


def test_cli_tune_a_ray_factory(cluster, tmp_path, capsys):
    import json

    from queuetune.cli import main

    factory = tmp_path / "factory.py"
    factory.write_text(
        "import time\n"
        "import numpy as np\n"
        "import ray\n"
        "from queuetune.tune import Job\n"
        "def make(concurrency=None):\n"
        "    # blocks of 8 rows of 8 KiB, read in batches of 2 rows\n"
        "    ds = ray.data.range(240, override_num_blocks=30).map_batches(\n"
        "        lambda b: {'x': np.repeat(b['id'][:, None], 1024, axis=1)}, batch_size=None,\n"
        "        compute=ray.data.TaskPoolStrategy(size=concurrency))\n"
        "    return Job(ds, step=lambda batch: time.sleep(0.005), kwargs={'batch_size': 2})\n"
    )
    code = main(
        ["tune", f"{factory}:make", "--framework", "ray", "--steps", "80", "--warmup", "8", "--rounds", "1", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == (0 if out["chosen"] else 1)
    assert out["framework"] == "ray"
    assert out["default_settings"] == {"prefetch_batches": 1, "object_store_memory": None, "concurrency": None}
    assert len(out["trials"]) == len(out["candidates"]) >= 2
    # the model timed the trainer per block: 4 batches of 2 rows take a block of 8
    assert out["predictions"]
    assert all(t["batches"] == 80 for t in out["trials"])
    assert main(["tune", f"{factory}:make", "--framework", "torch"]) == 2
    assert "builds a ray loader, not torch" in capsys.readouterr().err


def test_queuetune_run_watches_a_ray_dataset_the_script_iterates(cluster, tmp_path, capsys):
    from queuetune.cli import main

    job = tmp_path / "job.py"
    job.write_text(
        "import ray.data\n"
        "ds = ray.data.range(24, override_num_blocks=6).map_batches(lambda b: b, batch_size=None)\n"
        "seen = []\n"
        "for epoch in range(2):\n"
        "    for batch in ds.iter_batches(batch_size=4, prefetch_batches=1):\n"
        "        seen += list(batch['id'])\n"
        "assert sorted(seen) == sorted(list(range(24)) * 2), seen\n"
    )
    before = {name: getattr(ray.data.Dataset, name) for name in ("iter_batches", "iter_torch_batches", "iter_rows")}
    assert main(["run", "--out", str(tmp_path / "out"), "--no-html", str(job)]) == 0
    printed = capsys.readouterr().out
    assert "ray dataset 1 (job.py:5)" in printed and "left alone" not in printed
    [path] = sorted((tmp_path / "out").glob("[0-9]*.json"))
    trace = Trace.load(path)
    assert path.name == "01-ray-dataset.json" and trace.meta.framework == "ray" and trace.meta.match == "rows"
    assert len(trace.consumed) == 12 and sum(c.rows or 0 for c in trace.consumed) == 48
    assert sum(p.rows or 0 for p in trace.produced) == 48  # blocks counted in the remote tasks, both passes
    assert [(c.consumed, c.extra) for c in analyze(trace).coverage] == [(24, 0), (24, 0)]
    assert {name: getattr(ray.data.Dataset, name) for name in before} == before
