"""TensorBoard for a loop run: SB3's training scalars per arm and the loop's own per round, and nothing trained differently."""

from __future__ import annotations

import importlib.util
import json

import pytest

from envharness import HarnessSpec
from envrigger.loop import LoopConfig, run_loop

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("stable_baselines3") is None or importlib.util.find_spec("tensorboard") is None,
    reason='needs the sb3 and tensorboard extras: pip install "envharness[sb3,tensorboard]"',
)
SPEC = HarnessSpec(env_id="MiniGrid-DoorKey-5x5-v0", env_kwargs={"max_steps": 60})


def tags(directory):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(directory))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_a_ppo_run_logs_each_arm_and_the_loop_to_tensorboard_and_trains_the_same_bits(tmp_path, monkeypatch):
    import torch

    from envrigger.loop.learners import PPOLearner

    config = LoopConfig(
        spec=SPEC, learner="ppo", learner_params={"n_envs": 2, "n_steps": 64, "batch_size": 64}, rounds=2, budget_steps=256,
        collect_episodes=8, eval_episodes=10, val_episodes=10, candidates_per_round=1, min_rollouts=8, max_rollouts=8,
        arms=["original", "rigger"], credit_chunks=0,
    )  # fmt: skip
    run_loop(tmp_path / "logged", config)
    monkeypatch.setattr("envrigger.loop.run.available", lambda: False)
    run_loop(tmp_path / "plain", config)
    assert not (tmp_path / "plain" / "tensorboard").exists()

    board = tmp_path / "logged" / "tensorboard"
    for arm in ("original", "rigger"):
        trained = tags(board / arm)
        assert {"rollout/ep_rew_mean", "rollout/ep_len_mean", "rollout/success_rate", "train/entropy_loss", "train/value_loss"} <= set(
            trained
        )
        assert trained["rollout/ep_len_mean"][-1][0] == 512  # at the arm's own timestep, across both rounds
    loop = tags(board / "loop")
    assert [step for step, _ in loop["validation_success/original"]] == [1, 2]
    assert {"library/candidates", "library/admitted", "interaction_env_steps/rigger"} <= set(loop)

    # Logging reads training and changes none of it.
    probe = SPEC.build()
    for arm in ("original", "rigger"):
        a, b = (PPOLearner.load(tmp_path / run / f"{arm}-round-2", probe).model.policy.state_dict() for run in ("logged", "plain"))
        assert all(torch.equal(a[k], b[k]) for k in a), arm
    assert json.loads((tmp_path / "logged" / "final.json").read_text()) == json.loads((tmp_path / "plain" / "final.json").read_text())
