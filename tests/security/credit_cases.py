"""What the credit attacks share: the small credited FrozenLake loop (slippery 4x4, Q-learning, one round, 10 scoring levels), a TextWorld agent on a scripted model that walks each game, and round summaries to compare."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from envharness import HarnessSpec
from envrigger.agents import default_harness
from envrigger.agents.scripted import Reply, listed_commands
from envrigger.loop.library import Library

needs_textworld = pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="needs the textworld extra")

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


TW = HarnessSpec(env_id="envharness/TextWorld-v0", env_kwargs={"levels": [3], "games_per_level": 2})


def walker() -> Any:
    """A scripted model that plays each game's own walkthrough (it wins), then a listed command."""
    known = {}
    for seed in range(6):
        env = TW.build()
        obs, _ = env.reset(seed=seed)
        known[obs["text"][:200]] = list(env.unwrapped.policy)
        env.close()

    def model(request: dict[str, Any]) -> Reply:
        first = next(m["content"] for m in request["messages"] if m["role"] == "user")
        plan = next((p for opening, p in known.items() if opening in first), [])
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        return Reply(content=plan[turn] if turn < len(plan) else listed_commands(request)[0])

    return model


def agent(url: str) -> dict[str, Any]:
    harness = default_harness(TW.env_id).model_copy(update={"context": {"keep_turns": None, "token_budget": None}})
    return {"base_url": url, "model": "scripted", "harness": harness.model_dump(mode="json"), "api_key_env": "OPENAI_API_KEY"}
