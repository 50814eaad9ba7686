"""The verifier-integrity gate: the verdict path is the stock one and the reference solver's verdicts reproduce.

Contains :class:`VerifierIntegrity`.
"""

from __future__ import annotations

from envharness.adapters import ADAPTERS
from envharness.harness import Harness
from envharness.spec import HarnessSpec
from envharness.transforms import CATALOG, TRANSFORMS, RuleTransform, transform_from_spec
from envrigger.loop.gates.base import Gate, GateContext, GateResult, register_gate
from envrigger.policies import reference_policy

STOCK_ADAPTERS = frozenset({"Adapter", *(cls.__name__ for cls in ADAPTERS)})


def preserves_dynamics(spec: HarnessSpec) -> bool:
    """No state transform and no rule that changes actions: the base env sees the same actions."""
    for t in spec.transforms:
        cls = type(transform_from_spec(t))
        if cls.kind in ("state", "link") or (cls.kind == "rule" and getattr(cls, "on_action", None) is not RuleTransform.on_action):
            return False
    return True


@register_gate
class VerifierIntegrity(Gate):
    """Only catalog transforms over the stock harness; the reference solver's verdicts reproduce on replay and on the base env.

    Leaves the reference solver's success rate on the candidate in ``notes["reference_rate"]``.
    """

    name, order, timed = "verifier_integrity", 10, False

    def run(self, context: GateContext, seeds: list[int]) -> GateResult:
        candidate, validator = context.candidate, context.validator
        context.notes["reference_rate"] = 0.0
        foreign = [t.name for t in candidate.spec.transforms if TRANSFORMS.get(t.name) not in CATALOG]
        env = candidate.spec.build()
        stock = type(env).step is Harness.step and type(env).reset is Harness.reset and env.adapter.name in STOCK_ADAPTERS
        if foreign or not stock:
            env.close()
            return GateResult(
                gate=self.name,
                passed=False,
                statistic={"foreign_transforms": foreign},
                detail="only catalog transforms over the stock harness are admitted; run other code in the sandbox",
            )
        solver = reference_policy(env)
        compared = mismatches = base_compared = base_mismatches = successes = 0
        dynamics_kept = preserves_dynamics(candidate.spec)
        for seed in seeds:
            try:  # between levels too: a start along a solution searches at every reset, and its steps count
                context.check_budget()
            except BaseException:
                env.close()
                raise
            actions, verdicts = validator.play(env, solver, seed)
            successes += verdicts[-1][0]
            compared += 1
            mismatches += validator.replay(candidate.spec, actions, seed) != verdicts
            if dynamics_kept:
                base = validator.replay(validator.base, actions, seed)
                base_compared += 1
                # Rules may end an episode early (a failure); until then the base env must judge alike.
                base_mismatches += [s for s, _ in base[: len(verdicts) - 1]] != [s for s, _ in verdicts[:-1]] or (
                    verdicts[-1][0] and not (len(base) >= len(verdicts) and base[len(verdicts) - 1][0])
                )
        env.close()
        context.notes["reference_rate"] = successes / max(compared, 1)
        return GateResult(
            gate=self.name,
            passed=mismatches == 0 and base_mismatches == 0,
            statistic={
                "episodes": compared,
                "replay_mismatches": mismatches,
                "base_compared": base_compared,
                "base_mismatches": base_mismatches,
            },
            detail="verdicts reproduce on replay" + (" and match the base env" if base_compared else ""),
        )
