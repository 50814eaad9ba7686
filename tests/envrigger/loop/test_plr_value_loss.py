"""The ``plr`` arm is the published PLR: levels ranked by positive value loss, mixed with staleness (Jiang et al., 2021).

The earlier score, learnability p(1-p) of the smoothed success rate, is flat while
nothing is solved, which is where a hard benchmark starts; it stays as ``--plr-score
success``. The PPO learner scores each level a rollout played by the mean of
``max(GAE advantage, 0)`` over its steps and hands it to the sampler; a learner without
a value function (Q-learning) reports none, and the buffer ranks by success there.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from loop_cases import SHORT_DOORKEY, SMALL

from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.learners.ppo import PPOLearner, positive_value_loss
from envrigger.loop.levels import Seeds
from envrigger.loop.mixture import MixtureEnv
from envrigger.loop.samplers import PLR

PPO_SMALL = {"n_envs": 2, "n_steps": 64, "batch_size": 64}


def _trained_buffer(score: str = "value_loss", steps: int = 512) -> PLR:
    plr = PLR(np.random.default_rng(0), min_buffer=4, score=score)
    seeds = Seeds(SHORT_DOORKEY, 4_000_000, set())
    learner = PPOLearner(SHORT_DOORKEY.build(), seed=0, **PPO_SMALL)
    learner.train(lambda: MixtureEnv([SHORT_DOORKEY], plr, seeds), steps, seed=0)
    return plr


def test_ppo_scores_every_finished_level_it_played_by_positive_value_loss():
    plr = _trained_buffer()
    assert plr.tries and set(plr.losses) == set(plr.tries)  # every level with a finished episode, scored
    assert all(np.isfinite(v) and v >= 0 for v in plr.losses.values())
    assert len(set(plr.losses.values())) > 1  # a score per level, not one number for all


def test_the_score_is_the_mean_positive_advantage_over_the_levels_steps():
    advantages = np.array([[2.0, -5.0], [-2.0, 1.0], [0.0, 1.0], [4.0, 3.0]])
    levels = [[(0, 1), (0, 2)], [(0, 1), (0, 2)], [(0, 3), (0, 2)], [(0, 3), None]]
    assert dict(positive_value_loss(advantages, levels)) == {(0, 1): 1.0, (0, 2): 2 / 3, (0, 3): 2.0}


def test_a_level_where_the_value_function_is_most_wrong_is_replayed_most():
    plr = PLR(np.random.default_rng(1), min_buffer=3)
    for seed in range(3):
        plr.update(0, seed, success=False)  # nothing solved: learnability is the same for all three
    for seed, loss in ((0, 0.01), (1, 0.02), (2, 0.9)):
        plr.score(0, seed, loss)
    picks = [plr.replay() for _ in range(300)]
    assert picks.count((0, 2)) > picks.count((0, 0)) + picks.count((0, 1))


def test_a_reported_score_cannot_enter_a_level_the_buffer_never_played_nor_a_reshaped_one_nor_a_non_number():
    plr = PLR(np.random.default_rng(0), min_buffer=1)
    plr.update(0, 5, success=False)
    plr.update(1, 6, success=False)
    for index, seed, loss in ((0, 99, 1.0), (1, 6, 1.0), (0, 5, float("nan")), (0, 5, float("inf"))):
        plr.score(index, seed, loss)
    assert plr.losses == {} and list(plr.tries) == [(0, 5)]


def test_the_buffer_keeps_its_scores_across_a_resume():
    plr = _trained_buffer(steps=256)
    again = PLR(np.random.default_rng(0), score="value_loss")
    again.restore(json.loads(json.dumps(plr.state())))
    assert again.losses == plr.losses and again.tries == plr.tries


def test_success_scoring_stays_as_a_named_variant_and_ignores_value_losses():
    plr = PLR(np.random.default_rng(0), min_buffer=2, score="success")
    for seed in (0, 1):
        plr.update(0, seed, success=False)
    plr.score(0, 0, 5.0)
    assert plr._score((0, 0)) == plr._score((0, 1))  # the loss is kept, not used
    with pytest.raises(ValueError, match="PLR score 'regret' is unknown; use one of value_loss, success"):
        PLR(np.random.default_rng(0), score="regret")


def test_the_plr_arm_of_a_run_uses_the_published_score_and_a_run_saved_before_keeps_its_own(tmp_path):
    config = LoopConfig(
        **{**SMALL, "spec": SHORT_DOORKEY, "learner": "ppo", "arms": ["original", "plr"], "rounds": 1, "budget_steps": 1024},
        learner_params={"n_steps": 128},
    )
    assert config.plr_score == "value_loss"
    run_loop(tmp_path / "run", config)
    saved = json.loads((tmp_path / "run" / "plr-replay.json").read_text())
    assert saved["losses"] and len(saved["losses"]) == len(saved["levels"])
    assert json.loads((tmp_path / "run" / "loop.json").read_text())["plr_score"] == "value_loss"
    old = {k: v for k, v in json.loads((tmp_path / "run" / "loop.json").read_text()).items() if k != "plr_score"}
    assert LoopConfig.saved(old).plr_score == "success"  # a run written before the published score resumes as it began
