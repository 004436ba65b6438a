"""A Ray cluster of several nodes on this machine, for tests and benchmarks.

Each node is its own ``ray start`` (a head, then workers joining its address),
with its own CPUs and object store, all under one temporary folder. The
processes are not children of the caller (``ray start`` hands them over), so
:meth:`LocalCluster.stop` finds them by that folder and stops them, and
checks that none is left.

Ray 2.60 turns on token authentication for a head, and turns a loopback node
address into the machine's own for a cluster of several nodes
(``resolve_ip_for_localhost``), so the token is what keeps others out. Each
cluster makes its own token in its folder and hands its path to every node and
driver (``RAY_AUTH_TOKEN_PATH``): nothing is read from or written to the home
directory (Ray's default is ``~/.ray/auth_token``).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from queuetune.prefetch import lifeline

RAY = str(Path(sys.executable).with_name("ray"))
#: Set in a driver before Ray is imported (Ray reads the mode once, at import).
DRIVER_ENV = {"RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}
#: How long a node and a driver wait for a starved peer. Ray marks a node dead
#: once its raylet has missed 5 health checks 3 s apart; the raylet then ends
#: itself and takes every driver connected through it along (status 1, nothing
#: printed: a test run ends mid-module). On a machine busy with other work a
#: raylet can be starved that long, so the nodes wait 10 minutes (200 checks),
#: as a driver waits for the GCS.
PATIENCE = {
    "RAY_health_check_failure_threshold": "200",
    "RAY_health_check_timeout_ms": "30000",
    "RAY_gcs_rpc_server_reconnect_timeout_s": "600",
}
#: What else Ray reads of the token; a cluster sets its own path and nothing else.
_TOKEN_VARS = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
#: Threads of Ray's own that can start after ``ray.init`` and end with ``ray.shutdown``.
_RAY_OWN = frozenset({"PythonGCThread", "ray_listen_error_messages", "ray_print_logs"})


#: The file in a cluster's folder that names the process that made it, and the cluster's port.
OWNER = "owner"
#: Where the clusters' folders are made (Ray's socket paths must stay short).
ROOT = "/tmp"
PREFIX = "qtray"
#: What Ray's logs say when a node or a driver ends for want of a peer.
_FATAL = re.compile(r"\d [EF] \d+ \d+\]|marked dead|Terminate the process|has already been shutdown")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """``nodes`` Ray nodes with ``cpus`` CPUs and ``object_store`` bytes each.

    ``worker_niceness``: the nice value of the nodes' worker processes; ``None``
    keeps Ray's default (15).
    """

    def __init__(
        self, nodes: int = 2, cpus: int = 1, object_store: int = 256 * 2**20, worker_niceness: int | None = 0
    ) -> None:
        # Ray's socket paths must stay under 107 characters, so the folder is short.
        self.folder = tempfile.mkdtemp(prefix=PREFIX, dir=ROOT)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        Path(self.folder, OWNER).write_text(f"{os.getpid()} {self.port}")
        self.token_path = os.path.join(self.folder, "auth_token")
        descriptor = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as f:
            f.write(secrets.token_hex(32))
        #: The environment of the cluster's nodes and of its drivers.
        self.env = {**DRIVER_ENV, **PATIENCE, "RAY_AUTH_TOKEN_PATH": self.token_path}
        # Ray starts its worker processes at nice 15, so that its own daemons stay
        # responsive; on a machine busy with other work (nice 0) that leaves the
        # workers almost no CPU, and a test that takes 9 s idle took 308 s. The
        # tests' workers run at the priority of the rest.
        self.node_env = dict(self.env)
        if worker_niceness is not None:
            self.node_env["RAY_worker_niceness"] = str(worker_niceness)
        self._saved: dict[str, str | None] | None = None
        self._ray_threads: set[threading.Thread] = set()
        common = [
            f"--num-cpus={cpus}",
            f"--object-store-memory={object_store}",
            "--disable-usage-stats",
        ]
        env = {k: v for k, v in os.environ.items() if k not in _TOKEN_VARS}
        env.update(self.node_env)
        try:
            self._start(
                ["--head", f"--port={self.port}", f"--temp-dir={self.folder}", "--include-dashboard=false", *common],
                env,
            )
            for _ in range(nodes - 1):
                self._start([f"--address={self.address}", *common], env)
        except BaseException:
            self.stop()
            raise

    def connect(self, **init_args: object) -> None:
        """``ray.init`` this process to the cluster, presenting the cluster's token.

        Ray caches the token it read; the cache is reset so that a driver that
        was connected to another cluster before presents this one's.
        """
        import ray
        from ray._raylet import AuthenticationTokenLoader

        self._saved = {name: os.environ.get(name) for name in (*self.env, *_TOKEN_VARS)}
        for name in _TOKEN_VARS:
            os.environ.pop(name, None)
        os.environ.update(self.env)
        AuthenticationTokenLoader.instance().reset_cache()
        ray.init(address=self.address, **init_args)
        self._ray_threads = set(threading.enumerate())

    def disconnect(self, timeout: float = 60.0) -> None:
        """``ray.shutdown``, once the threads that Ray Data started in this process
        have ended, and this process's environment as it was before :meth:`connect`.

        A thread that calls into Ray after ``ray.shutdown`` makes Ray end the whole
        process at once, with status 1 and nothing printed ("The core worker has
        already been shutdown"). Ray Data leaves two kinds behind: the block
        prefetcher of an iterator closed before its end is never stopped (its
        ``stop`` runs only after a full pass), and a streaming executor is joined
        for 2 s only, which a busy machine can outlast.
        """
        import gc

        import ray

        gc.collect()
        deadline = time.monotonic() + timeout
        while left := self._threads_left():
            for thread in left:
                _stop_block_prefetcher(thread)
                thread.join(timeout=0.2)
            if time.monotonic() > deadline:
                raise RuntimeError(f"threads still calling into Ray: {[t.name for t in self._threads_left()]}")
        ray.shutdown()
        saved, self._saved = self._saved, None
        for name, value in (saved or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def _threads_left(self) -> list[threading.Thread]:
        """Threads started since :meth:`connect` (Ray's own, which ``ray.shutdown``
        stops, were already running then) and still alive."""
        return [
            t
            for t in threading.enumerate()
            if t not in self._ray_threads and t is not threading.current_thread() and t.name not in _RAY_OWN
        ]

    def _start(self, args: list[str], env: dict[str, str]) -> None:
        result = subprocess.run([RAY, "start", *args], env=env, capture_output=True, text=True, timeout=180)
        if result.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")

    def processes(self) -> list[psutil.Process]:
        """The cluster's processes still alive (their command lines name its folder or port)."""
        return cluster_processes(self.folder, self.port)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every process of the cluster (SIGTERM, then SIGKILL) and remove its folder."""
        stop_cluster(self.folder, self.port, timeout)


def cluster_processes(folder: str | Path, port: int) -> list[psutil.Process]:
    """The processes still alive whose command lines name ``folder`` or ``port``
    (as a whole number: ``:6379`` is not ``:63790``), this one aside."""
    mark = re.compile(rf"{re.escape(str(folder))}|:{port}\b")
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            line = " ".join(p.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if mark.search(line) and p.pid != os.getpid():
            found.append(p)
    return found


def stop_cluster(folder: str | Path, port: int, timeout: float = 30.0) -> None:
    """Stop every process of the cluster in ``folder`` on ``port`` (SIGTERM, then
    SIGKILL) and remove the folder; raise if any is left."""
    procs = cluster_processes(folder, port)
    for p in procs:
        _signal(p, signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=timeout / 2)
    for p in alive:
        _signal(p, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=timeout / 2)
    deadline = time.monotonic() + timeout
    while (left := cluster_processes(folder, port)) and time.monotonic() < deadline:
        for p in left:
            _signal(p, signal.SIGKILL)
        time.sleep(0.2)
    left = cluster_processes(folder, port)
    shutil.rmtree(folder, ignore_errors=True)
    if left:
        raise RuntimeError(f"Ray cluster processes left running: {[p.pid for p in left]}")


def orphans(root: str = ROOT) -> list[tuple[Path, int]]:
    """Folders and ports of clusters whose maker has ended without stopping them:
    a driver that Ray ended at once (status 1, nothing printed) leaves its cluster up."""
    found = []
    for folder in sorted(Path(root).glob(f"{PREFIX}*")):
        try:
            owner, port = map(int, (folder / OWNER).read_text().split())
        except (OSError, ValueError):
            continue
        if not lifeline.alive(owner):
            found.append((folder, port))
    return found


def after_a_crash(root: str = ROOT) -> int:
    """Print what Ray's logs say of each orphaned cluster, then stop it; the
    number of clusters found. Run by ``scripts/test`` when the suite fails, so
    that a run Ray ended mid-module says why and leaves nothing running."""
    clusters = orphans(root)
    for folder, port in clusters:
        print(f"== a Ray cluster left by a process that ended: {folder}", file=sys.stderr)
        for log in sorted(folder.glob("session_[0-9]*/logs/*")):
            if log.suffix in (".out", ".err", ".log") and log.is_file():
                lines = log.read_text(errors="replace").splitlines()
                for line in [line for line in lines if _FATAL.search(line)][-5:]:
                    print(f"{log.name}: {line[:400]}", file=sys.stderr)
        stop_cluster(folder, port)
    return len(clusters)


def _stop_block_prefetcher(thread: threading.Thread) -> None:
    """Stop a Ray Data ``WaitBlockPrefetcher`` whose thread this is (its owner
    is reachable only through the thread's target)."""
    owner = getattr(getattr(thread, "_target", None), "__self__", None)
    if type(owner).__name__ == "WaitBlockPrefetcher":
        owner.stop()


def _signal(process: psutil.Process, sig: int) -> None:
    try:
        process.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


if __name__ == "__main__":
    after_a_crash()
