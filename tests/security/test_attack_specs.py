"""Attacks, category 5: spec data that runs code or changes what success means."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

import envharness
from envharness import HarnessSpec, SpecError
from envharness.cli import main as envharness_main
from envharness.transforms import Chain, ReplayPrefix

# A module whose import leaves a mark; specs name it as `marker_env:Marked-v0`.
MARKER = """
import pathlib, gymnasium as gym
pathlib.Path({mark!r}).write_text("imported")
gym.register("Marked-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=500)
"""


@pytest.fixture
def marker(tmp_path, monkeypatch):
    """A module that would run code on import, importable from tmp_path; yields the mark file."""
    mark = tmp_path / "mark.txt"
    (tmp_path / "marker_env.py").write_text(MARKER.format(mark=str(mark)))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("marker_env", None)
    yield mark
    sys.modules.pop("marker_env", None)


HOSTILE_SPECS = {
    "env_id": {"env_id": "marker_env:Marked-v0"},
    "chain": {"env_id": "CartPole-v1", "transforms": [{"name": "Chain", "params": {"env_id": "marker_env:Marked-v0"}}]},
}


@pytest.mark.parametrize("where", sorted(HOSTILE_SPECS))
def test_a_spec_never_imports_a_module_it_names(where, marker):
    spec = HarnessSpec.coerce(HOSTILE_SPECS[where])
    with pytest.raises(SpecError, match="would import module 'marker_env'.*allow_imports=\\['marker_env'\\]"):
        spec.build()
    assert not marker.exists() and "marker_env" not in sys.modules


def test_a_registered_spec_never_imports_a_module_it_names(marker):
    envharness.register(HOSTILE_SPECS["env_id"], id="security/Marked-v0")
    with pytest.raises(SpecError, match="would import module"):
        gym.make("security/Marked-v0")
    assert not marker.exists()


def test_the_cli_refuses_a_spec_that_imports_with_exit_code_2(marker, tmp_path, capsys):
    path = tmp_path / "spec.json"
    path.write_text(HarnessSpec.coerce(HOSTILE_SPECS["env_id"]).to_json())
    with pytest.raises(SystemExit) as exit_code:
        envharness_main(["check", str(path), "--episodes", "1"])
    assert exit_code.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--allow-import marker_env" in err
    assert not marker.exists()


def test_an_explicit_opt_in_allows_the_import(marker, tmp_path):
    env = HarnessSpec.coerce(HOSTILE_SPECS["chain"]).build(allow_imports=["marker_env"])
    assert marker.exists() and type(env._links[0].unwrapped).__name__ == "CartPoleEnv"
    path = tmp_path / "spec.json"
    path.write_text(HarnessSpec.coerce(HOSTILE_SPECS["env_id"]).to_json())
    with pytest.raises(SystemExit) as exit_code:
        envharness_main(["check", str(path), "--episodes", "1", "--allow-import", "marker_env"])
    assert exit_code.value.code == 0


def test_a_transform_name_is_looked_up_never_imported():
    with pytest.raises(envharness.UnknownTransformError):
        HarnessSpec(env_id="CartPole-v1", transforms=[{"name": "os:system", "params": {"command": "true"}}]).build()


def test_env_kwargs_cannot_smuggle_an_entry_point(marker):
    with pytest.raises(SpecError):
        HarnessSpec(env_id="CartPole-v1", env_kwargs={"entry_point": "marker_env:Marked"}).build()
    assert not marker.exists()


def _balance(env, steps: int) -> list:
    """Verdicts of a simple balancing controller for ``steps`` steps (or until the episode ends)."""
    obs, info = env.reset(seed=0)
    verdicts = []
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(int(obs[2] + 0.5 * obs[3] > 0))
        verdicts.append((info["verdict"], terminated, truncated))
        if terminated or truncated:
            break
    return verdicts


def test_a_shorter_time_limit_in_env_kwargs_does_not_make_cartpole_succeed():
    env = envharness.wrap("CartPole-v1", max_episode_steps=1)
    ((verdict, terminated, truncated),) = _balance(env, 5)
    assert truncated and verdict == envharness.Verdict(False, 0.0, "timeout")
    plain = envharness.wrap("CartPole-v1")
    assert env.reset(seed=0)[1]["level_id"] != plain.reset(seed=0)[1]["level_id"]


def test_a_longer_time_limit_in_env_kwargs_does_not_extend_the_task():
    # Refused in one line, rather than run to a horizon nobody asked for (see test_attack_time_limits.py).
    with pytest.raises(SpecError, match=r"env_kwargs.max_episode_steps: 5000 is above CartPole-v1's registered 500 steps"):
        envharness.wrap("CartPole-v1", max_episode_steps=5000)


def test_minigrid_max_steps_in_env_kwargs_is_never_looser_than_its_default():
    with pytest.raises(SpecError, match=r"env_kwargs.max_steps: 100000 is above MiniGrid-Empty-5x5-v0's registered 100 steps"):
        envharness.wrap("MiniGrid-Empty-5x5-v0", max_steps=100_000)
    env = envharness.wrap("MiniGrid-Empty-5x5-v0", max_steps=30)
    assert env.adapter.time_limit() == 30
    env.reset(seed=0)
    for t in range(1, 31):  # noqa: B007 (t is read after the loop)
        *_, terminated, truncated, info = env.step(0)  # turning in place
    assert t == 30 and truncated and info["verdict"].reason == "timeout"


def test_a_replayed_prefix_does_not_count_toward_cartpole_survival():
    setup = envharness.wrap("CartPole-v1")
    obs, _ = setup.reset(seed=0)
    prefix = []
    for _ in range(499):
        action = int(obs[2] + 0.5 * obs[3] > 0)
        prefix.append(action)
        obs, *_ = setup.step(action)
    env = envharness.wrap("CartPole-v1", ReplayPrefix(actions=prefix))
    ((verdict, _, truncated),) = _balance(env, 1)
    assert verdict.success is False and not truncated  # one agent step is not 500
    # The base env's clock restarted after the prefix: the agent's episode goes on.
    assert len(_balance(env, 600)) > 1


def test_a_chained_env_is_judged_at_its_registered_time_limit_too():
    env = envharness.wrap("CartPole-v1", Chain(env_id="CartPole-v1", env_kwargs={"max_episode_steps": 1}))
    assert env._links[0].adapter.time_limit() == 1
    linked = env._links[0]
    linked.reset(seed=0)
    assert linked.step(0)[4]["verdict"].success is False


@pytest.mark.parametrize(
    "env_id, changed",
    [
        ("FrozenLake-v1", {"is_slippery": False}),
        ("CartPole-v1", {"sutton_barto_reward": True}),
        ("MountainCar-v0", {"goal_velocity": 0.05}),
        ("MiniGrid-Empty-5x5-v0", {"size": 6}),
    ],
)
def test_every_non_registered_kwarg_is_part_of_the_level_id(env_id, changed):
    def level_id(**kwargs):
        return envharness.wrap(env_id, **kwargs).reset(seed=0)[1]["level_id"]

    assert level_id(**changed) != level_id()
    assert level_id(render_mode="rgb_array") == level_id()  # rendering is not the level


def test_mountaincar_is_judged_at_the_registered_goal_velocity():
    env = envharness.wrap("MountainCar-v0", goal_velocity=0.06)
    env.reset(seed=0)
    env.unwrapped.state = np.array([0.499, 0.03])  # (outside the audit: the test itself is the "env")
    _, _, terminated, _, info = env.step(2)
    assert not terminated or info["verdict"].success  # the env's own, stricter test aside
    assert info["verdict"].success  # 0.03 m/s at the goal passes the registered test (velocity >= 0)
