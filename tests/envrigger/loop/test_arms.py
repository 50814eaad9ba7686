"""The arms: each trains on what it claims with equal steps; domain randomization, PLR and the rigger arm's samplers; the ablations."""

from __future__ import annotations

import numpy as np
import pytest
from loop_cases import DOORKEY, SMALL
from pydantic import ValidationError

from envharness.transforms.base import TRANSFORMS
from envrigger.loop import ARMS, LoopConfig, run_loop
from envrigger.loop.arms.draws import random_specs
from envrigger.loop.samplers import PLR


def test_every_arm_trains_on_what_it_claims_with_equal_steps(tmp_path):
    config = LoopConfig(**{**SMALL, "rounds": 1, "arms": list(ARMS), "dr_pool": 6})
    rnd = run_loop(tmp_path / "run", config)["rounds"][0]
    arms = rnd["arms"]
    assert arms["original"]["train"]["picks"] == [arms["original"]["train"]["episodes"]] and arms["original"]["train"]["replays"] == 0
    dr = arms["dr"]["train"]["picks"]
    assert len(dr) == 7 and min(dr) > 0  # the original and six random reshapings, each played
    assert arms["plr"]["train"]["replays"] > 0 and len(arms["plr"]["train"]["picks"]) == 1
    assert len(arms["rigger"]["train"]["picks"]) == 1 + rnd["library_size"]
    steps = [a["train"]["steps"] for a in arms.values()]
    assert min(steps) >= config.budget_steps and max(steps) - min(steps) < 200


def test_dr_draws_catalog_reshapings_within_bounds_that_keep_the_spaces():
    specs = random_specs(DOORKEY, np.random.default_rng(0), 12)
    assert len(specs) == 12 and len({s.hash() for s in specs}) == 12
    names = {s.transforms[0].name for s in specs}
    assert len(names) >= 4 and names <= {n for n, c in TRANSFORMS.items() if c.kind in ("state", "rule", "observation")}
    env = DOORKEY.build()
    for spec in specs:
        reshaped = spec.build()
        assert reshaped.observation_space == env.observation_space and reshaped.action_space == env.action_space
    assert random_specs(DOORKEY, np.random.default_rng(0), 12) == specs  # seeded


def test_plr_replays_its_own_levels_and_prefers_learnable_ones():
    plr = PLR(np.random.default_rng(0), min_buffer=3, replay_p=1.0)
    for seed in range(10):
        plr.update(0, seed, success=False)
    for _ in range(3):
        plr.update(0, 4, success=True)
        plr.update(0, 4, success=False)
    replays = [plr.replay() for _ in range(500)]
    assert set(replays) <= {(0, s) for s in range(10)} and max(set(replays), key=replays.count) == (0, 4)
    copy = PLR(np.random.default_rng(99), min_buffer=3, replay_p=1.0)
    copy.restore(plr.state())
    assert [copy.replay() for _ in range(20)] == [plr.replay() for _ in range(20)]


def test_the_rigger_arm_replays_original_levels_and_draws_fresh_ones_from_its_curriculum():
    from envrigger.loop.samplers import Curriculum

    rigger = PLR(np.random.default_rng(0), min_buffer=4, replay_p=0.5, chooser=Curriculum(3, np.random.default_rng(1)))
    fresh = iter(range(100, 10_000))
    drawn = [rigger.draw(lambda: next(fresh)) for _ in range(300)]
    for index, seed in drawn:
        for success in (index == 2, False):  # levels of env 2 are sometimes solved, the others never
            rigger.update(index, seed, success=success)
    drawn = [rigger.draw(lambda: next(fresh)) for _ in range(300)]
    replayed = [(i, s) for i, s in drawn if s < 100 + 300]
    assert rigger.replays > 0 and replayed and {i for i, _ in replayed} == {0}  # only original levels are replayed
    fresh_envs = [i for i, s in drawn if s >= 400]
    assert max({0, 1, 2}, key=fresh_envs.count) == 2  # the curriculum favours the learnable reshaped env


def test_the_ablation_arms_separate_replay_reshaping_and_targeting(tmp_path):
    """dr draws levels, dr-any anything; plr-random gets as many random components as rigger admitted; rigger-noreplay never replays."""
    from envharness.transforms import TRANSFORMS

    arms = ["original", "dr", "dr-any", "plr", "plr-random", "rigger-noreplay", "rigger"]
    config = LoopConfig(**{**SMALL, "arms": arms})
    result = run_loop(tmp_path / "run", config)
    first, second = result["rounds"]
    assert list(second["arms"]) == arms
    steps = [a["train"]["steps"] for a in second["arms"].values()]
    assert all(4000 <= n <= 4100 for n in steps)  # the budget, every arm (Q-learning finishes its last episode)
    dr = second["arms"]["dr"]["train"]["envs"][1:]
    assert dr and all(TRANSFORMS[label.split("{")[0]].kind == "state" for label in dr)
    admitted = second["library_size"]
    assert admitted >= 1  # SMALL admits in round 1
    assert len(second["arms"]["plr-random"]["train"]["envs"]) == 1 + admitted == len(second["arms"]["rigger"]["train"]["envs"])
    assert second["arms"]["plr-random"]["train"]["envs"] != second["arms"]["rigger"]["train"]["envs"]
    assert second["arms"]["rigger-noreplay"]["train"]["envs"] == second["arms"]["rigger"]["train"]["envs"]
    assert second["arms"]["rigger-noreplay"]["train"]["replays"] == 0 < second["arms"]["rigger"]["train"]["replays"]
    assert set(result["final"]["arms"]) == set(arms)


def test_an_ablation_without_the_rigger_arm_is_refused_in_one_line():
    with pytest.raises(ValidationError, match="add rigger to --arms"):
        LoopConfig(**{**SMALL, "arms": ["original", "plr-random"]})
