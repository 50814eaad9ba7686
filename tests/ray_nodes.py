"""Real Ray nodes for tests: a head and worker nodes started with ``ray start``, each with a mark to kill it by.

Shared by the rollout backend's cluster tests and the master seeds' cluster tests.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_processes_of(marks: tuple[str, ...]) -> None:
    """SIGKILL every process whose command line names one of ``marks`` (a node's temp dir, address or name).

    Not ``ray stop``: it stops every Ray of this user, and a test running beside this one (pytest-xdist)
    keeps a local Ray whose loss ends that test's whole process.
    """
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(mark in command for mark in marks):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def clean_env(cluster_dir: str | None = None, **extra: str) -> dict[str, str]:
    """This process's environment with Ray's token authentication off (for the nodes and every driver alike).

    Left to itself, Ray decides per process: a local ``ray.init()`` writes ``~/.ray/auth_token``
    and sets ``RAY_AUTH_MODE`` in its own environment, and a process started after that turns
    token mode on, so a head node and its drivers started at different moments disagree.
    With ``cluster_dir``, ``RAY_TMPDIR`` points there (so ``auto`` finds this cluster).
    """
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("RAY_AUTH")}
    env["RAY_AUTH_MODE"] = "disabled"
    if cluster_dir:
        env["RAY_TMPDIR"] = cluster_dir
    env.update(extra)
    return env


def start_node(args: list[str], cluster_dir: str) -> None:
    """``ray start ARGS`` (a head or a worker node); fails the test with Ray's own words if it cannot."""
    started = subprocess.run(
        [RAY, "start", "--disable-usage-stats", *args], env=clean_env(cluster_dir), capture_output=True, text=True, timeout=180
    )
    assert started.returncode == 0, started.stderr[-2000:]
