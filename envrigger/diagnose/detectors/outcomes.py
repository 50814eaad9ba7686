"""Outcomes that say more than success: reward without success, coin-flip levels, successes that cost return.

Contains :func:`reward_without_success`, :func:`variance_across_seeds` and :func:`return_gaps`.
"""

from __future__ import annotations

import numpy as np

from envrigger.diagnose.config import DiagnoseConfig
from envrigger.diagnose.finding_names import FindingName, episode_detector, produces
from envrigger.diagnose.flags import Flag, all_steps, share_lost
from envrigger.diagnose.frame import EpisodeFrame


@episode_detector(order=30)
@produces(FindingName("reward_without_success", "ending", "failed yet collected as much reward as a typical success"))
def reward_without_success(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Flag]:
    """Failed episodes that still collected as much reward as typical successes (or any, if none succeed)."""
    failed = ~frame.success
    if frame.success.any():
        bar = float(np.quantile(frame.ret[frame.success], 0.25))
        mask = failed & (frame.ret >= bar) & (frame.ret > 0)
        title = f"collects reward without success (return >= {bar:g}, a typical success's)"
    else:
        bar = 0.0
        mask = failed & (frame.ret > 0)
        title = "collects positive reward but never succeeds"
    return [Flag("reward_without_success", title, mask, stats={"return_bar": bar}, ranges=all_steps(frame, mask, config.evidence))]


@episode_detector(order=40)
@produces(FindingName("high_variance", "level", "the same level's outcome varies across seeds, close to a coin flip"))
def variance_across_seeds(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Flag]:
    """Levels played from several seeds whose outcome is close to a coin flip.

    A level is the adapter's ``level_id`` (map and start, or physics) within a spec; runs
    without level ids group by spec and seed instead. A level counts when its success rate
    p has p(1-p) >= ``variance_min`` (p between about 0.1 and 0.9).
    """
    ids = frame.level_id
    keys = np.array([f"{h}/{lv if lv is not None else s}" for h, lv, s in zip(frame.spec_hash, ids, frame.seed)], dtype=object)
    levels, index, counts = np.unique(keys, return_inverse=True, return_counts=True)
    wins = np.bincount(index, weights=frame.success, minlength=len(levels))
    repeated = counts >= config.variance_min_episodes
    if repeated.sum() < 2:  # one level (CartPole's fixed physics): chance across seeds is the env, not a weakness of levels
        return []
    p = wins / counts
    spread = p * (1 - p)
    noisy = repeated & (spread >= config.variance_min)
    mask = noisy[index]
    return [
        Flag(
            "high_variance",
            f"same level, outcome varies across seeds ({int(noisy.sum())} of {int(repeated.sum())} replayed levels)",
            mask,
            stats={
                "levels": int(repeated.sum()),
                "noisy_levels": int(noisy.sum()),
                "mean_p_times_1_minus_p": float(spread[repeated].mean()),
            },
            ranges=all_steps(frame, mask & ~frame.success, config.evidence),
            kind="level",
        )
    ]


def _robust_margin(values: np.ndarray, floor: float) -> tuple[float, float]:
    """Median and a margin of at least ``floor``, a tenth of the median's size and 3 robust standard deviations."""
    median = float(np.median(values))
    mad = float(np.median(np.abs(values - median)))
    return median, max(floor, 0.1 * abs(median), 3 * 1.4826 * mad)


@episode_detector(order=50)
@produces(FindingName("return_gap", "cost", "succeeded with a return far below a typical success's"))
def return_gaps(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Flag]:
    """Successful episodes whose return falls far below a typical success's (a detour, a penalty paid on the way)."""
    won = frame.success
    if won.sum() < config.contrast_min_successes:
        return []
    median, margin = _robust_margin(frame.ret[won], config.return_gap_min)
    mask = won & (frame.ret < median - margin)
    gap = np.where(mask, median - frame.ret, 0.0)
    return [
        Flag(
            "return_gap",
            f"succeeds with a far lower return than usual (below {median - margin:g}; a typical success returns {median:g})",
            mask,
            stats={"typical_return": median, "bar": median - margin, "mean_gap": float(gap[mask].mean()) if mask.any() else 0.0},
            ranges=all_steps(frame, mask, config.evidence),
            kind="cost",
            severity=share_lost(gap, frame.ret),
        )
    ]
