"""Levels: held-out and validation levels are drawn once, kept apart from every level an arm plays, and never start solved."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from loop_cases import DOORKEY, SHORT_DOORKEY, SMALL

from envharness import HarnessSpec
from envrigger.data import TrajectoryError, TrajectoryStore
from envrigger.loop import ARMS, LevelSplit, LoopConfig, run_loop


def test_an_env_with_too_few_levels_is_refused_before_anything_is_written(tmp_path):
    config = LoopConfig(**{**SMALL, "allow_seen_levels": False})
    with pytest.raises(TrajectoryError, match="too few distinct levels.*1 distinct levels among 30 held-out seeds"):
        run_loop(tmp_path / "run", config)
    assert not (tmp_path / "run").exists()
    out = subprocess.run(
        [sys.executable, "-m", "envrigger.cli", "run", "FrozenLake-v1", "--learner", "qlearning", "-o", str(tmp_path / "cli")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "too few distinct levels" in out.stderr and "--allow-seen-levels" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "cli").exists()


def test_training_collection_and_validation_never_play_a_held_out_or_validation_level(tmp_path):
    config = LoopConfig(
        spec=SHORT_DOORKEY,
        learner="qlearning",
        rounds=2,
        budget_steps=3000,
        collect_episodes=60,  # more than the rigger arm's own training episodes: the rest are collected fresh
        eval_episodes=150,
        val_episodes=60,
        candidates_per_round=1,
        backend="serial",
        min_rollouts=10,
        max_rollouts=10,
        arms=list(ARMS),
    )
    result = run_loop(tmp_path / "run", config)
    split = LevelSplit.model_validate_json((tmp_path / "run" / "levels.json").read_text())
    assert split.disjoint and len(split.heldout_levels) > 100
    assert not set(split.validation_levels) & set(split.heldout_levels)
    used = json.loads((tmp_path / "run" / "levels-round-2.json").read_text())
    assert set(used) == {f"{arm}:train" for arm in ARMS} | {"rigger:collect", "rigger:validate", "rigger:credit", "original-select:credit"}
    reserved = set(split.heldout_levels) | set(split.validation_levels)
    for use, levels in used.items():
        assert levels and not set(levels) & reserved, use
    assert set(result["final"]["levels"]["overlap"].values()) == {0}
    # Fresh seeds that land on a reserved level were skipped, not played.
    assert sum(a["train"]["skipped_reserved"] for a in result["rounds"][0]["arms"].values()) > 0
    assert all(r["heldout"]["seen_in_training"] == 0.0 for r in result["final"]["arms"].values())
    # The check itself fails loudly on any overlap.
    with pytest.raises(TrajectoryError, match="level overlap: plr:train"):
        split.check({**{u: set(v) for u, v in used.items()}, "plr:train": {split.heldout_levels[0]}})


def test_a_reshaping_that_recreates_a_reserved_level_is_not_played():
    from envrigger.loop.mixture import MixtureEnv, Seeds

    moved = DOORKEY.extended({"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}})
    recreated = moved.build().reset(seed=100)[1]["level_id"]  # pretend seed 100 reshaped is a held-out level
    seeds = Seeds(DOORKEY, start=100, reserved={recreated})
    assert seeds.level(100) != recreated  # its base level is free: only the reshaped level is reserved

    class Reshaped:
        replays = 0

        def draw(self, fresh):
            return 1, fresh()

        def update(self, index, seed, success):
            pass

    env = MixtureEnv([DOORKEY, moved], Reshaped(), seeds)
    _, info = env.reset()
    assert info["mixture"] == {"index": 1, "seed": 101} and info["level_id"] != recreated
    assert seeds.skipped == 1 and info["level_id"] in seeds.levels and recreated not in seeds.levels


POLE_TRAIN = {"pole_length": (0.4, 0.6), "force": (9.0, 11.0)}
POLE_HELD = {"pole_length": (0.15, 0.25), "force": (4.0, 6.0)}


def test_held_out_levels_can_come_from_other_level_parameters_and_nothing_is_tuned_on_them(tmp_path):
    pole = HarnessSpec(env_id="envharness/PhysicsCartPole-v0", env_kwargs={"ranges": POLE_TRAIN})
    held = HarnessSpec(env_id="envharness/PhysicsCartPole-v0", env_kwargs={"ranges": POLE_HELD})
    config = LoopConfig(
        spec=pole,
        heldout_spec=held,
        learner="qlearning",
        rounds=1,
        budget_steps=600,
        collect_episodes=5,
        eval_episodes=10,
        val_episodes=10,
        candidates_per_round=1,
        backend="serial",
        min_rollouts=5,
        max_rollouts=5,
        arms=["original"],
    )
    result = run_loop(tmp_path / "run", config)
    assert result["final"]["levels"]["overlap"] == {"original:train": 0}

    def physics(store: Path) -> list[dict[str, float]]:
        return [e.level_features for e in TrajectoryStore(store).iter_episodes()]

    heldout, selection = physics(tmp_path / "run" / "heldout-original"), physics(tmp_path / "run" / "round-1" / "select-original")
    assert len(heldout) == 10 and len(selection) == 10
    assert all(0.15 <= f["pole_length"] <= 0.25 and 4.0 <= f["force"] <= 6.0 for f in heldout)
    assert all(0.4 <= f["pole_length"] <= 0.6 and 9.0 <= f["force"] <= 11.0 for f in selection)  # validation: the training ranges
    split = LevelSplit.model_validate_json((tmp_path / "run" / "levels.json").read_text())
    assert len(split.heldout_levels) == 10 and not set(split.heldout_levels) & set(split.validation_levels)


@pytest.mark.parametrize(
    "held, match",
    [
        (HarnessSpec(env_id="CartPole-v1"), "heldout_spec: got CartPole-v1 with 0 transform"),
        (
            HarnessSpec(env_id="envharness/PhysicsCartPole-v0", transforms=[{"name": "StepBudget", "params": {"max_steps": 50}}]),
            "with 1 transform",
        ),
    ],
)
def test_a_held_out_spec_must_be_the_same_env_without_transforms(held, match):
    with pytest.raises(ValueError, match=match):
        LoopConfig(spec=HarnessSpec(env_id="envharness/PhysicsCartPole-v0"), heldout_spec=held)


def test_levels_that_start_solved_are_never_trained_held_out_or_validated_on():
    # GoToDoor-5x5 starts solved (a first `done` wins) at seeds 3, 4 and 6: the engine skips those levels.
    from envrigger.loop.config import EVAL_SEED
    from envrigger.loop.levels import Seeds

    spec = HarnessSpec(env_id="MiniGrid-GoToDoor-5x5-v0")

    def refused(seed: int) -> bool:
        env = spec.build()
        env.reset(seed=seed)
        return env.starts_solved() is not None

    seeds = Seeds(spec, start=0)
    issued = [seeds.next() for _ in range(10)]
    assert not {3, 4, 6} & set(issued) and seeds.unplayable >= 3 and issued == sorted(issued)
    split = LevelSplit.make(spec, LoopConfig(spec=spec, learner="qlearning", eval_episodes=20, val_episodes=10))
    assert len(split.heldout_seeds) == 20 and len(split.validation_seeds) == 10
    assert not any(refused(s) for s in split.heldout_seeds + split.validation_seeds)
    assert any(refused(s) for s in range(EVAL_SEED, split.heldout_seeds[-1]))  # some were passed over


def test_a_seeds_level_is_read_once_per_process_and_every_arm_after_that_reuses_it():
    from envrigger.loop.levels import Seeds

    spec = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")
    first = Seeds(spec, 0)
    levels = [first.level(seed) for seed in range(9_100_000, 9_100_020)]
    first.close()
    second = Seeds(spec, 0)  # the next arm's stream: the same seeds, no env built to read them again
    assert [second.level(seed) for seed in range(9_100_000, 9_100_020)] == levels and second._probe is None
    other = Seeds(spec.extended({"name": "MoveGoal", "params": {"min_dist": 1, "max_dist": 2}}), 0)
    other.level(9_100_000)  # another spec is another key: its own levels, read from its own env
    assert other._probe is not None
    other.close()
