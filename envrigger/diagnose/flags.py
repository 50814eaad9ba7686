"""What a detector returns and how it becomes a finding.

Contains :class:`Flag` (what a detector flags, per episode or level, before thresholds and evidence),
the step ranges a flag points at (:func:`last_steps`, :func:`all_steps`), :func:`cause_name`,
:func:`share_lost`, :func:`to_finding`, which applies the support thresholds and attaches
evidence, and :func:`rate_by_feature`, a finding's rate across a level feature's bins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envrigger.diagnose.config import DiagnoseConfig
from envrigger.diagnose.frame import EpisodeFrame
from envrigger.diagnose.model import Evidence, Finding
from envrigger.stats import wilson


@dataclass
class Flag:
    """A detector's verdict per episode (or per level), before thresholds and evidence."""

    name: str
    title: str
    mask: np.ndarray  # over episodes
    stats: dict[str, Any] = field(default_factory=dict)
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    kind: str = "ending"  # ending, region, level, behaviour (judged by contrast) or cost (in any episode)
    severity: float | None = None  # a cost's share of return lost; otherwise the share of failures covered


def cause_name(reason: str) -> str:
    """A stable weakness name from a verdict reason: ``"pole fell"`` -> ``"pole_fell"``."""
    return re.sub(r"[^a-z0-9]+", "_", str(reason).lower()).strip("_") or "unknown"


def last_steps(frame: EpisodeFrame, mask: np.ndarray, k: int) -> dict[int, tuple[int, int]]:
    """The last few steps of the first ``k`` flagged episodes: where an ending happened."""
    out = {}
    for i in np.flatnonzero(mask)[:k]:
        end = max(int(frame.length[i]) - 1, 0)
        out[int(frame.episode_id[i])] = (max(end - 4, 0), end)
    return out


def all_steps(frame: EpisodeFrame, mask: np.ndarray, k: int) -> dict[int, tuple[int, int]]:
    return {int(frame.episode_id[i]): (0, max(int(frame.length[i]) - 1, 0)) for i in np.flatnonzero(mask)[:k]}


def share_lost(lost: np.ndarray, returns: np.ndarray) -> float:
    """The share of the run's return that losses account for: sum(lost) / sum(|return| + lost)."""
    total = float(np.abs(returns).sum() + lost.sum())
    return float(lost.sum()) / total if total > 0 else 0.0


def to_finding(flag: Flag, frame: EpisodeFrame, excerpts: dict[tuple[int, int, int], list[dict]], config: DiagnoseConfig) -> Finding | None:
    """Apply the support thresholds; attach rate, interval, severity and evidence."""
    mask = flag.mask
    hits, total = int(mask.sum()), frame.n
    if hits < config.min_episodes or total == 0 or hits / total < config.min_rate:
        return None
    failed = ~frame.success
    total_failures = int(failed.sum())
    failures = int((mask & failed).sum())
    severity = flag.severity if flag.severity is not None else failures / total_failures if total_failures else 0.0
    seeds = dict(zip(frame.episode_id.tolist(), frame.seed.tolist()))
    evidence = [
        Evidence(
            episode_id=e,
            seed=seeds.get(e) if seeds.get(e, -1) >= 0 else None,
            start=lo,
            end=hi,
            note=f"steps {lo}-{hi}",
            excerpt=excerpts.get((e, lo, hi), []),
        )
        for e, (lo, hi) in list(flag.ranges.items())[: config.evidence]
    ]
    return Finding(
        name=flag.name,
        title=flag.title,
        episodes=hits,
        total=total,
        rate=hits / total,
        rate_ci=wilson(hits, total),
        failures=failures,
        severity=severity,
        stats=flag.stats,
        evidence=evidence,
        symptoms=[symptom["name"] for symptom in flag.stats.get("symptoms", [])],
    )


def rate_by_feature(mask: np.ndarray, values: np.ndarray, feature: str) -> dict[str, Any]:
    """A finding's rate in each bin of the level feature that explains it (its distinct values, or 8 quantile bins).

    Example:
        >>> rate_by_feature(np.array([False, True, True, True]), np.array([1.0, 1.0, 2.0, 2.0]), "size")
        {'feature': 'size', 'values': [1.0, 2.0], 'rate': [0.5, 1.0], 'episodes': [2, 2]}
    """
    known = ~np.isnan(values)
    distinct = np.unique(values[known])
    edges = distinct if len(distinct) <= 12 else np.unique(np.quantile(values[known], np.linspace(0, 1, 9)))
    bins = np.clip(np.searchsorted(edges, values[known], side="right") - 1, 0, len(edges) - 1)
    hits = mask[known]
    counts = [int((bins == b).sum()) for b in range(len(edges))]
    rates = [float(hits[bins == b].mean()) if counts[b] else 0.0 for b in range(len(edges))]
    return {"feature": feature, "values": edges.tolist(), "rate": rates, "episodes": counts}
