"""The small credited loop the credit attacks share: slippery FrozenLake 4x4, Q-learning, one round, scored on 10 levels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envharness import HarnessSpec
from envrigger.loop.library import Library

# Slippery: which seeds a chunk plays changes what is learned, so a wrong seed or a shared table shows.
LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "4x4", "is_slippery": True})
CREDITED: dict[str, Any] = dict(
    spec=LAKE,
    learner="qlearning",
    arms=["original", "rigger"],
    rounds=1,
    budget_steps=3000,
    collect_episodes=20,
    eval_episodes=10,
    val_episodes=10,
    candidates_per_round=1,
    backend="serial",
    min_rollouts=10,
    max_rollouts=20,
    allow_seen_levels=True,
    credit_episodes=10,
)


def rounds_of(run: Path) -> list[dict[str, Any]]:
    """A run's committed round summaries without their wall times: what two runs of one config must agree on."""
    library = Library(run / "library.db", create=False)
    try:
        return [{k: v for k, v in r.items() if k not in ("wall_time", "stage_seconds")} for r in library.rounds()]
    finally:
        library.close()
