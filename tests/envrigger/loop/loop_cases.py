"""What the loop's tests share: the fixed 8x8 lake, its seeds, a candidate reshaping of it, a gate's result, small loop configs."""

from __future__ import annotations

from envharness import HarnessSpec
from envrigger.loop.propose import Candidate

STOCK_GATES = ["verifier_integrity", "solvability", "no_shortcut", "solvable_by_agent", "learnability", "targeting", "novelty", "transfer"]
"""The stock gates in the order they run: the one list the tests pin (a new stock gate is added here)."""
DEFAULT_GATES = [g for g in STOCK_GATES if g not in ("solvable_by_agent", "transfer")]
"""The gates a candidate passes through by default: solvable_by_agent decides only what solvability left open, transfer is opt-in."""

LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})

SEEDS = list(range(3_000_000, 3_000_200))


def candidate(*transforms: dict, finding: str = "terminal_cause:hole", stats: dict | None = None, base: HarnessSpec = LAKE) -> Candidate:
    spec = base.extended(*transforms)
    return Candidate(spec=spec, added=list(transforms), finding=finding, finding_stats=stats or {}, rationale="test", origin="catalog")


def gate(validation, name):
    return next((g for g in validation.gates if g.gate == name), None)


NEAR = {"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}}

SMALL = dict(
    spec=LAKE,
    learner="qlearning",
    rounds=2,
    budget_steps=4000,
    collect_episodes=30,
    eval_episodes=30,
    val_episodes=20,
    candidates_per_round=3,
    backend="serial",
    min_rollouts=20,
    max_rollouts=40,
    allow_seen_levels=True,
    band=(0.05, 0.95),
)
DOORKEY = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")

# For tests of the loop's machinery (level disjointness, identical networks): the same levels with a
# 60-step horizon (MiniGrid's own max_steps), since an untrained agent plays every episode to its end.
SHORT_DOORKEY = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0", env_kwargs={"max_steps": 60})
