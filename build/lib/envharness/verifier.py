"""The verdict: the original success predicate's answer, as an immutable value.

Contains :class:`Verdict` and the reasons every adapter uses. A verdict is computed by
the adapter from the *base* environment before any transform runs, and the harness
publishes it last in ``info["verdict"]``; nothing a transform does can change it.
"""

from __future__ import annotations

from dataclasses import dataclass

IN_PROGRESS = "in progress"
TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The original verifier's judgement of an episode so far.

    Args:
        success: whether the base environment's own success predicate holds.
        score: the environment's success score in ``[0, 1]`` (1.0 for plain success).
        reason: why, in a few words: ``"reached goal"``, ``"lava"``, ``"timeout"``...

    Example:
        >>> v = Verdict(success=True, score=0.9, reason="reached goal")
        >>> v
        Verdict(success=True, score=0.9, reason='reached goal')
        >>> v.success = False
        Traceback (most recent call last):
        ...
        dataclasses.FrozenInstanceError: cannot assign to field 'success'
    """

    success: bool
    score: float
    reason: str

    def to_dict(self) -> dict:
        """The verdict as plain JSON data."""
        return {"success": self.success, "score": self.score, "reason": self.reason}


RUNNING = Verdict(False, 0.0, IN_PROGRESS)
