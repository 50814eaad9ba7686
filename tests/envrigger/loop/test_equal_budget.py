"""Equal compute: with ``budget_counts="all"`` every arm's env steps of every kind add up to the same budget.

The rigger arm's diagnosis, validation, credit copies, searches and setup are paid from
its own training steps, round by round, so that an arm that spends on overhead trains
less; a candidate's validation may take at most its share of the round's budget. Each arm's
round records the CPU seconds it took (``stage_seconds[arm]["cpu"]``).
"""

from __future__ import annotations

import json

import pytest
from loop_cases import SHORT_DOORKEY, SMALL

from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.config import ValidationConfig
from envrigger.loop.library import Library

ROUNDS, BUDGET = 3, 4000


@pytest.fixture(scope="module")
def equal(tmp_path_factory):
    out = tmp_path_factory.mktemp("equal") / "run"
    config = LoopConfig(
        **{**SMALL, "rounds": ROUNDS, "budget_steps": BUDGET, "arms": ["original", "plr", "rigger"]},
        budget_counts="all",
        credit_chunks=1,
    )
    run_loop(out, config)
    return out, json.loads((out / "final.json").read_text())


def test_every_arm_spends_the_same_total_env_steps_within_five_percent(equal):
    _, final = equal
    totals = {arm: a["interaction"]["total"] for arm, a in final["arms"].items()}
    for arm, total in totals.items():
        assert abs(total - ROUNDS * BUDGET) <= 0.05 * ROUNDS * BUDGET, (arm, totals)


def test_the_rigger_arm_pays_its_overhead_from_its_training(equal):
    _, final = equal
    rigger, original = final["arms"]["rigger"]["interaction"], final["arms"]["original"]["interaction"]
    overhead = rigger["total"] - rigger["train"]
    assert overhead > 0 and rigger["collect"] + rigger["validate"] + rigger["credit"] > 0
    assert rigger["train"] < original["train"]  # what it spent beside training, it did not train


def test_every_arm_reports_the_cpu_seconds_of_each_round(equal):
    out, final = equal
    library = Library(out / "library.db", create=False)
    try:
        rounds = library.rounds()
    finally:
        library.close()
    assert len(rounds) == ROUNDS
    for r in rounds:
        assert set(r["stage_seconds"]) == set(final["arms"]) and all(s["cpu"] > 0 for s in r["stage_seconds"].values())
        assert "cpu_seconds" not in json.dumps(final)  # final.json stays the same file on every run of the same config


def test_a_candidates_validation_is_capped_at_its_share_of_the_round():
    config = LoopConfig(**{**SMALL, "budget_steps": BUDGET, "candidates_per_round": 4}, budget_counts="all", overhead_share=0.5)
    assert config.validation().candidate_max_steps == BUDGET // 2 // 4
    assert (
        LoopConfig(**SMALL).validation().candidate_max_steps == ValidationConfig().candidate_max_steps
    )  # counting training only: as before


def test_a_ppo_arm_whose_overhead_ate_its_round_skips_training_and_still_scores(tmp_path):
    # PPO trains whole rollouts of 128 x 8 steps: a budget of one rollout, and a rigger arm whose validation spends more.
    config = LoopConfig(
        **{**SMALL, "spec": SHORT_DOORKEY, "learner": "ppo", "arms": ["original", "rigger"], "rounds": 2, "budget_steps": 1024},
        budget_counts="all",
        overhead_share=1.0,
        learner_params={"n_steps": 128},
    )
    run_loop(tmp_path / "run", config)
    final = json.loads((tmp_path / "run" / "final.json").read_text())
    assert final["arms"]["original"]["interaction"]["train"] == 2 * 1024
    assert final["arms"]["rigger"]["interaction"]["train"] <= 2 * 1024


def test_under_equal_compute_a_validation_never_runs_past_its_share(tmp_path):
    """A batch of rollouts that could carry the validation past its share is refused before it is played."""
    from loop_cases import NEAR, SEEDS, candidate

    from envrigger.loop.validate import Validator
    from envrigger.policies import RandomPolicy

    config = LoopConfig(**{**SMALL, "budget_steps": BUDGET, "min_rollouts": 30, "max_rollouts": 90}, budget_counts="all")
    settings = config.validation()
    assert settings.worst_case and not LoopConfig(**SMALL).validation().worst_case
    policy = RandomPolicy(SMALL["spec"].build().action_space, seed=0)
    result = Validator(policy, SMALL["spec"], tmp_path / "v", settings.model_copy(update={"backend": "serial"})).validate(
        candidate(NEAR), SEEDS
    )
    # 30 rollouts of up to 100 steps may take 3,000 steps, more than the 666 share: refused, within the share.
    assert settings.candidate_max_steps == 666
    assert not result.passed and result.error is not None and "refused before playing them" in result.error
    assert result.env_steps <= settings.candidate_max_steps
