"""How failed episodes end: timeouts, errors, the verifier's terminal causes, and giving up.

Contains :func:`endings`.
"""

from __future__ import annotations

import numpy as np

from envrigger.diagnose.config import DiagnoseConfig
from envrigger.diagnose.finding_names import FindingName, episode_detector, produces
from envrigger.diagnose.flags import Flag, cause_name, last_steps
from envrigger.diagnose.frame import EpisodeFrame


@episode_detector(order=10)
@produces(
    FindingName("timeout", "ending", "truncated before success (the env's limit or a StepBudget)"),
    FindingName("episode_error", "ending", "the env or the policy raised an exception"),
    FindingName("terminal_cause:CAUSE", "ending", "failed with that verifier reason: lava, hole, pole_fell..."),
    FindingName("giving_up", "ending", "ended the episode itself without success, with most of its steps left"),
)
def endings(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Flag]:
    """Timeouts, and failures grouped by the verifier's terminal cause."""
    failed = ~frame.success
    out = []
    causes = np.array([cause_name(c) if c is not None else "unknown" for c in frame.terminal_cause], dtype=object)
    for cause in sorted(set(causes[failed].tolist())):
        mask = failed & (causes == cause)
        if cause == "timeout":
            out.append(
                Flag("timeout", "runs out of time (truncated before success)", mask, ranges=last_steps(frame, mask, config.evidence))
            )
        elif cause == "error":
            out.append(
                Flag("episode_error", "the env or the policy raised an exception", mask, ranges=last_steps(frame, mask, config.evidence))
            )
        else:
            out.append(
                Flag(
                    f"terminal_cause:{cause}", f"fails by {cause.replace('_', ' ')}", mask, ranges=last_steps(frame, mask, config.evidence)
                )
            )
    if frame.agent_ended is not None and frame.step_limit is not None:
        budget = frame.step_limit > 0
        early = budget & (frame.length <= config.giving_up_max_share * np.where(budget, frame.step_limit, 0))
        mask = failed & frame.agent_ended & early
        if mask.any():
            title = f"gives up: ends the episode itself (a submit) without success, with over {1 - config.giving_up_max_share:.0%} of its steps left"
            out.append(
                Flag(
                    "giving_up",
                    title,
                    mask,
                    stats={"mean_share_of_budget_used": float((frame.length[mask] / frame.step_limit[mask]).mean())},
                    ranges=last_steps(frame, mask, config.evidence),
                )
            )
    return out
