"""The verdict: the original success predicate's answer, as an immutable value.

Contains :class:`Verdict`, :data:`RUNNING` and the reasons every adapter uses. A verdict
is computed by the adapter from the *base* environment before any transform runs, and
the harness publishes it last in ``info["verdict"]``; nothing a transform does can
change it. A verdict is a tuple underneath, so no Python code can edit one in place,
not even with ``object.__setattr__``; that is what makes a shared :data:`RUNNING` safe.
"""

from __future__ import annotations

from typing import NamedTuple

IN_PROGRESS = "in progress"
TIMEOUT = "timeout"


class Verdict(NamedTuple):
    """The original verifier's judgement of an episode so far.

    Args:
        success: whether the base environment's own success predicate holds.
        score: the environment's success score in ``[0, 1]`` (1.0 for plain success).
        reason: why, in a few words: ``"reached goal"``, ``"lava"``, ``"timeout"``...

    Example:
        >>> v = Verdict(success=True, score=0.9, reason="reached goal")
        >>> v
        Verdict(success=True, score=0.9, reason='reached goal')
        >>> v.success = False  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ...
        AttributeError: can't set attribute
        >>> object.__setattr__(v, "success", False)  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ...
        AttributeError: can't set attribute
    """

    success: bool
    score: float
    reason: str

    def to_dict(self) -> dict:
        """The verdict as plain JSON data."""
        return {"success": self.success, "score": self.score, "reason": self.reason}


RUNNING = Verdict(False, 0.0, IN_PROGRESS)
