"""The learnability gate: the agent's success rate on the candidate, with a Wilson interval, lies inside the band.

Contains :class:`Learnability` and :func:`agent_rollouts` (the agent's rollouts on the
candidate, played once per validation and shared with the gates after it).
"""

from __future__ import annotations

import statistics

import numpy as np

from envrigger.data import TrajectoryStore
from envrigger.loop.gates.base import Gate, GateContext, GateResult, register_gate
from envrigger.stats import wilson


def agent_rollouts(context: GateContext, seeds: list[int]) -> TrajectoryStore:
    """The agent's rollouts on the candidate: ``min_rollouts`` first, half as many again while the interval is undecided.

    Played once per validation (kept in ``notes["store"]``, the learnability verdict in
    ``notes["learnability"]``); each batch adds only the new seeds to the candidate's run.
    The first ``min_rollouts`` episodes' behaviour is remembered for the novelty gate.
    """
    if "store" in context.notes:
        return context.notes["store"]  # type: ignore[no-any-return]
    validator, config = context.validator, context.validator.config
    z = statistics.NormalDist().inv_cdf((1 + config.confidence) / 2)
    lo_band, hi_band = config.band
    n, done = config.min_rollouts, 0
    limit = context.episode_limit() if config.candidate_max_steps is not None and config.worst_case else None
    while True:
        context.check_budget(upcoming=(n - done) * limit if limit else 0)
        store = validator.run_agent(context.candidate.spec, seeds[done:n], f"candidate-{context.candidate.hash}")
        done = n
        wins = int(np.sum(store.episodes_table(["success"]).column("success").to_numpy(zero_copy_only=False)))
        lo, hi = wilson(wins, n, z)
        stat = {
            "rollouts": n,
            "successes": wins,
            "rate": wins / n,
            "ci": [lo, hi],
            "band": list(config.band),
            "confidence": config.confidence,
        }
        if lo >= lo_band and hi <= hi_band:
            verdict = GateResult(gate="learnability", passed=True, statistic=stat, detail="interval inside the band")
        elif hi < lo_band or lo > hi_band:
            verdict = GateResult(gate="learnability", passed=False, statistic=stat, detail="interval outside the band")
        elif n >= config.max_rollouts:
            verdict = GateResult(
                gate="learnability",
                passed=False,
                statistic={**stat, "inconclusive": True},
                detail="inconclusive at the rollout budget: rejected (fail closed)",
            )
        else:
            n = min(config.max_rollouts, max(n + 1, (3 * n + 1) // 2))  # half as many again: stop soon after it is decided
            continue
        break
    first = store.episodes_table(["success", "length"]).slice(0, config.min_rollouts)
    validator.remember_behaviour(
        context.candidate.hash,
        seeds[: config.min_rollouts],
        (float(np.mean(first.column("success").to_numpy(zero_copy_only=False))), float(np.mean(first.column("length").to_numpy()))),
    )
    context.notes["store"], context.notes["learnability"] = store, verdict
    return store


@register_gate
class Learnability(Gate):
    """The agent's success rate, with a Wilson interval, lies inside the band (adding rollouts while inconclusive)."""

    name, order, seeds = "learnability", 40, "all"

    def run(self, context: GateContext, seeds: list[int]) -> GateResult:
        agent_rollouts(context, seeds)
        return context.notes["learnability"]  # type: ignore[no-any-return]
