"""The no-shortcut gate: every subgoal of the original level stays on every solution of the reshaped one.

Contains :class:`NoShortcut`.
"""

from __future__ import annotations

from envharness.transforms import transform_from_spec
from envrigger.loop.gates.base import Gate, GateContext, GateResult, register_gate
from envrigger.loop.solvability import bypassed, searchable


@register_gate
class NoShortcut(Gate):
    """Every subgoal of the original level stays on every solution of the reshaped one (or is already behind its start).

    The subgoals of a level are what every solution of the *original* level passes
    through (:func:`~envrigger.loop.solvability.subgoals`: the key picked up, the locked
    door opened, some door opened). A reshaped level that can be won without one of them,
    and whose start is not past it, teaches a way around the task: the candidate is
    refused if any level checked is such a shortcut. The search runs on the candidate's
    state and observation transforms: a rule only narrows what the agent may do, so a
    shortcut found without the rules is refused with them too. Fail closed: a link
    transform (a second env the search cannot follow) or a level the search cannot decide
    refuses. Where the family offers no search (not MiniGrid), the statistic says so and
    the gate passes: the other gates and the credit from the original env decide.
    """

    name, order = "no_shortcut", 30

    def run(self, context: GateContext, seeds: list[int]) -> GateResult:
        validator, spec = context.validator, context.candidate.spec
        if not searchable(validator.base):
            return GateResult(
                gate=self.name, passed=True, statistic={"method": "none", "levels": 0}, detail="no subgoal search for this env: not checked"
            )
        kinds = [type(transform_from_spec(t)).kind for t in spec.transforms]
        if "link" in kinds:
            return GateResult(
                gate=self.name,
                passed=False,
                statistic={"method": "search", "levels": 0, "link": True},
                detail="a link transform chains another env the subgoal search cannot follow: refused (fail closed)",
            )
        levels = spec.model_copy(
            update={"transforms": [t for t, kind in zip(spec.transforms, kinds, strict=True) if kind in ("state", "observation")]}
        )
        with_goals = bypassed_levels = undecided = 0
        examples: list[str] = []
        for seed in seeds:
            context.check_budget(clock=False)  # each level's searches are costly: the budget is checked between levels
            goals = validator.subgoals_of(seed)
            if goals is None:
                undecided += 1
                continue
            if not goals:
                continue
            with_goals += 1
            skipped = bypassed(levels, seed, goals)
            if skipped is None:
                undecided += 1
            elif skipped:
                bypassed_levels += 1
                examples.append(f"seed {seed}: " + ", ".join(" ".join(map(str, g)) for g in skipped))
        if bypassed_levels:
            detail = "a reshaped level can be won without a subgoal of the original level: a shortcut around the task"
        elif undecided:
            detail = f"the search could not decide {undecided} level(s): refused (fail closed)"
        else:
            detail = "every subgoal of the original levels stays on the reshaped levels' solutions"
        return GateResult(
            gate=self.name,
            passed=bypassed_levels == 0 and undecided == 0,
            statistic={
                "method": "search",
                "levels": len(seeds),
                "levels_with_subgoals": with_goals,
                "shortcut_levels": bypassed_levels,
                "undecided": undecided,
                "examples": examples[:3],
            },
            detail=detail,
        )
