"""The thresholds of diagnosis: :class:`DiagnoseConfig`, every detector's numbers with their defaults."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DiagnoseConfig:
    """Thresholds of the detectors. A finding needs ``min_episodes`` and ``min_rate``.

    A behaviour (loops, no-ops, repeats, blocked actions, tool errors) is a finding only if,
    given at least ``contrast_min_successes`` successes, the lower end of its lift's 95%
    interval (its rate in failed episodes over its rate in successful ones) exceeds
    ``contrast_min_lift``; otherwise it is a style note. A level region (or a cost) whose
    episodes a clearer one flags too, ``duplicate_overlap`` of them, is not a finding of its own.
    Behaviours and endings that flag nearly the same episodes (each covers ``symptom_overlap``
    of the other's) are one behaviour seen several ways: one finding, the others its symptoms.
    """

    min_episodes: int = 3
    min_rate: float = 0.05
    evidence: int = 5
    loop_min_steps: int = 6
    loop_min_share: float = 0.2
    revisit_min_steps: int = 10
    revisit_min_share: float = 0.6
    noop_min_steps: int = 4
    noop_min_share: float = 0.2
    repeat_min_run: int = 8
    blocked_min_steps: int = 1
    region_min_support: float = 0.1
    region_min_episodes: int = 10
    region_max_p: float = 0.01
    region_min_lift: float = 1.25
    variance_min_episodes: int = 4
    variance_min: float = 0.09
    contrast_min_successes: int = 5
    contrast_min_lift: float = 1.0
    return_gap_min: float = 0.5
    giving_up_max_share: float = 0.5  # an ending the agent chose, having used at most this share of its step limit
    duplicate_overlap: float = 0.9
    symptom_overlap: float = 0.8  # behaviours and endings flagging (both ways) this share of each other's episodes: one finding
    batch_size: int = 262_144

    def step_flags(self) -> dict[str, tuple[str, int, float]]:
        """Step detector -> (count, minimum count, minimum share of the episode)."""
        return {
            "loop": ("cycle", self.loop_min_steps, self.loop_min_share),
            "revisit": ("revisit", self.revisit_min_steps, self.revisit_min_share),
            "noop_action": ("noop", self.noop_min_steps, self.noop_min_share),
            "repeated_action": ("max_repeat", self.repeat_min_run, 0.0),
            "blocked_action": ("blocked", self.blocked_min_steps, 0.0),
            "tool_error": ("tool_error", 1, 0.0),
            "retry": ("retry", 1, 0.0),
            "costly_event": ("costly", 1, 0.0),
        }
