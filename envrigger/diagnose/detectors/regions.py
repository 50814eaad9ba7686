"""Where failure concentrates among levels: the level-feature region that fails most.

Contains :func:`feature_regions`.
"""

from __future__ import annotations

import math

import numpy as np

from envrigger.diagnose.config import DiagnoseConfig
from envrigger.diagnose.finding_names import FindingName, episode_detector, produces
from envrigger.diagnose.flags import Flag, all_steps
from envrigger.diagnose.frame import EpisodeFrame


def _one_sided_p(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


@episode_detector(order=20)
@produces(FindingName("feature_region:FEATURE", "region", "failed inside the level-feature region where failure concentrates most"))
def feature_regions(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Flag]:
    """Per level feature, the threshold split whose side concentrates failure the most."""
    failed = ~frame.success
    n, total_fail = frame.n, int(failed.sum())
    if total_fail == 0 or total_fail == n:
        return []
    base = total_fail / n
    out = []
    for feature, values in sorted(frame.features.items()):
        known = ~np.isnan(values)
        distinct = np.unique(values[known])
        if len(distinct) < 2 or known.sum() < config.region_min_episodes:
            continue
        thresholds = distinct[:-1] if len(distinct) <= 33 else np.unique(np.quantile(values[known], np.linspace(0.03, 0.97, 32)))
        best = None
        for threshold in thresholds:
            for op, region in ((">", known & (values > threshold)), ("<=", known & (values <= threshold))):
                size = int(region.sum())
                rest = n - size
                if size < config.region_min_episodes or size < config.region_min_support * n or rest == 0:
                    continue
                fail_in, fail_out = int((failed & region).sum()), int((failed & ~region).sum())
                p_in, p_out = fail_in / size, fail_out / rest
                pooled = (fail_in + fail_out) / n
                se = math.sqrt(pooled * (1 - pooled) * (1 / size + 1 / rest))
                z = (p_in - p_out) / se if se > 0 else 0.0
                if best is None or z > best[0]:
                    best = (z, op, float(threshold), region, size, p_in, p_out)
        if best is None:
            continue
        z, op, threshold, region, size, p_in, p_out = best
        lift = p_in / base
        p_value = _one_sided_p(z)
        if p_value > config.region_max_p or lift < config.region_min_lift:
            continue
        mask = region & failed
        out.append(
            Flag(
                f"feature_region:{feature}",
                f"fails when {feature} {op} {threshold:g} ({p_in:.0%} vs {p_out:.0%} elsewhere)",
                mask,
                stats={
                    "feature": feature,
                    "op": op,
                    "threshold": threshold,
                    "support": size / n,
                    "region_episodes": size,
                    "failure_rate_in": p_in,
                    "failure_rate_out": p_out,
                    "lift": lift,
                    "z": z,
                    "p_value": p_value,
                },
                ranges=all_steps(frame, mask, config.evidence),
                kind="region",
            )
        )
    return out
