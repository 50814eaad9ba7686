"""Adapters: the verifier of each family on real solutions, state get/set, level features."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from harness_helpers import fixed_actions

import envharness
from envharness.adapters import Adapter, adapter_for
from envharness.verifier import Verdict


def _run(env, actions, seed=0):
    env.reset(seed=seed)
    for action in actions:
        out = env.step(action)
        if out[2] or out[3]:
            return out
    return out


def test_each_family_gets_its_adapter():
    families = {
        "FrozenLake-v1": "FrozenLakeAdapter",
        "Taxi-v4": "TaxiAdapter",
        "CliffWalking-v1": "CliffWalkingAdapter",
        "CartPole-v1": "CartPoleAdapter",
        "MountainCar-v0": "MountainCarAdapter",
        "Acrobot-v1": "AcrobotAdapter",
        "MiniGrid-KeyCorridorS3R1-v0": "MiniGridAdapter",
        "BabyAI-GoToRedBall-v0": "MiniGridAdapter",
        "Pendulum-v1": "Adapter",
    }
    assert {k: envharness.wrap(k).adapter.name for k in families} == families


def test_minigrid_goal_reached_is_success_with_minigrid_score():
    _, reward, terminated, _, info = _run(envharness.wrap("MiniGrid-Empty-5x5-v0"), [2, 2, 1, 2, 2])
    assert terminated and reward > 0
    assert info["verdict"] == Verdict(True, pytest.approx(reward), "reached goal")


def test_minigrid_lava_is_a_failure_with_cause():
    env = envharness.wrap("MiniGrid-LavaGapS5-v0")
    env.reset(seed=0)
    raw = env.unwrapped
    lava = next(
        (x, y) for x in range(raw.width) for y in range(raw.height) if raw.grid.get(x, y) is not None and raw.grid.get(x, y).type == "lava"
    )
    raw.agent_pos, raw.agent_dir = (lava[0] - 1, lava[1]), 0
    _, _, terminated, _, info = env.step(2)
    assert terminated and info["verdict"] == Verdict(False, 0.0, "lava")


def test_cliffwalking_goal_is_success():
    _, _, terminated, _, info = _run(envharness.wrap("CliffWalking-v1"), [0] + [1] * 11 + [2])
    assert terminated and info["verdict"].success


def _taxi_solution(env) -> list[int]:
    raw = env.unwrapped
    start, parents = int(raw.s), {int(raw.s): None}
    queue = deque([start])
    while queue:
        s = queue.popleft()
        for a in range(6):
            _, s2, _, done = raw.P[s][a][0]
            if done:
                path = [a]
                while parents[s] is not None:
                    s, a0 = parents[s]
                    path.append(a0)
                return path[::-1]
            if s2 not in parents:
                parents[s2] = (s, a)
                queue.append(s2)
    raise AssertionError("no solution")


def test_taxi_delivery_is_success_and_wrong_dropoff_is_not():
    env = envharness.wrap("Taxi-v4")
    env.reset(seed=4)
    for action in _taxi_solution(env):
        _, reward, terminated, _, info = env.step(action)
    assert terminated and reward == 20 and info["verdict"] == Verdict(True, 1.0, "passenger delivered")
    env.reset(seed=4)
    _, reward, terminated, _, info = env.step(5)  # drop-off without a passenger
    assert reward == -10 and not terminated and not info["verdict"].success


def test_mountaincar_goal_is_success():
    env = envharness.wrap("MountainCar-v0")
    obs, _ = env.reset(seed=0)
    while True:
        obs, _, terminated, truncated, info = env.step(2 if obs[1] >= 0 else 0)
        if terminated or truncated:
            break
    assert terminated and info["verdict"] == Verdict(True, 1.0, "reached goal")


def test_acrobot_swung_up_is_success():
    base = __import__("gymnasium").make("Acrobot-v1")
    adapter = adapter_for(base)
    base.reset(seed=0)
    adapter.set_state({"state": np.array([np.pi, 0.0, 0.0, 0.0])})
    _, reward, terminated, truncated, info = base.step(1)
    assert terminated and adapter.judge(None, reward, terminated, truncated, info).reason == "swung up"


@pytest.mark.parametrize(
    "env_id, kwargs",
    [
        ("FrozenLake-v1", {"is_slippery": False}),
        ("Taxi-v4", {}),
        ("CliffWalking-v1", {}),
        ("CartPole-v1", {}),
        ("MountainCar-v0", {}),
        ("Acrobot-v1", {}),
        ("MiniGrid-DoorKey-6x6-v0", {}),
    ],
)
def test_set_state_restores_a_state_exactly(env_id, kwargs):
    # set_state is the adapter's, outside any harness: a harness offers only a read-only view.
    env = envharness.harness.make_base(env_id, **kwargs)
    adapter = adapter_for(env)
    n = int(env.action_space.n)
    env.reset(seed=3)
    for action in fixed_actions(n, 4, seed=1):
        env.step(action)
    saved = adapter.get_state()
    future = fixed_actions(n, 6, seed=2)
    first = [env.step(a)[:4] for a in future]
    adapter.set_state(saved)
    second = [env.step(a)[:4] for a in future]
    for a, b in zip(first, second):
        np.testing.assert_equal(a, b)


def test_generic_adapter_reads_the_success_signal_at_episode_end_only():
    adapter = adapter_for(__import__("gymnasium").make("Pendulum-v1"))
    assert type(adapter) is Adapter
    assert adapter.judge(None, 5.0, False, False, {"is_success": True}).reason == "in progress"
    assert adapter.judge(None, 5.0, False, True, {"success": False}).success is False
    assert adapter.judge(None, 5.0, True, False, {}).success is True
    assert adapter.judge(None, 0.0, True, False, {}).success is False


def test_level_features_describe_each_family():
    expected = {
        "FrozenLake-v1": {"size", "n_holes", "goal_distance", "slippery"},
        "CartPole-v1": {"gravity", "pole_length", "pole_mass", "cart_mass", "force"},
        "MiniGrid-LavaCrossingS9N1-v0": {"width", "height", "goal_distance", "n_lava", "n_walls", "n_doors", "n_keys"},
        "Taxi-v4": {"taxi_distance", "passenger_distance"},
    }
    for env_id, keys in expected.items():
        assert set(envharness.wrap(env_id).reset(seed=0)[1]["level"]) == keys


def _minigrid_ids() -> list[str]:
    import gymnasium as gym
    import minigrid  # noqa: F401  (registers the ids)

    return sorted(k for k in gym.registry if k.startswith(("MiniGrid-", "BabyAI-")))


@pytest.mark.filterwarnings("ignore:.*is out of date.*:DeprecationWarning")
def test_every_registered_minigrid_env_wraps_steps_and_is_judged():
    from envharness.transforms import MoveGoal

    ids = _minigrid_ids()
    assert len(ids) > 150
    for env_id in ids:
        if "-WFC-" in env_id:
            # The minigrid wheel ships neither the WFC extras nor their pattern images.
            with pytest.raises(envharness.EnvNotFoundError, match="needs a package|cannot generate levels"):
                envharness.wrap(env_id)
            continue
        env = envharness.wrap(env_id)
        _, info = env.reset(seed=0)
        assert info["level"]["width"] >= 3, env_id
        for action in fixed_actions(int(env.action_space.n), 5):
            *_, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        assert isinstance(info["verdict"], Verdict), env_id
        if "goal" in env.adapter.capabilities:
            plain = env.reset(seed=0)[1]["level"]["goal_distance"]
            moved = envharness.wrap(env_id, MoveGoal(min_dist=1, max_dist=4)).reset(seed=0)[1]["level"]["goal_distance"]
            assert 1 <= moved <= 4 or moved == plain, env_id


def test_cliffwalking_gets_a_step_limit_because_its_registration_has_none():
    env = envharness.wrap("CliffWalking-v1")
    env.reset(seed=0)
    for t in range(1, 1000):  # noqa: B007 (t is read after the loop)
        *_, terminated, truncated, info = env.step(0)  # up, into the wall: never the goal
        if terminated or truncated:
            break
    assert (t, truncated, info["verdict"].reason) == (200, True, "timeout")
    assert envharness.wrap("CliffWalking-v1", max_episode_steps=40).adapter.time_limit() == 40
