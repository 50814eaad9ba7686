"""The transfer gate (opt-in, ``LoopConfig.transfer_steps``): does fine-tuning on a candidate help on the original env?

Contains :class:`Transfer` (the gate, in a rigger round) and :func:`transfer_gate` (the comparison itself).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from envharness.spec import HarnessSpec
from envrigger.loop.config import TRANSFER_SEED, LoopConfig
from envrigger.loop.evaluate import evaluate
from envrigger.loop.gates.base import Gate, GateContext, GateResult, register_gate
from envrigger.loop.learners import load_learner
from envrigger.loop.levels import first_free
from envrigger.loop.samplers import Fixed, Uniform
from envrigger.loop.train import Arm, train_arm


def transfer_gate(
    workdir: Path, config: LoopConfig, learner: Any, candidate: HarnessSpec, number: int, index: int, reserved: set[str]
) -> tuple[GateResult, int, set[str]]:
    """Does training on ``candidate`` help on the original env? Fine-tune two copies of ``learner`` and compare them there.

    Both copies start from the learner's weights, train ``transfer_steps`` from the same
    seed on the same stream of fresh original-env seeds (one on the original env only, the
    other on it and the candidate, half each), then play the same ``transfer_episodes``
    fresh original-env levels; the candidate passes only if its copy solves more of them
    (fail closed: a tie or an error fails). No level is reserved (held-out or validation).
    Returns the gate, the env steps both copies took, and the base levels they played.
    """
    base = config.spec
    shutil.rmtree(workdir, ignore_errors=True)  # scored afresh every time
    workdir.mkdir(parents=True)
    start = config.level(TRANSFER_SEED) + 10_000_000 * number + 100_000 * index
    scored_levels: set[str] = set()
    scored_seeds = first_free(base, range(start, start + 20 * config.transfer_episodes), reserved, config.transfer_episodes, scored_levels)
    saved = workdir / "start"
    learner.save(saved)
    probe = base.build()
    success: dict[str, float] = {}
    steps, levels = 0, set(scored_levels)
    try:
        for name, specs, sampler in (
            ("original", [base], Fixed()),
            ("with", [base, candidate], Uniform(2, np.random.default_rng([config.seed, number, index, 5]))),
        ):
            copy = Arm(name, load_learner(config.learner, saved, probe))
            trained = train_arm(copy, specs, sampler, config, number, reserved, start=start + 50_000, steps=config.transfer_steps)
            steps, levels = steps + trained.steps, levels | trained.levels
            if trained.env_errors:  # fail closed: a candidate the env crashes on is not judged by what survived
                example = trained.env_error_examples[0]
                return GateResult(gate="transfer", passed=False, detail=f"fine-tuning failed: the env raised in "
                                  f"{trained.env_errors} training episode(s), e.g. {example}"), steps, levels  # fmt: skip
            scored = evaluate(copy.learner.policy(), base, scored_seeds, workdir / f"score-{name}", config)
            success[name], steps = scored["success"], steps + scored["env_steps"]
    except Exception as error:  # noqa: BLE001 - a candidate that cannot be trained on fails the gate
        return GateResult(gate="transfer", passed=False, detail=f"fine-tuning failed: {error}"), steps, levels
    finally:
        probe.close()
    passed = success["with"] > success["original"]
    detail = (
        f"after {config.transfer_steps} fine-tuning steps, original-env success {success['with']:.3f} with the candidate vs "
        f"{success['original']:.3f} without, on {len(scored_seeds)} fresh levels"
    )
    statistic = {**success, "episodes": len(scored_seeds), "steps": config.transfer_steps}
    return GateResult(gate="transfer", passed=passed, statistic=statistic, detail=detail), steps, levels


@register_gate
class Transfer(Gate):
    """Runs :func:`transfer_gate` on a candidate that passed every other gate, inside a rigger round with ``transfer_steps``.

    Its env steps are its own (``steps``, ``levels``: summed over the round's candidates,
    charged as the rigger arm's ``transfer`` interaction), not validation's.
    """

    name, order, timed, own_budget = "transfer", 80, False, True

    @classmethod
    def used_in(cls, config: Any) -> bool:
        return bool(config.transfer_steps > 0)

    def applies(self, context: GateContext) -> bool:
        return context.round is not None and self.used_in(context.round.config)

    def run(self, context: GateContext, seeds: list[int]) -> GateResult:
        loop = context.round
        assert loop is not None  # applies() saw it
        gate, steps, levels = transfer_gate(
            loop.workdir / f"transfer-{context.index}",
            loop.config,
            loop.learner,
            context.candidate.spec,
            loop.number,
            context.index,
            loop.reserved,
        )
        self.steps, self.levels = self.steps + steps, self.levels | levels
        loop.log(f"round {loop.number}: transfer gate {'passed' if gate.passed else 'failed'}: {gate.detail}")
        return gate
