"""A Ray cluster of several nodes on this machine, for tests and benchmarks.

Each node is its own ``ray start`` (a head, then workers joining its address),
with its own CPUs and object store, all under one temporary folder. The
processes are not children of the caller (``ray start`` hands them over), so
:meth:`LocalCluster.stop` finds them by that folder and stops them, and
checks that none is left.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
#: The environment of the cluster's processes and of its drivers, set before Ray
#: is imported. A head of Ray 2.60 turns on token authentication (the token in
#: ~/.ray/auth_token), and the nodes and drivers must then present it. Ray turns
#: a loopback node address into the machine's own (``resolve_ip_for_localhost``)
#: for a cluster of several nodes, so the token is what keeps others out.
DRIVER_ENV = {"RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """``nodes`` Ray nodes with ``cpus`` CPUs and ``object_store`` bytes each."""

    def __init__(self, nodes: int = 2, cpus: int = 1, object_store: int = 256 * 2**20) -> None:
        # Ray's socket paths must stay under 107 characters, so the folder is short.
        self.folder = tempfile.mkdtemp(prefix="qtray", dir="/tmp")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        common = [
            f"--num-cpus={cpus}", f"--object-store-memory={object_store}", "--disable-usage-stats",
        ]
        env = dict(os.environ, **DRIVER_ENV)
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

    def _start(self, args: list[str], env: dict[str, str]) -> None:
        result = subprocess.run([RAY, "start", *args], env=env, capture_output=True, text=True, timeout=180)
        if result.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")

    def processes(self) -> list[psutil.Process]:
        """The cluster's processes still alive (their command lines name its folder or port)."""
        marks = (self.folder, f":{self.port}")
        found = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                line = " ".join(p.info["cmdline"] or [])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if any(mark in line for mark in marks) and p.pid != os.getpid():
                found.append(p)
        return found

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every process of the cluster (SIGTERM, then SIGKILL) and remove its folder."""
        procs = self.processes()
        for p in procs:
            _signal(p, signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=timeout / 2)
        for p in alive:
            _signal(p, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=timeout / 2)
        deadline = time.monotonic() + timeout
        while self.processes() and time.monotonic() < deadline:
            for p in self.processes():
                _signal(p, signal.SIGKILL)
            time.sleep(0.2)
        left = self.processes()
        shutil.rmtree(self.folder, ignore_errors=True)
        if left:
            raise RuntimeError(f"Ray cluster processes left running: {[p.pid for p in left]}")


def _signal(process: psutil.Process, sig: int) -> None:
    try:
        process.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
