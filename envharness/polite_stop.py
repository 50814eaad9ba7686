"""Polite stops: Ctrl-C, SIGTERM and SIGHUP end a command on one path, on which it keeps what had finished.

Contains :class:`Stopped`, :func:`say_kept` and :class:`polite_stops` (which every command
of both command lines runs inside, see :func:`~envharness.command_line.run_cli`).

``timeout``, schedulers, ``docker stop`` and Kubernetes stop a process with SIGTERM, and
a closed terminal or ssh session sends SIGHUP. Left to Python's defaults, either ends the
process at once, skipping every ``finally``: whatever had finished but was not yet
written was lost, silently. Inside :class:`polite_stops` both raise :class:`Stopped` in
the main thread, exactly where Ctrl-C raises :class:`KeyboardInterrupt` (Ctrl-C raises
:class:`Stopped` too, a ``KeyboardInterrupt``): the code that commits on Ctrl-C commits
on all three. The command names what it kept (:func:`say_kept`); the process then prints
one line and exits with 128 + the signal's number, as a shell reports a process that
signal ended: 130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP).

A signal that was ignored when the command started (``nohup`` ignores SIGHUP) stays
ignored. A second stop while the first is being handled is not raised again (it would
cut the commit short); ``kill -9`` ends the process at once, losing what is not yet committed.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

POLITE_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A polite stop, raised in the main thread; ``kept`` says what the command kept, ``exit_code`` is 128 + the signal.

    Example:
        >>> stop = Stopped(signal.SIGTERM)
        >>> isinstance(stop, KeyboardInterrupt), stop.name, stop.exit_code
        (True, 'SIGTERM', 143)
    """

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        self.name = signal.Signals(signum).name
        self.kept: str | None = None
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def say_kept(stop: BaseException, kept: str) -> None:
    """Tell the stop line what the command kept (``4 finished episodes kept in RUN``); the outermost command's word is the last.

    Example:
        >>> stop = Stopped(signal.SIGHUP)
        >>> say_kept(stop, "3 finished episodes kept in runs/a")
        >>> stop.kept
        '3 finished episodes kept in runs/a'
    """
    if isinstance(stop, Stopped):
        stop.kept = kept


class polite_stops:  # noqa: N801 - used like a function: with polite_stops(prog) as stops: ...
    """Within it, SIGTERM and SIGHUP (and Ctrl-C) raise :class:`Stopped` in the main thread; the handlers before are put back after.

    ``stop`` is the first stop received (None if none came). Outside the main thread it
    changes nothing: only the main thread can set signal handlers.

    Example:
        >>> before = signal.getsignal(signal.SIGTERM)
        >>> with polite_stops("demo") as stops:
        ...     try:
        ...         signal.raise_signal(signal.SIGTERM)
        ...     except KeyboardInterrupt:
        ...         pass
        >>> stops.stop.name, signal.getsignal(signal.SIGTERM) == before
        ('SIGTERM', True)
    """

    def __init__(self, prog: str = "") -> None:
        self.prog = prog
        self.stop: Stopped | None = None
        self._before: dict[int, Any] = {}

    def __enter__(self) -> polite_stops:
        if threading.current_thread() is threading.main_thread():
            for number in POLITE_SIGNALS:
                if signal.getsignal(number) is not signal.SIG_IGN:  # ignored by whoever started us (nohup): theirs to decide
                    self._before[number] = signal.signal(number, self._stop)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._before.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)  # None: a handler set outside Python
        self._before = {}

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        if self.stop is None:
            self.stop = Stopped(signum)
            raise self.stop
        # A second stop while the first is handled: say so (os.write: a print here could land inside another print).
        os.write(2, f"{self.prog}: already stopping, keeping what had finished (kill -9 ends it now and loses that)\n".encode())


__all__ = ["POLITE_SIGNALS", "Stopped", "polite_stops", "say_kept"]
