"""The solvability gates: the reshaped levels can be won.

Contains :class:`Solvability` (the reference solver, then a search with the env's own
step) and :class:`SolvableByAgent` (the agent's own verified wins, the last proof, run
only when the first could not decide).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envrigger.loop.gates.base import Gate, GateContext, GateResult, register_gate
from envrigger.loop.gates.learnability import agent_rollouts
from envrigger.loop.solvability import search_levels, searchable


@register_gate
class Solvability(Gate):
    """The reshaped levels can be won; undecided (``None``) when only the agent's own success can tell.

    Proof, in this order: the reference solver wins at least ``solvable_min`` of the
    levels or that fraction of its rate on the original (relative, so that envs where even
    the solver often fails, slippery maps, keep reshapings as solvable as they were); else
    a search over the level's states with the env's own step
    (:mod:`envrigger.loop.solvability`: MiniGrid without rule transforms) decides either
    way; else a solver that wins original levels and not these rejects them; a solver
    that wins no original level knows nothing of the task and decides nothing. Reads
    ``notes["reference_rate"]`` (left by the integrity gate).
    """

    name, order = "solvability", 20

    def run(self, context: GateContext, seeds: list[int]) -> GateResult | None:
        validator, config = context.validator, context.validator.config
        reference_rate = float(context.notes.get("reference_rate", 0.0))
        base_rate = validator.base_reference_rate(seeds)
        needed = min(config.solvable_min, config.solvable_fraction * base_rate)
        stat: dict[str, Any] = {"reference_success": reference_rate, "base_reference_success": base_rate, "needed": needed}
        if reference_rate > 0 and reference_rate >= needed:
            return GateResult(
                gate=self.name,
                passed=True,
                statistic={**stat, "method": "reference solver"},
                detail="the reference solver succeeds as it does on the original",
            )
        if searchable(context.candidate.spec):
            found: list[bool | None] = []
            for seed in seeds:  # level by level, the budget checked between them: a search cannot run far past it
                context.check_budget(clock=False)
                found += search_levels(context.candidate.spec, [seed])
            solved, unsolvable = found.count(True), found.count(False)
            stat = {
                **stat,
                "method": "search",
                "searched": len(found),
                "solvable": solved,
                "unsolvable": unsolvable,
                "undecided": found.count(None),
            }
            if solved >= config.solvable_min * len(found):
                return GateResult(gate=self.name, passed=True, statistic=stat, detail="a search with the env's own step wins the levels")
            if unsolvable > (1 - config.solvable_min) * len(found):
                return GateResult(
                    gate=self.name, passed=False, statistic=stat, detail="a search with the env's own step proves the levels lost"
                )
        if base_rate > 0:
            return GateResult(
                gate=self.name,
                passed=False,
                statistic={**stat, "method": "reference solver"},
                detail="the reference solver wins the original's levels, not these",
            )
        context.notes["solvability_undecided"] = {"reference_success": reference_rate}
        return None


@register_gate
class SolvableByAgent(Gate):
    """At least one success the verifier gave the agent on the candidate's levels: the last proof, failing closed without one.

    Runs only when :class:`Solvability` was undecided; plays (or reuses) the learnability
    rollouts (``notes["store"]``) and records its result as ``solvability``.
    """

    name, records, order, seeds = "solvable_by_agent", "solvability", 35, "all"

    def applies(self, context: GateContext) -> bool:
        return "solvability_undecided" in context.notes

    def run(self, context: GateContext, seeds: list[int]) -> GateResult:
        store = agent_rollouts(context, seeds)
        wins = int(np.sum(store.episodes_table(["success"]).column("success").to_numpy(zero_copy_only=False)))
        undecided = context.notes.get("solvability_undecided", {})
        return GateResult(
            gate=self.records,
            passed=wins > 0,
            statistic={**undecided, "method": "agent", "agent_successes": wins, "agent_rollouts": len(store)},
            detail="the agent itself won a level (verified)"
            if wins
            else "nothing proves the levels winnable: no solver, search or agent won one (fail closed)",
        )
