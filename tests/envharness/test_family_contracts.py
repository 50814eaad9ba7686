"""Family contracts: a wrapped env is the registered env, for every family, in every render mode (issue 27, class 8).

The hardening of the verifier once broke env contracts unseen (BabyAI with a render window
crashed at reset; MiniGrid's ``max_steps`` stopped meaning what MiniGrid says). These are
the contracts the families' own suites check, asserted on wrapped envs: with no transforms,
``envharness.wrap(id, render_mode=mode)`` plays exactly as ``gymnasium.make(id,
render_mode=mode)`` (observations, rewards, ends) on the same seed and actions; it renders
what the mode promises; it pickles mid-episode and continues identically; and the
constructor arguments each family documents are honoured.
"""

from __future__ import annotations

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # "human" windows on a machine without a screen
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

import cloudpickle  # noqa: E402
import gymnasium as gym  # noqa: E402
import minigrid  # noqa: E402,F401  (registers MiniGrid and BabyAI ids)
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import envharness  # noqa: E402
import envharness.envs  # noqa: E402,F401  (registers envharness/ ids)


def _ids() -> list[str]:
    toy_and_classic = sorted(
        k
        for k, spec in gym.registry.items()
        if isinstance(spec.entry_point, str)
        and spec.entry_point.startswith(("gymnasium.envs.toy_text", "gymnasium.envs.classic_control"))
        and "Vector" not in spec.entry_point
    )
    grids = sorted(k for k in gym.registry if k.startswith(("MiniGrid-", "BabyAI-")) and "-WFC-" not in k)
    ours = ["envharness/GeneratedFrozenLake-v0", "envharness/PhysicsCartPole-v0"]
    return [*toy_and_classic, *grids[::9], *ours]  # every toy-text and classic-control id; one grid id in nine


IDS = _ids()


def _cases() -> list[tuple[str, str | None]]:
    out = []
    for env_id in IDS:
        modes = gym.make(env_id).metadata.get("render_modes", [])
        out.extend((env_id, mode) for mode in [None, *modes])
    return out


def _same(a: object, b: object) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def _actions(env: gym.Env, seed: int, n: int) -> list[object]:
    env.action_space.seed(seed)
    return [env.action_space.sample() for _ in range(n)]


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize(("env_id", "mode"), _cases(), ids=lambda v: str(v))
def test_a_wrapped_env_plays_and_renders_as_the_registered_env(env_id, mode):
    steps = 3 if mode == "human" else 25  # a human window waits for its frame rate
    plain, wrapped = gym.make(env_id, render_mode=mode), envharness.wrap(env_id, render_mode=mode)
    try:
        for seed in (0, 1):
            a, b = plain.reset(seed=seed), wrapped.reset(seed=seed)
            assert _same(a[0], b[0]), (env_id, seed)
            for action in _actions(plain, seed, steps):
                out_a, out_b = plain.step(action), wrapped.step(action)
                assert _same(out_a[0], out_b[0]) and out_a[1:4] == out_b[1:4], (env_id, seed, action)
                if out_a[2] or out_a[3]:
                    break
            frame = wrapped.render()
            if mode == "rgb_array":
                assert isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[2] == 3
                assert np.array_equal(frame, plain.render())
            elif mode == "ansi":
                assert isinstance(frame, str) and frame == plain.render()
            elif mode == "human":
                assert frame is None
    finally:
        plain.close()
        wrapped.close()


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("env_id", IDS)
def test_a_wrapped_env_pickled_mid_episode_continues_identically(env_id):
    env = envharness.wrap(env_id)
    env.reset(seed=3)
    actions = _actions(env, 3, 30)
    for action in actions[:2]:
        *_, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return
    clone = cloudpickle.loads(cloudpickle.dumps(env))
    for action in actions[2:]:
        a, b = env.step(action), clone.step(action)
        assert _same(a[0], b[0]) and a[1:4] == b[1:4] and a[4]["verdict"] == b[4]["verdict"], env_id
        if a[2] or a[3]:
            break


# -- documented constructor arguments -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env_id", "kwargs", "read"),
    [
        ("FrozenLake-v1", {"map_name": "8x8"}, lambda raw: raw.desc.shape == (8, 8)),
        ("FrozenLake-v1", {"desc": ["SF", "HG"]}, lambda raw: raw.desc.tolist() == [[b"S", b"F"], [b"H", b"G"]]),
        ("FrozenLake-v1", {"is_slippery": False}, lambda raw: all(len(t) == 1 for s in raw.P.values() for t in s.values())),
        ("CliffWalking-v1", {"is_slippery": True}, lambda raw: raw.is_slippery),
        (
            "Taxi-v4",
            {"fickle_passenger": True, "fickle_probability": 0.5},
            lambda raw: raw.fickle_passenger and raw.fickle_probability == 0.5,
        ),
        ("Blackjack-v1", {"natural": True, "sab": False}, lambda raw: raw.natural and not raw.sab),
        ("MountainCar-v0", {"goal_velocity": 0.01}, lambda raw: raw.goal_velocity == 0.01),
        ("Pendulum-v1", {"g": 9.0}, lambda raw: raw.g == 9.0),
        ("MiniGrid-Empty-5x5-v0", {"max_steps": 20}, lambda raw: raw.max_steps == 20),
        ("MiniGrid-DoorKey-5x5-v0", {"size": 6}, lambda raw: raw.width == 6),
        ("BabyAI-GoToLocal-v0", {"max_steps": 40}, lambda raw: raw.max_steps == 40),
        ("MiniGrid-Empty-5x5-v0", {"agent_start_pos": (2, 2)}, lambda raw: tuple(raw.agent_pos) == (2, 2)),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_documented_constructor_argument_is_honoured(env_id, kwargs, read):
    env = envharness.wrap(env_id, **kwargs)
    env.reset(seed=0)
    assert read(env.unwrapped), (env_id, kwargs)
    plain = gym.make(env_id, **kwargs)
    plain.reset(seed=0)
    for action in _actions(plain, 0, 40):
        a, b = plain.step(action), env.step(action)
        assert _same(a[0], b[0]) and a[1:4] == b[1:4], (env_id, kwargs)
        if a[2] or a[3]:
            break


@pytest.mark.parametrize("env_id", ["MiniGrid-Empty-5x5-v0", "MiniGrid-DoorKey-5x5-v0", "BabyAI-GoToLocal-v0", "MiniGrid-LavaGapS5-v0"])
def test_minigrids_max_steps_argument_truncates_where_minigrid_says(env_id):
    # MiniGrid's own test_max_steps_argument, within what the registration allows.
    max_steps = 20
    env = envharness.wrap(env_id, max_steps=max_steps)
    env.reset(seed=0)
    for count in range(1, 100):  # noqa: B007 (count is read after the loop)
        *_, terminated, truncated, _ = env.step(4)  # drop: does nothing here
        assert not terminated
        if truncated:
            break
    assert count == max_steps
