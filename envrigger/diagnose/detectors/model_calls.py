"""An LLM agent's model calls: replies that name no action, truncated context, verbose and slow calls.

Contains :func:`model_calls`.
"""

from __future__ import annotations

import numpy as np

from envrigger.diagnose.config import DiagnoseConfig
from envrigger.diagnose.finding_names import FindingName, episode_detector, produces
from envrigger.diagnose.flags import Flag, all_steps
from envrigger.diagnose.frame import EpisodeFrame


@episode_detector(order=60)
@produces(
    FindingName("malformed_output", "behaviour", "replies that name no action, sent back by the harness"),
    FindingName("context_truncated", "behaviour", "failed after older turns were cut from the model's context"),
    FindingName("verbose_output", "behaviour", "far more output tokens per call than the run's usual"),
    FindingName("slow_calls", "behaviour", "model calls far slower than the run's usual"),
)
def model_calls(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Flag]:
    """An LLM agent's calls: replies that were no action, failure after the context was cut, and verbose outliers.

    Behaviours, judged by contrast like the others: a finding only where they come with failure.
    """
    calls = frame.model_calls
    if (
        calls is None
        or frame.parse_failures is None
        or frame.truncated_steps is None
        or frame.output_tokens is None
        or not (calls > 0).any()
    ):
        return []
    out = []
    for name, title, counts in (
        ("malformed_output", "malformed output: replies that name no action (the harness sent them back)", frame.parse_failures),
        ("context_truncated", "fails after the context was truncated: older turns were left out of its calls", frame.truncated_steps),
    ):
        mask = counts > 0
        out.append(
            Flag(name, title, mask, stats={"mean_when_flagged": float(counts[mask].mean()) if mask.any() else 0.0},
                      ranges=all_steps(frame, mask, config.evidence), kind="behaviour")
        )  # fmt: skip
    # Per call, against the run's short end (its lower quartile), so that even a run padded half the time shows it.
    outliers = [
        ("verbose_output", "verbose output", frame.output_tokens, 100.0, "output tokens", "usual_output_tokens_per_call", "{:.0f} ")
    ]
    if frame.latency_s is not None:
        outliers.append(("slow_calls", "slow model calls", frame.latency_s, 1.0, "s", "usual_seconds_per_call", "{:.2f} "))
    for name, what, totals, margin, unit, key, shown in outliers:
        per_call = np.where(calls > 0, totals / np.maximum(calls, 1), np.nan)
        known = ~np.isnan(per_call)
        if known.sum() < config.min_episodes:
            continue
        usual = float(np.percentile(per_call[known], 25))
        mask = known & (per_call > max(4 * usual, usual + margin))
        title = f"{what}: more than 4x (and {margin:g} {unit} more than) the run's usual {shown.format(usual)}{unit} per call"
        out.append(Flag(name, title, mask, stats={key: usual}, ranges=all_steps(frame, mask, config.evidence), kind="behaviour"))
    return out
