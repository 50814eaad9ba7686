"""The durable log of an external agent's model calls: :class:`CallLog` (``RUN/calls.jsonl``).

A hash-chained log (:class:`envrigger.data.chain.ChainedLog`): one JSON object per line,
each with the SHA-256 of its own content and of the line before it, written with one
``write`` and an ``fsync`` before the proxy answers the caller, so a call the agent got an
answer to is on disk. A line a kill cut short is left out and counted (``torn``), never
read as a call, and the next append starts on a fresh line. Any other damage (a line
altered, cut, removed, added or moved) is refused by :meth:`CallLog.read`, naming the line;
:meth:`CallLog.scan` gives the intact calls and the damage found, for a recorder that must
go on recording (``envharness serve --record``), and ``envrigger verify RUN`` reports it.
Appending never reads the log, so a damaged log never stops the proxy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envrigger.data import TrajectoryError
from envrigger.data.chain import ChainedLog, Problem

NAME = "calls.jsonl"


class CallLog(ChainedLog):
    """Append-only, hash-chained model calls of one run directory.

    Example:
        >>> import tempfile
        >>> log = CallLog(tempfile.mkdtemp())
        >>> log.append({"gen_ai.conversation.id": "s1", "envrigger.time": 1.0})
        >>> [c["gen_ai.conversation.id"] for c in log.read()]
        ['s1']
    """

    def __init__(self, run: str | Path) -> None:
        super().__init__(Path(run) / NAME, "call")

    def read(self, session: str | None = None) -> list[dict[str, Any]]:
        """Every call (of ``session``, if given) in the order recorded; a torn line is left out; any other damage is refused."""
        calls, problems = self.scan_calls(session)
        if problems:
            raise refusal(self.path, problems)
        return calls

    def scan_calls(self, session: str | None = None) -> tuple[list[dict[str, Any]], list[Problem]]:
        """The intact calls (of ``session``, if given) and every problem found, without refusing: for recording on."""
        records, problems = self.scan()
        calls = [call for _, call in records if session is None or call.get("gen_ai.conversation.id") == session]
        return calls, problems


def refusal(path: Path, problems: list[Problem]) -> TrajectoryError:
    """The one-line error for a damaged call log: the first problem, and how many more (never a line's content)."""
    more = f" (and {len(problems) - 1} more damaged lines)" if len(problems) > 1 else ""
    return TrajectoryError(f"{path}: {problems[0]}{more}; restore the file from a copy")


__all__ = ["NAME", "CallLog", "refusal"]
