"""The targeting gate: the weakness a candidate targets occurs in the agent's rollouts on it.

Contains :class:`Targeting`.
"""

from __future__ import annotations

from envrigger.diagnose import DiagnoseConfig, diagnose
from envrigger.loop.gates.base import Gate, GateContext, GateResult, register_gate
from envrigger.loop.gates.learnability import agent_rollouts


@register_gate
class Targeting(Gate):
    """The targeted weakness occurs in the candidate's rollouts (or its feature region is exercised)."""

    name, order, seeds = "targeting", 50, "all"

    def run(self, context: GateContext, seeds: list[int]) -> GateResult:
        candidate, store = context.candidate, agent_rollouts(context, seeds)
        stats = candidate.finding_stats
        if candidate.finding.startswith("feature_region:") and {"feature", "op", "threshold"} <= set(stats):
            feature, op, threshold = stats["feature"], stats["op"], float(stats["threshold"])
            values = [e.level_features.get(feature) for e in store.iter_episodes()]
            inside = [v is not None and (v > threshold if op == ">" else v <= threshold) for v in values]
            share = sum(inside) / max(len(inside), 1)
            return GateResult(
                gate=self.name,
                passed=share >= context.validator.config.region_min_share,
                statistic={"feature": feature, "region": f"{op} {threshold:g}", "share_in_region": share},
                detail="levels fall in the failing region",
            )
        found = diagnose(store, DiagnoseConfig(min_episodes=1, min_rate=0.0)).finding(candidate.finding)
        episodes = found.episodes if found is not None else 0
        return GateResult(
            gate=self.name,
            passed=episodes > 0,
            statistic={"finding": candidate.finding, "episodes": episodes, "rate": found.rate if found is not None else 0.0},
            detail="the weakness occurs in the candidate's rollouts",
        )
