"""Real servers for tests: a free loopback port, and a server started in its own process group, waited for until it answers."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(cmd: list[str], health: str, wait_s: float = 120.0, preexec_fn: Any = None) -> subprocess.Popen:
    """Run ``cmd`` (stdout dropped, stderr kept for the failure message) until ``health`` answers; fail with its stderr if it dies.

    ``preexec_fn`` runs in the child before ``cmd`` (a test of stop signals resets what a runner under ``nohup`` ignores).
    """
    process = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=preexec_fn
    )
    deadline = time.monotonic() + wait_s
    while True:
        try:
            urllib.request.urlopen(health, timeout=1).read()
            return process
        except OSError:
            if process.poll() is not None:
                raise AssertionError(process.stderr.read() if process.stderr else "") from None
            assert time.monotonic() < deadline, f"{cmd[:4]} never answered {health}"
            time.sleep(0.05)
