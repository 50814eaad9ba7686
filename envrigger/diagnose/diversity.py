"""Behaviour diversity: how varied a policy's play is across tasks, and the finding when it collapses.

Contains :func:`diversity` (the share of episodes with an action sequence of their own, and
the entropy of the states visited, pooled) and :func:`collapse` (the
``exploration_collapse`` finding between two measurements). The loop scores every arm's
validation levels with them each round, and a ledger's releases with the same measures
(its ``distinct_actions`` and ``visit_entropy`` metrics), so a round and a release read alike.

Example:
    >>> collapse({"accepted": 50.0, "distinct_actions": 80.0, "visit_entropy": 3.0},
    ...          {"accepted": 50.0, "distinct_actions": 20.0, "visit_entropy": 2.9})["name"]
    'exploration_collapse'
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import numpy as np

from envrigger.data import TrajectoryError, TrajectoryStore

LABELS = {"distinct_actions": "distinct action sequences", "visit_entropy": "state-visit entropy"}


def diversity(store: TrajectoryStore) -> dict[str, float | None]:
    """Distinct action sequences (points: tasks whose actions no other task repeats) and state-visit entropy (bits).

    Both are None unless the store holds one episode per seed (a run over a task set).
    """
    seeds = [int(s) for s in store.episodes_table(["seed"]).column("seed").to_pylist() if s is not None]
    if not seeds or len(set(seeds)) != len(seeds):
        return {"distinct_actions": None, "visit_entropy": None}
    by_seed: dict[int, tuple[str, Counter[str]]] = {}
    for episode, steps in store.iter_episode_steps():
        actions = hashlib.sha256("\x1f".join(s.action for s in steps).encode()).hexdigest()[:16]
        by_seed[int(episode.seed if episode.seed is not None else -1)] = (actions, Counter(s.obs_digest for s in steps))
    missing = [seed for seed in seeds if seed not in by_seed]
    if missing:
        raise TrajectoryError(f"the evaluation stored no episode for task seeds {missing[:3]}; evaluate again")
    tasks = [by_seed[seed] for seed in seeds]
    repeats = Counter(actions for actions, _ in tasks)
    ones = np.ones((1, len(tasks)))
    distinct = np.array([float(repeats[actions] == 1) for actions, _ in tasks])
    states: dict[str, int] = {}
    for _, visits in tasks:  # every state in the order first seen, task by task
        for state in visits:
            states.setdefault(state, len(states))
    counts = np.zeros((len(tasks), len(states)))
    for i, (_, visits) in enumerate(tasks):
        for state, count in visits.items():
            counts[i, states[state]] = count
    pooled = ones @ counts
    total = pooled.sum(axis=1, keepdims=True)
    p = np.divide(pooled, total, out=np.zeros_like(pooled), where=total > 0)
    entropy = -(p * np.log2(p, out=np.zeros_like(p), where=p > 0)).sum(axis=1)
    return {"distinct_actions": float((ones @ distinct / ones.sum(axis=1))[0]) * 100.0, "visit_entropy": float(entropy[0])}


def collapse(a: dict[str, Any], b: dict[str, Any], share: float = 0.25) -> dict[str, Any] | None:
    """The ``exploration_collapse`` finding: diversity fell by more than ``share`` from ``a`` to ``b`` while the accepted rate did not rise."""
    if b["accepted"] > a["accepted"]:
        return None
    fell = {
        name: (a[name], b[name])
        for name in ("distinct_actions", "visit_entropy")
        if a.get(name) and b.get(name) is not None and b[name] < (1 - share) * a[name]
    }
    if not fell:
        return None
    shown = "; ".join(f"{LABELS[name]} {x:.2f} -> {y:.2f}" for name, (x, y) in fell.items())
    return {
        "name": "exploration_collapse",
        "title": f"exploration collapse: behaviour diversity fell by more than {share:.0%} ({shown}) while the accepted-task rate "
        f"did not rise ({a['accepted']:.1f} -> {b['accepted']:.1f})",
        "fell": {name: list(pair) for name, pair in fell.items()},
    }
