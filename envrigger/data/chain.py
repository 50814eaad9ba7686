"""A hash-chained JSONL log: each line carries the SHA-256 of its content and of the line before it.

Contains :class:`ChainedLog` and :class:`Problem`. One JSON object per line,
``{"prev": SHA-256 of the previous line's bytes, KEY: the record, "sha256": SHA-256 of prev and record}``,
written with one ``write`` and an ``fsync`` under an exclusive ``flock``. Appending never
reads a record, so a damaged log never stops later appends; it never writes through a
symbolic link or into a FIFO at the log's path (:func:`envharness.files.open_file_inside`).

Reading tells apart what a kill leaves from what an editor does:

- a line a kill cut short is never whole JSON: it is left out and counted (``torn``) when it
  is the file's last bytes (no newline after it: an append writes its newline last), or when
  the line after it names its exact bytes as ``prev`` (the next append came after the kill);
- any other line that is not a whole record, a record whose checksum differs, and a record
  whose ``prev`` is not the line before it (a line removed, added, swapped or altered before
  it) is a :class:`Problem`, named by line number, never skipped silently.

Logs written before the chain (lines without ``prev``) are read as before, up to the first
chained line. Not detected: the last lines of the log removed whole (nothing after them names
them), and a rewrite that recomputes every hash from the altered line on (the hashes carry
no secret).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envharness.files import open_file_inside

GENESIS = "0" * 64  # the prev of a log's first line


def _line_hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def content_hash(record: Any, prev: str | None = None) -> str:
    """The checksum of a line: over the record and its ``prev`` (over the record alone for a line written before the chain)."""
    value = record if prev is None else {"prev": prev, "record": record}
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Problem:
    """A line of a log that is not what was appended: ``usable`` when its own content is intact (only its link is broken)."""

    line: int
    what: str
    usable: bool = False

    def __str__(self) -> str:
        return f"line {self.line} {self.what}"


class ChainedLog:
    """An append-only, hash-chained JSONL log of JSON objects under ``key``.

    Example:
        >>> import tempfile
        >>> log = ChainedLog(Path(tempfile.mkdtemp()) / "log.jsonl", "call")
        >>> log.append({"n": 1}); log.append({"n": 2})
        >>> records, problems = log.scan()
        >>> [r["n"] for _, r in records], problems, log.torn
        ([1, 2], [], 0)
    """

    def __init__(self, path: str | Path, key: str) -> None:
        self.path = Path(path)
        self.key = key
        self._lock = threading.Lock()
        self._tail: tuple[int, str] | None = None  # (the file's size after our last append, the hash of that line)
        self.torn = 0  # lines the last scan left out: cut short by a kill

    # -- writing -----------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> None:
        """Append one record, chained to whatever the last line is (damaged or not), synced to disk."""
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open_file_inside(self.path, "ab+") as handle:  # never through a link or into a FIFO planted in the run
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # one appender at a time, across processes too
                try:
                    size = os.fstat(handle.fileno()).st_size
                    start = b""
                    if size == 0:
                        prev = GENESIS
                    elif self._tail is not None and self._tail[0] == size:
                        prev = self._tail[1]  # our own last line is still the last one
                    else:
                        last, whole = self._last_line(handle, size)
                        prev = _line_hash(last)
                        start = b"" if whole else b"\n"  # a line a kill cut short has no newline: it gets one, and is chained to
                    line = json.dumps(
                        {"prev": prev, self.key: record, "sha256": content_hash(record, prev)}, separators=(",", ":")
                    ).encode()
                    handle.write(start + line + b"\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                    self._tail = (size + len(start) + len(line) + 1, _line_hash(line))
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    @staticmethod
    def _last_line(handle: Any, size: int) -> tuple[bytes, bool]:
        """The file's last line (without its newline) and whether it ended in one; read backwards, a block at a time."""
        whole = False
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            whole, size = True, size - 1
        tail = b""
        position = size
        while position > 0:
            step = min(1 << 16, position)
            position -= step
            handle.seek(position)
            tail = handle.read(step) + tail
            cut = tail.rfind(b"\n")
            if cut >= 0:
                return tail[cut + 1 :], whole
        return tail, whole

    # -- reading -----------------------------------------------------------------------
    def _record(self, raw: bytes) -> tuple[str, Any]:
        """("chained", entry), ("legacy", entry), ("broken", None): no whole JSON; ("foreign", None): JSON, but no record."""
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):
            return "broken", None
        if not isinstance(entry, dict) or not isinstance(entry.get(self.key), dict) or not isinstance(entry.get("sha256"), str):
            return "foreign", None
        if "prev" in entry:
            if not isinstance(entry["prev"], str) or set(entry) != {"prev", self.key, "sha256"}:
                return "foreign", None
            return "chained", entry
        return ("legacy", entry) if set(entry) == {self.key, "sha256"} else ("foreign", None)

    def scan(self) -> tuple[list[tuple[int, dict[str, Any]]], list[Problem]]:
        """Every intact record with its line number, and every problem found; torn lines are counted in ``torn``.

        A record whose own checksum holds is returned even when its link to the line before
        is broken (that is a problem too, marked ``usable``): what it says is what was written.
        """
        self.torn = 0
        if not self.path.is_file():
            return [], []
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        ended = lines[-1] == b""  # the file ends in a newline (or is empty)
        if ended:
            lines.pop()
        kinds = [self._record(raw) for raw in lines]
        records: list[tuple[int, dict[str, Any]]] = []
        problems: list[Problem] = []
        chained = False
        for index, raw in enumerate(lines):
            number = index + 1
            kind, entry = kinds[index]
            expected = GENESIS if index == 0 else _line_hash(lines[index - 1])
            if kind in ("broken", "foreign"):
                after = kinds[index + 1] if index + 1 < len(lines) else None
                if (
                    kind == "broken"
                    and raw.strip()
                    and (
                        (after is None and not ended)  # the file's last bytes, never given their newline: a kill mid-write
                        or (after is not None and after[0] == "chained" and after[1]["prev"] == _line_hash(raw))  # named by the next append
                        or (after is not None and after[0] == "legacy" and not chained)  # a log written before the chain: as it was read
                    )
                ):
                    self.torn += 1
                elif kind == "foreign":
                    problems.append(Problem(number, "is JSON but not a record of this log (altered)"))
                else:
                    problems.append(Problem(number, "is cut short or garbled, and no later line was appended after it (altered)"))
                continue
            if kind == "legacy":
                if chained:
                    problems.append(Problem(number, "has no link to the line before it, though the lines before it do (altered)"))
                elif content_hash(entry[self.key]) != entry["sha256"]:
                    problems.append(Problem(number, "was altered (checksum differs)"))
                else:
                    records.append((number, entry[self.key]))
                continue
            chained = True
            if content_hash(entry[self.key], entry["prev"]) != entry["sha256"]:
                problems.append(Problem(number, "was altered (checksum differs)"))
                continue
            if entry["prev"] != expected and not (problems and problems[-1].line == number - 1):  # not twice for one damaged line
                before = "the log's start" if index == 0 else f"line {number - 1}"
                problems.append(Problem(number, f"does not follow {before} (a line was removed, added, moved or altered)", usable=True))
            records.append((number, entry[self.key]))
        return records, problems


__all__ = ["GENESIS", "ChainedLog", "Problem", "content_hash"]
