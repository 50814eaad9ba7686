"""Metrics of a cell's held-out results, and the attribution of a change between releases to its factors.

Contains :data:`METRICS`, :func:`summarize` (every metric of one cell, the accepted-task
rate with its Wilson interval), :func:`shapley` (exact Shapley values over the changed
factors), :func:`attribute` (each factor's share of a metric's change, with paired
bootstrap intervals over tasks: every resample draws the same tasks for every cell) and
:func:`collapse` (the ``exploration_collapse`` finding). Every random draw takes an explicit
seed.

Every metric is a function of a set of tasks, so a resample of tasks gives a resample of
each cell's metric; the cells are played on the same tasks with the same seeds, which is
what makes the comparison paired.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from envrigger.ledger.store import TaskResult
from envrigger.stats import percentile_interval, wilson

# name -> (label, unit, scale shown, whether higher is better)
METRICS: dict[str, tuple[str, str, float, bool]] = {
    "accepted": ("accepted-task rate", "points", 100.0, True),
    "tokens": ("tokens per task", "tokens", 1.0, False),
    "cost_usd": ("cost per task", "USD", 1.0, False),
    "wall_s": ("wall seconds per task", "s", 1.0, False),
    "tool_errors": ("tool errors per task", "", 1.0, False),
    "retries": ("retries per task", "", 1.0, False),
    "human_interventions": ("human interventions per task", "", 1.0, False),
    "irreversible": ("irreversible failures", "points", 100.0, False),
    "steps_per_solved": ("steps per solved task", "steps", 1.0, False),
    "distinct_actions": ("distinct action sequences", "points", 100.0, True),
    "visit_entropy": ("state-visit entropy", "bits", 1.0, True),
}


class Columns:
    """One cell's results as arrays over tasks, so that a metric of many resamples is a few matrix products."""

    def __init__(self, results: Sequence[TaskResult], states: dict[str, int]) -> None:
        n = len(results)
        self.n = n
        column = lambda f: np.array([f(r) for r in results], dtype=np.float64)  # noqa: E731
        self.per_task = {
            "accepted": column(lambda r: r.success),
            "tokens": column(lambda r: r.input_tokens + r.output_tokens),
            "cost_usd": column(lambda r: r.cost_usd),
            "wall_s": column(lambda r: r.wall_s),
            "tool_errors": column(lambda r: r.tool_errors),
            "retries": column(lambda r: r.retries),
            "human_interventions": column(lambda r: r.human_interventions),
            "irreversible": column(lambda r: r.irreversible),
        }
        self.solved_steps = column(lambda r: r.steps if r.success else 0)
        # Per task, so that a resample of tasks resamples it without bias: whether no other task played the same actions.
        repeats = Counter(r.actions for r in results)
        self.per_task["distinct_actions"] = column(lambda r: repeats[r.actions] == 1)
        for r in results:
            for state in r.visits:
                states.setdefault(state, len(states))
        self.visits = np.zeros((n, len(states)))
        for i, r in enumerate(results):
            for state, count in r.visits.items():
                self.visits[i, states[state]] = count

    def metric(self, name: str, weights: np.ndarray) -> np.ndarray:
        """``name`` for each row of ``weights`` (resamples x tasks: how often each task was drawn)."""
        if name in self.per_task:
            return weights @ self.per_task[name] / weights.sum(axis=1)
        if name == "steps_per_solved":
            solved = weights @ self.per_task["accepted"]
            return np.where(solved > 0, (weights @ self.solved_steps) / np.maximum(solved, 1), np.nan)
        if name == "visit_entropy":
            visits = weights @ self.visits
            total = visits.sum(axis=1, keepdims=True)
            p = np.divide(visits, total, out=np.zeros_like(visits), where=total > 0)
            return -(p * np.log2(p, out=np.zeros_like(p), where=p > 0)).sum(axis=1)
        raise KeyError(name)


def _columns(cells: dict[Any, Sequence[TaskResult]]) -> dict[Any, Columns]:
    states: dict[str, int] = {}
    built = {key: Columns(results, states) for key, results in cells.items()}
    for columns in built.values():  # every cell sees the same state index (pooled visits compare one to one)
        if columns.visits.shape[1] < len(states):
            columns.visits = np.pad(columns.visits, ((0, 0), (0, len(states) - columns.visits.shape[1])))
    return built


def summarize(results: Sequence[TaskResult]) -> dict[str, Any]:
    """Every metric of one cell on its tasks, as shown (rates in points), with the accepted-task rate's Wilson interval.

    Example:
        >>> ok = TaskResult(True, 1.0, 4, 10, 2, 0.0, 0.1, 0, 0, 0, False, None, "a", {"s": 4})
        >>> bad = TaskResult(False, 0.0, 9, 30, 6, 0.0, 0.2, 1, 0, 0, True, None, "b", {"s": 9})
        >>> s = summarize([ok, bad])
        >>> s["accepted"], s["irreversible"], s["steps_per_solved"], s["tokens"]
        (50.0, 50.0, 4.0, 24.0)
    """
    columns = _columns({0: results})[0]
    ones = np.ones((1, columns.n))
    out: dict[str, Any] = {}
    for name, (_, _, scale, _) in METRICS.items():
        value = float(columns.metric(name, ones)[0])
        out[name] = None if math.isnan(value) else value * scale
    wins = sum(r.success for r in results)
    lo, hi = wilson(wins, len(results))
    out["accepted_ci"] = [100 * lo, 100 * hi]
    out["tasks"], out["solved"], out["errors"] = len(results), wins, sum(r.error is not None for r in results)
    return out


def shapley(value: Callable[[frozenset[str]], Any], factors: Sequence[str]) -> dict[str, Any]:
    """Exact Shapley values of ``value`` (a function of the set of factors switched to the new release) over ``factors``.

    Example:
        >>> v = {frozenset(): 0.0, frozenset({"model"}): 2.0, frozenset({"harness"}): 9.0, frozenset({"model", "harness"}): 11.0}
        >>> shapley(v.__getitem__, ["model", "harness"])
        {'model': 2.0, 'harness': 9.0}
    """
    k = len(factors)
    out = {}
    for factor in factors:
        others = [f for f in factors if f != factor]
        total: Any = 0.0
        for size in range(k):
            weight = math.factorial(size) * math.factorial(k - size - 1) / math.factorial(k)
            for subset in itertools.combinations(others, size):
                s = frozenset(subset)
                total = total + weight * (value(s | {factor}) - value(s))
        out[factor] = total
    return out


def attribute(
    cells: dict[frozenset[str], Sequence[TaskResult]], factors: Sequence[str], metrics: Sequence[str] | None = None,
    resamples: int = 2000, seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """Each factor's Shapley share of every metric's change from release A (``frozenset()``) to B (all ``factors``).

    ``cells`` maps each set of factors switched to B's to that cell's results (all 2^k of
    them, on the same tasks). Intervals are 95% percentile intervals of a paired bootstrap
    over tasks.
    """
    columns = _columns(cells)
    n = next(iter(columns.values())).n
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    weights = np.zeros((resamples + 1, n))
    weights[0] = 1.0  # row 0: the tasks as they are; the others: resamples
    np.add.at(weights, (np.repeat(np.arange(1, resamples + 1), n), draws.ravel()), 1.0)
    out: dict[str, Any] = {}
    for name in metrics or list(METRICS):
        scale = METRICS[name][2]
        values = {key: c.metric(name, weights) * scale for key, c in columns.items()}
        every = frozenset(factors)
        shares = shapley(values.__getitem__, list(factors))
        total = values[every] - values[frozenset()]

        out[name] = {
            "a": _plain(values[frozenset()][0]),
            "b": _plain(values[every][0]),
            "change": _plain(total[0]),
            "ci": percentile_interval(total[1:]),  # row 0 is the tasks as they are; the rest are resamples
            "factors": {f: {"value": _plain(shares[f][0]), "ci": percentile_interval(shares[f][1:])} for f in factors},
        }
    return out


def _plain(value: float) -> float | None:
    return None if math.isnan(float(value)) else float(value)


def headline(attribution: dict[str, Any], factors: Sequence[str], metric: str = "accepted") -> str:
    """The line a release note can quote: the change, its interval, and each factor's share (every factor, changed or not)."""
    from envrigger.ledger.factors import FACTORS

    entry = attribution[metric]
    label, unit, _, _ = METRICS[metric]
    unit = f" {unit}" if unit else ""
    ci = entry["ci"]
    shown_ci = f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else ""
    parts = []
    shares = {f: entry["factors"][f]["value"] if f in entry["factors"] else 0.0 for f in FACTORS}
    for factor in sorted(FACTORS, key=lambda f: -abs(shares[f] or 0.0)):
        parts.append(f"{factor} {(shares[factor] or 0.0):+.1f}")
    change = entry["change"]
    return (
        f"{label} {change:+.1f}{unit}{shown_ci}: {', '.join(parts)}" if change is not None else f"{label}: not defined for these releases"
    )
