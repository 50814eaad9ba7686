"""Env steps taken off the agent's clock: the searches behind a start and the setup that reaches it.

Every base-env step that is not one of the agent's passes through here: a search's steps
(:func:`~envharness.adapters.minigrid_search.solve`, charged as ``search``) and setup
steps, the actions a state transform plays at reset before the agent's clock starts (a
:class:`~envharness.transforms.ReplayPrefix`'s prefix, the walked part of a
:class:`~envharness.transforms.WalkthroughStart`; charged as ``setup`` by the state
handle). A caller reads :func:`steps_taken` before and after the work it pays for; an
episode played in another thread at the same time charges its own.

Example:
    >>> import envharness
    >>> from envharness.transforms import ReplayPrefix
    >>> env = envharness.wrap("FrozenLake-v1", ReplayPrefix(actions=[2, 2]), is_slippery=False)
    >>> before = steps_taken()
    >>> _ = env.reset(seed=0)
    >>> steps_taken() - before, env.reset(seed=1)[1]["setup_steps"]
    (2, 2)
"""

from __future__ import annotations

import threading

KINDS = ("search", "setup")


class _Taken(threading.local):
    """This thread's off-clock env steps by kind."""

    search = 0
    setup = 0


taken = _Taken()
_in_process = {kind: 0 for kind in KINDS}  # every thread's, each search added when it ends, setup at once
_lock = threading.Lock()


def charge(kind: str, steps: int) -> None:
    """Charge ``steps`` env steps of ``kind`` (``setup``) to this thread and the process, at once."""
    if steps <= 0:
        return
    setattr(taken, kind, getattr(taken, kind) + steps)
    with _lock:
        _in_process[kind] += steps


def settle(kind: str, steps: int) -> None:
    """Add ``steps`` this thread has already counted to the process's total (a search, as it ends)."""
    with _lock:
        _in_process[kind] += steps


def steps_taken(all_threads: bool = False, kind: str | None = None) -> int:
    """Off-clock env steps so far, of ``kind`` or of both kinds, in this thread (or the whole process).

    ``all_threads``: every thread's (a search counted as it ends): what a caller that waits
    for its helpers' threads charges, the loop's validation.
    """
    kinds = KINDS if kind is None else (kind,)
    if all_threads:
        with _lock:
            return sum(_in_process[k] for k in kinds)
    return sum(getattr(taken, k) for k in kinds)


__all__ = ["KINDS", "charge", "settle", "steps_taken"]
