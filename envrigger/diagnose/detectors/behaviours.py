"""Behaviours seen in the steps: loops, revisits, no-ops, repeated and blocked actions, tool errors, retries, costly events.

Contains :data:`STEP_TITLES`, :func:`flag_behaviours` (flags from the streamed step counts of
:mod:`envrigger.diagnose.steps`) and :data:`STATE_DETECTORS`, the ones that compare states.
"""

from __future__ import annotations

from typing import Any

from envrigger.diagnose.config import DiagnoseConfig
from envrigger.diagnose.finding_names import FindingName, produces
from envrigger.diagnose.flags import Flag, share_lost
from envrigger.diagnose.frame import EpisodeFrame
from envrigger.diagnose.steps import StepStats

STEP_TITLES = {
    "loop": "loops: returns to a state it left 2-4 steps before",
    "revisit": "wanders: most steps revisit states seen earlier in the episode",
    "noop_action": "no-op actions: steps that leave the state unchanged",
    "repeated_action": "repeats one action many times in a row",
    "blocked_action": "tries actions a rule blocks",
    "tool_error": "tool calls fail",
    "retry": "retries tool calls",
    "costly_event": "costly events: steps whose reward falls far below the episode's usual step reward",
}


@produces(*(FindingName(name, "cost" if name == "costly_event" else "behaviour", title) for name, title in STEP_TITLES.items()))
def flag_behaviours(frame: EpisodeFrame, stats: StepStats, config: DiagnoseConfig) -> list[Flag]:
    """Flags from the streamed step counts, with the step ranges found during the scan."""
    out = []
    length = stats.column("steps", frame.episode_id)
    for name, (count, minimum, share) in config.step_flags().items():
        values = stats.column(count, frame.episode_id)
        mask = (values >= minimum) & (values >= share * length)
        if name == "tool_error":
            mask |= frame.tool_errors > 0
        if name == "retry":
            mask |= frame.retries > 0
        extra: dict[str, Any] = {"mean_count_when_flagged": float(values[mask].mean()) if mask.any() else 0.0}
        severity, title = None, STEP_TITLES[name]
        if name == "costly_event":
            lost = stats.column("lost", frame.episode_id)
            severity = share_lost(lost, frame.ret)
            extra |= {
                "in_successes": int((mask & frame.success).sum()),
                "mean_lost_when_flagged": float(lost[mask].mean()) if mask.any() else 0.0,
                "share_of_return_lost": severity,
            }
            won = int((mask & frame.success).sum())
            title += f" ({extra['mean_lost_when_flagged']:.3g} reward lost per affected episode; {won} of them still succeed)"
        out.append(
            Flag(
                name,
                title,
                mask,
                stats=extra,
                ranges=dict(stats.ranges.get(name, {})),
                kind="cost" if name == "costly_event" else "behaviour",
                severity=severity,
            )
        )
    return out


STATE_DETECTORS = ("loop", "revisit", "noop_action")  # the step detectors that compare states, which need observations or positions
