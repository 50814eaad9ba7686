"""The intervals envrigger reports its numbers with, in one place.

Contains :func:`wilson` (a rate over episodes or tasks), :func:`t_interval` (a mean across
training seeds, Student's t), :func:`normal_interval` (a mean difference over many paired
levels, the normal approximation) and :func:`percentile_interval` (the 95% percentile
interval of bootstrap resamples). All are 95% intervals by default.

Example:
    >>> import numpy as np
    >>> [round(x, 3) for x in wilson(8, 10)]
    [0.49, 0.943]
    >>> summary = t_interval(np.array([0.7, 0.8, 0.9]), bounds=(0.0, 1.0))
    >>> round(summary["mean"], 2), [round(x, 2) for x in summary["ci"]], summary["n"]
    (0.8, [0.55, 1.0], 3)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Two-sided 95% quantiles of Student's t by degrees of freedom (n - 1 seeds); 1.96 beyond 30.
T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
}


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a proportion (95% by default); ``(0, 1)`` when ``n`` is 0.

    Example:
        >>> lo, hi = wilson(8, 10)
        >>> round(lo, 3), round(hi, 3)
        (0.49, 0.943)
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def t_interval(values: np.ndarray, bounds: tuple[float, float] = (-np.inf, np.inf)) -> dict[str, Any]:
    """Mean and 95% t interval across ``values`` (one per seed), the interval clipped to ``bounds``: ``{"mean", "ci", "n"}``."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return {"mean": mean, "ci": [mean, mean], "n": len(values)}
    half = T975.get(len(values) - 1, 1.96) * float(np.std(values, ddof=1)) / float(np.sqrt(len(values)))
    return {"mean": mean, "ci": [max(mean - half, bounds[0]), min(mean + half, bounds[1])], "n": len(values)}


def normal_interval(values: np.ndarray, z: float = 1.96) -> tuple[float, float]:
    """Mean plus and minus ``z`` standard errors (the normal approximation, for many values); NaN ends below two values.

    Example:
        >>> [round(x, 3) for x in normal_interval(np.array([0.0, 1.0, 1.0, 0.0]))]
        [-0.066, 1.066]
    """
    mean = float(np.mean(values))
    half = z * float(np.std(values, ddof=1)) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return mean - half, mean + half


def paired_se(first: list[float], second: list[float]) -> float:
    """Standard error of the mean paired difference ``first[i] - second[i]`` (the same levels played by two learners); 0 below two pairs.

    Example:
        >>> round(paired_se([1, 0, 0, 0], [0, 0, 1, 1]), 3)   # one level won only by the first, two only by the second
        0.479
        >>> paired_se([1, 0, 1], [1, 0, 1])                  # the same outcome on every level: no noise in the difference
        0.0
    """
    if len(first) != len(second):
        raise ValueError(f"paired_se: {len(first)} and {len(second)} outcomes; give one of each per level")
    if len(first) < 2:
        return 0.0
    differences = np.asarray(first, dtype=float) - np.asarray(second, dtype=float)
    return float(np.std(differences, ddof=1)) / math.sqrt(len(differences))


def percentile_interval(resamples: np.ndarray) -> list[float] | None:
    """The 95% percentile interval of bootstrap ``resamples`` (NaNs left out); None when none is a number.

    Example:
        >>> percentile_interval(np.array([np.nan, *range(101)]))
        [2.5, 97.5]
    """
    kept = resamples[~np.isnan(resamples)]
    return [float(np.percentile(kept, 2.5)), float(np.percentile(kept, 97.5))] if len(kept) else None
