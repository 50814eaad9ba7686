"""The durable log of an external agent's model calls: :class:`CallLog` (``RUN/calls.jsonl``).

One JSON object per line, each with the SHA-256 of its own content, written with one
``write`` and an ``fsync`` before the proxy answers the caller: a call the agent got an
answer to is on disk. A line cut short by a kill (no whole record, no checksum) is left
out and counted (``torn``), never read as a call, and the next append starts on a fresh
line; a line whose checksum does not match its content was altered, and reading refuses
the log, naming the line.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from envrigger.data import TrajectoryError

NAME = "calls.jsonl"


def _digest(call: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(call, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class CallLog:
    """Append-only, checksummed model calls of one run directory.

    Example:
        >>> import tempfile
        >>> log = CallLog(tempfile.mkdtemp())
        >>> log.append({"gen_ai.conversation.id": "s1", "envrigger.time": 1.0})
        >>> [c["gen_ai.conversation.id"] for c in log.read()]
        ['s1']
    """

    def __init__(self, run: str | Path) -> None:
        self.path = Path(run) / NAME
        self._lock = threading.Lock()
        self.torn = 0  # lines the last read left out: cut short by a kill

    def append(self, call: dict[str, Any]) -> None:
        line = json.dumps({"call": call, "sha256": _digest(call)}, separators=(",", ":")) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab+") as handle:
                handle.seek(0, os.SEEK_END)
                if handle.tell():  # a line a kill cut short has no newline: start on a fresh one
                    handle.seek(-1, os.SEEK_END)
                    if handle.read(1) != b"\n":
                        handle.write(b"\n")
                handle.write(line.encode())
                handle.flush()
                os.fsync(handle.fileno())

    def read(self, session: str | None = None) -> list[dict[str, Any]]:
        """Every call (of ``session``, if given) in the order recorded; a torn last line is left out."""
        self.torn = 0
        if not self.path.is_file():
            return []
        out = []
        with open(self.path, "rb") as handle:
            lines = handle.read().split(b"\n")
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
                call, digest = entry["call"], entry["sha256"]
            except (ValueError, KeyError, TypeError):  # a line a kill cut short mid-write (appends go on after it)
                self.torn += 1
                continue
            if _digest(call) != digest:
                raise TrajectoryError(f"{self.path}: line {number} was altered (checksum differs); restore the file from a copy")
            if session is None or call.get("gen_ai.conversation.id") == session:
                out.append(call)
        return out
