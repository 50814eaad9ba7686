"""Scoring a policy on the original env with its original verifier: :func:`evaluate`.

Used for the validation levels every round (to pick an arm's round), for the held-out
levels once at the end, and by the transfer gate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from envharness.spec import HarnessSpec
from envrigger.diagnose.diversity import diversity  # the ledger's measures too, so a round and a release read alike
from envrigger.loop.config import LoopConfig
from envrigger.loop.results import Evaluation
from envrigger.rollout import backend_for, rollout
from envrigger.stats import wilson

SPEND = ("model_calls", "input_tokens", "output_tokens")  # an LLM agent's endpoint cost, as its learner's ``spent`` counts it


def spent_in(store: Any) -> dict[str, int]:
    """An LLM agent's endpoint cost over every episode of ``store`` (a :class:`~envrigger.data.TrajectoryStore`), by :data:`SPEND`."""
    costs = store.episodes_table(list(SPEND))
    return {k: int(sum(v or 0 for v in costs.column(k).to_pylist())) for k in SPEND}


def evaluate(
    policy: Any,
    spec: HarnessSpec,
    seeds: list[int],
    out: Path,
    config: LoopConfig,
    trained_on: set[str] | None = None,
    by_seed: bool = False,
    spend: bool = False,
) -> Evaluation:
    """Success of ``policy`` on the original env with its original verifier, one episode per seed.

    Reports the success rate with its Wilson interval (over these episodes of one learner),
    the mean episode length, the mean length of successful episodes (steps to success), the
    env steps taken, the number of distinct levels and, with ``trained_on``, the share of
    episodes on a level the learner trained on. With ``by_seed``, ``outcomes`` maps each seed
    to whether its episode succeeded (what a paired comparison of two learners reads); with
    ``spend``, ``spent`` sums the episodes' model calls and tokens (an LLM agent's endpoint cost).
    """
    store = rollout(spec, policy, seeds=seeds, out=out, **backend_for(policy, config.backend, config.workers, config.rollout_batch))
    table = store.episodes_table(["success", "length", "level_id", "seed"])
    success = table.column("success").to_numpy(zero_copy_only=False).astype(bool)
    lengths = table.column("length").to_numpy()
    wins = int(success.sum())
    lo, hi = wilson(wins, len(seeds))
    levels = table.column("level_id").to_pylist()
    result = {
        "success": wins / len(seeds),
        "ci": [lo, hi],
        "episodes": len(seeds),
        "mean_length": float(np.mean(lengths)),
        "steps_to_success": float(np.mean(lengths[success])) if wins else None,
        "env_steps": int(lengths.sum()),
        "levels": len(set(levels)),
    }
    result["diversity"] = diversity(store)
    if spend:
        result["spent"] = spent_in(store)
    if by_seed:
        result["outcomes"] = dict(zip(table.column("seed").to_pylist(), success.tolist(), strict=True))
    if trained_on is not None:
        result["seen_in_training"] = sum(level in trained_on for level in levels) / len(levels)
    return Evaluation(**result)
