"""The transfer gate: a candidate is admitted only if fine-tuning a copy on it helps on the original env; its steps are paid for."""

from __future__ import annotations

import json

from loop_cases import LAKE, SMALL

from envharness import HarnessSpec
from envharness.transforms.base import TRANSFORMS
from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.library import Library


def test_the_transfer_gate_passes_what_helps_on_the_original_env_and_fails_closed(tmp_path):
    from envrigger.loop.gates.transfer import transfer_gate
    from envrigger.loop.learners import make_learner

    config = LoopConfig(**{**SMALL, "transfer_steps": 8000, "transfer_episodes": 20})
    probe = LAKE.build()
    learner = make_learner("qlearning", probe, 0)  # untrained: 8000 steps on the 8x8 lake alone do not reach the goal
    nearer = LAKE.extended(TRANSFORMS["MoveAgent"](min_dist=1, max_dist=4))  # a reverse curriculum: starts near the goal

    def gate(index, candidate):
        return transfer_gate(tmp_path / f"c{index}", config, learner, candidate, 1, index, set())

    passed, steps, _ = gate(0, nearer)
    assert passed.passed and passed.statistic["with"] == 1.0 and passed.statistic["original"] == 0.0
    assert steps >= 2 * 8000 and passed.statistic["episodes"] == 20
    assert gate(0, nearer)[0] == passed  # the same seeds: the same verdict
    tie, _, _ = gate(1, LAKE)  # the original env itself teaches nothing more: a tie fails
    assert not tie.passed and tie.statistic["with"] == tie.statistic["original"]
    assert not gate(2, LAKE.extended(TRANSFORMS["ActionSlip"](p=0.3)))[0].passed
    broken, _, _ = gate(3, HarnessSpec(env_id="NoSuchEnv-v0"))
    assert not broken.passed and broken.detail.startswith("fine-tuning failed")
    assert learner.policy().table == {}  # the learner itself is untouched: only its copies trained
    probe.close()


def test_with_the_transfer_gate_every_admission_helped_a_copy_and_its_steps_are_counted(tmp_path):
    config = LoopConfig(**{**SMALL, "transfer_steps": 3000, "transfer_episodes": 20})
    result = run_loop(tmp_path / "run", config)
    library = Library(tmp_path / "run" / "library.db")
    components = library.components()
    gated = [g for c in components for g in c.gates if g["gate"] == "transfer"]
    assert len(gated) == len(components) and all(g["passed"] and g["statistic"]["with"] > g["statistic"]["original"] for g in gated)
    first = result["rounds"][0]
    reached = len(components) + first["rejected_by"].get("transfer", 0)
    assert reached >= 1  # at least one candidate passed the other gates and was put to this one
    spent = first["arms"]["rigger"]["interaction"]
    assert (
        spent["transfer"] >= 2 * 3000 * reached
        and spent["total"] == spent["train"] + spent["collect"] + spent["validate"] + spent["transfer"] + spent["credit"]
    )
    assert result["final"]["arms"]["rigger"]["interaction"]["transfer"] == spent["transfer"]  # the last round validates nothing
    assert result["final"]["arms"]["original"]["interaction"]["transfer"] == 0  # only the rigger arm pays for the gate
    used = json.loads((tmp_path / "run" / "levels-round-2.json").read_text())
    assert used["rigger:transfer"]
    library.close()
