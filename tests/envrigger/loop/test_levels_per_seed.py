"""Honest seeds: with ``levels_per_seed`` each master seed draws its own held-out, validation and training levels.

Without it every master seed plays the same held-out set, so an interval across seeds
shows the learner's seed variance only, not the levels'. Each run names its held-out set
(``final.json``'s ``levels.heldout_digest``), so a reader can tell the two apart.
"""

from __future__ import annotations

import json

import pytest
from loop_cases import DOORKEY, SHORT_DOORKEY

from envrigger.errors import TrajectoryError
from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.config import EVAL_SEED, TRAIN_SEED
from envrigger.loop.levels import LevelSplit

BASE = dict(
    spec=SHORT_DOORKEY,
    learner="ppo",
    learner_params={"n_envs": 2, "n_steps": 64, "batch_size": 64},
    arms=["original"],
    rounds=1,
    budget_steps=128,
    eval_episodes=20,
    val_episodes=10,
)


def _split(seed: int, per_seed: bool):
    config = LoopConfig(**BASE, seed=seed, levels_per_seed=per_seed)
    return LevelSplit.make(config.spec, config)


def test_each_master_seed_draws_its_own_heldout_and_validation_levels():
    first, second = _split(0, True), _split(1, True)
    # DoorKey-6x6 has a few hundred distinct levels: two independent draws of 20 share a few, never most
    assert len(set(first.heldout_levels) & set(second.heldout_levels)) < len(first.heldout_levels) // 2
    assert len(set(first.validation_levels) & set(second.validation_levels)) < len(first.validation_levels) // 2
    assert not set(first.heldout_seeds) & set(second.heldout_seeds)


def test_without_it_every_master_seed_shares_one_heldout_set_as_before():
    assert _split(0, False).heldout_levels == _split(7, False).heldout_levels
    assert _split(0, False).heldout_seeds[0] == EVAL_SEED


def test_a_seeds_training_stream_moves_with_it_and_stays_off_every_reserved_level():
    config = LoopConfig(**BASE, seed=2, levels_per_seed=True)
    assert config.level(TRAIN_SEED) == TRAIN_SEED + 2 * 10_000_000_000
    assert LoopConfig(**BASE, seed=2).level(TRAIN_SEED) == TRAIN_SEED


def test_each_run_names_its_heldout_set(tmp_path):
    digests = []
    for seed in (0, 1):
        run_loop(tmp_path / str(seed), LoopConfig(**BASE, seed=seed, levels_per_seed=True))
        final = json.loads((tmp_path / str(seed) / "final.json").read_text())
        assert final["levels"]["disjoint"] and final["levels"]["overlap"] == {"original:train": 0}
        digests.append(final["levels"]["heldout_digest"])
    assert len(set(digests)) == 2 and all(len(d) == 16 for d in digests)


def test_an_env_with_few_levels_can_refuse_a_seeds_own_draw_and_says_what_to_change():
    # DoorKey-6x6 draws a few hundred distinct levels: at seed 3 its own 200 held-out and 100 validation levels take more
    # than half of the training seeds' levels, and the run is refused in one line rather than trained on reserved levels.
    config = LoopConfig(**{**BASE, "spec": DOORKEY, "eval_episodes": 200, "val_episodes": 100}, seed=3, levels_per_seed=True)
    with pytest.raises(TrajectoryError) as refused:
        LevelSplit.make(config.spec, config)
    message = str(refused.value)
    assert "\n" not in message and "too few distinct levels" in message and "(e.g. MiniGrid-DoorKey-6x6-v0)" not in message
    assert "a larger or procedurally generated variant" in message and "--allow-seen-levels" in message
