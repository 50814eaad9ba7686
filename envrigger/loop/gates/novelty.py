"""The novelty gate: a candidate is neither an admitted hash nor behaviourally the same as an admitted env or the base.

Contains :class:`Novelty`.
"""

from __future__ import annotations

from envrigger.loop.gates.base import Gate, GateContext, GateResult, register_gate


@register_gate
class Novelty(Gate):
    """Not an admitted hash, and not behaviourally identical to an admitted component or the base env."""

    name, order, seeds = "novelty", 60, "first"

    def run(self, context: GateContext, seeds: list[int]) -> GateResult:
        candidate, validator, config = context.candidate, context.validator, context.validator.config
        if candidate.hash in {h for h, _ in context.admitted}:
            return GateResult(gate=self.name, passed=False, statistic={"duplicate_of": candidate.hash}, detail="already admitted")
        mine = validator.behaviour(candidate.spec, seeds)
        closest: tuple[float, float] | None = None
        twin: str | None = None
        for name, spec in [("base", validator.base), *context.admitted]:
            other = validator.behaviour(spec, seeds)
            gap = (abs(mine[0] - other[0]), abs(mine[1] - other[1]) / max(mine[1], other[1], 1.0))
            if closest is None or sum(gap) < sum(closest):
                closest, twin = gap, name
        assert closest is not None  # the base env is always compared
        same = closest[0] <= config.novelty_success_tol and closest[1] <= config.novelty_length_tol
        return GateResult(
            gate=self.name,
            passed=not same,
            statistic={"closest": twin, "success_gap": closest[0], "length_gap": closest[1], "success": mine[0], "mean_length": mine[1]},
            detail="behaves like an existing environment" if same else "behaves differently from every admitted one",
        )
