"""Stable-Baselines3 trains on a harness and its models roll out like any policy."""

from __future__ import annotations

import pytest

sb3 = pytest.importorskip("stable_baselines3", reason="Stable-Baselines3 is an optional extra: pip install 'envharness[sb3]'")

import envharness
from envharness.transforms import PhysicsParams
from envrigger.policies import load_policy
from envrigger.policies.sb3 import SB3Policy
from envrigger.rollout import rollout


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    env = envharness.wrap("CartPole-v1", PhysicsParams(pole_length=0.6))
    model = sb3.PPO("MlpPolicy", env, n_steps=256, batch_size=64, n_epochs=2, seed=0, device="cpu")
    model.learn(1024)
    path = tmp_path_factory.mktemp("sb3") / "ppo.zip"
    model.save(path)
    return str(path)


def test_saved_model_loads_by_path_with_or_without_the_algorithm(saved_model):
    env = envharness.wrap("CartPole-v1")
    assert load_policy(saved_model, env).policy_id == "sb3:PPO"
    assert SB3Policy.load(f"PPO:{saved_model}").policy_id == "sb3:PPO"


def test_sb3_model_rolls_out_identically_on_serial_and_process_backends(saved_model, tmp_path):
    spec = envharness.HarnessSpec(env_id="CartPole-v1", transforms=[PhysicsParams(pole_length=0.6).to_spec()])
    serial = rollout(spec, saved_model, seeds=range(4), out=tmp_path / "s")
    parallel = rollout(spec, saved_model, seeds=range(4), backend="process", workers=2, out=tmp_path / "p")
    key = lambda store: [(e.seed, e.length, e.reason, e.policy_id) for e in store.iter_episodes()]
    assert key(serial) == key(parallel)
    assert all(e.policy_id == "sb3:PPO" for e in serial.iter_episodes())


def test_missing_model_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no saved SB3 model"):
        SB3Policy.load(str(tmp_path / "none.zip"))
