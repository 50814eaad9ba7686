"""What tests read of runs: everything a run stores except wall times, its committed parts, and waiting for a child to act."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def content(store: Any) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Every episode row (without ``wall_time``) with its step rows, in episode order."""
    episodes = []
    for episode, steps in sorted(store.iter_episode_steps(), key=lambda item: item[0].episode_id):
        row = episode.to_row()
        row.pop("wall_time")
        episodes.append((row, [s.to_row() for s in steps]))
    return episodes


def wait_for(event: Callable[[], bool], timeout: float) -> bool:
    """Whether ``event()`` became true within ``timeout`` seconds (checked every 5 ms): a wait for what a child did, not a guess at how long it takes."""
    deadline = time.monotonic() + timeout
    while not event():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def committed_parts(out: Path) -> int:
    """How many parts the run in ``out`` has committed (its manifest's list; 0 before there is one)."""
    try:
        return len(json.loads((out / "manifest.json").read_text())["parts"])
    except (OSError, ValueError, KeyError):  # not written yet, or being replaced right now
        return 0


def answer_after_ctrl_c(process: Any, timeout: float = 120) -> str:
    """The stderr of ``process`` once it ended after Ctrl-C; if it has not within ``timeout``, kill its group and fail with what it said."""
    import os
    import signal
    import subprocess

    try:
        return str(process.communicate(timeout=timeout)[1])
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        said = process.communicate()[1]
        raise AssertionError(f"still running {timeout:g} s after Ctrl-C; its stderr: {str(said)[-1500:]}") from None
