"""The condition under which a failure mode happens, as a rule over state and level features.

Contains :func:`fit_rule` (a depth-limited decision tree, read as the rule of its purest
failing leaf) and :func:`state_condition`, which contrasts the states an agent acted on in
the last steps before a failure of one kind with states spread over successful episodes
(the level's features come along with each state). The rule is stated in the env's own
terms where the adapter names its features (``pole_angle > 0.031``), with its precision
(failing states among those it covers), recall (failing states it covers) and support.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from envrigger.diagnose.flags import Flag
from envrigger.diagnose.frame import EpisodeFrame
from envrigger.diagnose.steps import StateSample

MIN_PRECISION = 0.75
MIN_RECALL = 0.3
MIN_SUPPORT = 10


@dataclass(frozen=True)
class Rule:
    """A conjunction of ``(feature, op, threshold)`` clauses and how well it picks out the failing states."""

    clauses: tuple[tuple[str, str, float], ...]
    precision: float
    recall: float
    support: int

    def text(self, names: dict[str, str] | None = None) -> str:
        """``pole_angle > 0.031 and cart_velocity <= 0.5``, naming features by ``names`` where given."""
        names = names or {}
        return " and ".join(f"{names.get(f, f)} {op} {t:.3g}" for f, op, t in self.clauses)


def _best_split(x: np.ndarray, y: np.ndarray, rows: np.ndarray) -> tuple[int, float] | None:
    """The (feature, threshold) whose split of ``rows`` lowers the weighted Gini impurity the most (every cut, exactly).

    Each side keeps :data:`MIN_SUPPORT` rows; the threshold is the midpoint between the two
    values it separates.
    """
    labels = y[rows].astype(np.float64)
    n, pos = len(rows), float(labels.sum())
    best, best_score = None, 2 * pos * (1 - pos / n) if n else 0.0
    for j in range(x.shape[1]):
        order = np.argsort(x[rows, j], kind="stable")
        values, sorted_labels = x[rows, j][order], labels[order]
        left_n = np.arange(1, n)
        left_pos = np.cumsum(sorted_labels)[:-1]
        right_n, right_pos = n - left_n, pos - left_pos
        score = 2 * left_pos * (1 - left_pos / left_n) + 2 * right_pos * (1 - right_pos / right_n)
        valid = (values[1:] > values[:-1]) & (left_n >= MIN_SUPPORT) & (right_n >= MIN_SUPPORT)
        if not valid.any():
            continue
        k = int(np.argmin(np.where(valid, score, np.inf)))
        if score[k] < best_score - 1e-9:
            best, best_score = (j, float((values[k] + values[k + 1]) / 2)), float(score[k])
    return best


def fit_rule(x: np.ndarray, y: np.ndarray, names: list[str], depth: int = 2) -> Rule | None:
    """The rule of the purest leaf (then the largest) of a depth-limited tree separating ``y`` (True: failing) states.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> x = rng.normal(size=(400, 2))
        >>> y = x[:, 1] > 0.5
        >>> rule = fit_rule(x, y, ["a", "b"])
        >>> rule.clauses[0][:2], rule.precision, round(rule.recall, 2)
        (('b', '>'), 1.0, 1.0)
    """
    total_pos = float(y.sum())
    if total_pos == 0 or total_pos == len(y):
        return None
    leaves: list[tuple[tuple[tuple[str, str, float], ...], np.ndarray]] = []

    def grow(rows: np.ndarray, clauses: tuple[tuple[str, str, float], ...], left: int) -> None:
        purity = float(y[rows].mean())
        split = _best_split(x, y, rows) if left > 0 and 0 < purity < 1 else None
        if split is None:
            leaves.append((clauses, rows))
            return
        j, cut = split
        below = x[rows, j] <= cut
        grow(rows[below], (*clauses, (names[j], "<=", cut)), left - 1)
        grow(rows[~below], (*clauses, (names[j], ">", cut)), left - 1)

    grow(np.arange(len(y)), (), depth)
    scored = [(float(y[r].mean()), len(r), c, r) for c, r in leaves if c and len(r) >= MIN_SUPPORT]
    if not scored:
        return None
    precision, support, clauses, rows = max(scored, key=lambda s: (round(s[0], 6), s[1]))
    # A clause that does not raise precision is dropped: the shorter rule says the same.
    for k in range(len(clauses)):
        shorter = clauses[:k] + clauses[k + 1 :]
        if shorter:
            covered = _covers(x, names, shorter)
            if covered.sum() and float(y[covered].mean()) >= precision - 1e-9:
                clauses, rows = shorter, np.flatnonzero(covered)
                break
    covered_pos = float(y[rows].sum())
    return Rule(tuple(clauses), precision=float(y[rows].mean()), recall=covered_pos / total_pos, support=len(rows))


def _covers(x: np.ndarray, names: list[str], clauses: tuple[tuple[str, str, float], ...]) -> np.ndarray:
    mask = np.ones(len(x), dtype=bool)
    for feature, op, cut in clauses:
        column = x[:, names.index(feature)]
        mask &= column > cut if op == ">" else column <= cut
    return mask


def state_condition(
    flag: Flag, frame: EpisodeFrame, states: StateSample | None, names: dict[str, str] | None = None
) -> dict[str, Any] | None:
    """The condition under which the failures of ``flag`` happen, or None where the states show none.

    Failing states: those acted on in the last steps of the flag's failed episodes.
    Contrast states: those spread over successful episodes. A rule is kept when its
    precision is at least :data:`MIN_PRECISION` and it covers :data:`MIN_RECALL` of the
    failing states, and it is purer than the failing states' base rate by 0.2 at least.
    """
    if states is None or not len(states.x) or not frame.success.any():
        return None
    index = {int(e): i for i, e in enumerate(frame.episode_id)}
    rows = np.array([index.get(int(e), -1) for e in states.episode])
    known = rows >= 0
    failing = np.zeros(len(rows), dtype=bool)
    failing[known] = flag.mask[rows[known]]
    winning = np.zeros(len(rows), dtype=bool)
    winning[known] = frame.success[rows[known]]
    use = failing | winning
    if failing.sum() < MIN_SUPPORT or winning.sum() < MIN_SUPPORT:
        return None
    level = {k: v for k, v in frame.features.items() if not np.isnan(v).all()}
    columns = [states.x[use]] + [level[k][rows[use]][:, None] for k in sorted(level)]
    x = np.nan_to_num(np.hstack(columns), nan=-1e9)
    feature_names = list(states.names) + sorted(level)
    y = failing[use]
    rule = fit_rule(x, y, feature_names)
    if rule is not None:  # an integer feature reads better cut at an integer: "size > 6", not "size > 6.5"
        whole = {n for j, n in enumerate(feature_names) if np.all(np.mod(x[:, j], 1) == 0)}
        clauses = tuple((f, op, float(np.floor(t)) if f in whole else t) for f, op, t in rule.clauses)
        rule = Rule(clauses, rule.precision, rule.recall, rule.support)
    if rule is None or rule.precision < MIN_PRECISION or rule.recall < MIN_RECALL or rule.precision < float(y.mean()) + 0.2:
        return None
    main = feature_names.index(rule.clauses[0][0])
    edges = np.unique(np.quantile(x[:, main], np.linspace(0, 1, 13)))
    histogram = {
        "feature": (names or {}).get(rule.clauses[0][0], rule.clauses[0][0]),
        "edges": edges.tolist(),
        "failing": np.histogram(x[y, main], bins=edges)[0].tolist() if len(edges) > 1 else [],
        "success": np.histogram(x[~y, main], bins=edges)[0].tolist() if len(edges) > 1 else [],
    }
    return {
        "histogram": histogram,
        "rule": rule.text(names),
        "clauses": [{"feature": (names or {}).get(f, f), "raw": f, "op": op, "threshold": t} for f, op, t in rule.clauses],
        "precision": rule.precision,
        "recall": rule.recall,
        "support": rule.support,
        "failing_states": int(y.sum()),
        "success_states": int((~y).sum()),
    }


__all__ = ["Rule", "fit_rule", "state_condition"]
