"""MiniGrid's step with its own observation code against the harness's fast view, side by side in one run.

The loop's MiniGrid envs get :func:`envharness.adapters.minigrid_view.speed_up`: the
partial view from index tables with the visibility mask cached by its pattern of blocking
cells, and the action enum's members as plain class attributes. This plays the same
fixed action sequence on the same levels both ways, taking turns, checks that every
observation is identical, and prints microseconds per step and their ratio.
Run: ``python benchmarks/perf/minigrid_step.py [--steps 4000] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import interleaved, ratio_range, write_result  # noqa: E402

ENVS = ("MiniGrid-DoorKey-6x6-v0", "MiniGrid-DoorKey-8x8-v0", "MiniGrid-Dynamic-Obstacles-6x6-v0")


def _stock(env: Any) -> None:
    """Undo the fast path: MiniGrid's own gen_obs, and its enum read through the enum class's __getattr__."""
    vars(env).pop("gen_obs", None)
    actions = env.actions
    for name, member in actions.__members__.items():
        if vars(actions).get(name) is member:
            type.__delattr__(actions, name)


def play(env: Any, actions: np.ndarray) -> list[bytes]:
    """Step through ``actions`` from seed 0, resetting on each episode's end; every observation's bytes."""
    seen = []
    level = 0
    env.reset(seed=level)
    for action in actions:
        obs, _, terminated, truncated, _ = env.step(int(action))
        seen.append(obs["image"].tobytes())
        if terminated or truncated:
            level += 1
            env.reset(seed=level)
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="minigrid_step.json")
    args = parser.parse_args(argv)
    from envharness.adapters.minigrid_view import speed_up

    figures: dict[str, Any] = {}
    for env_id in ENVS:
        env = gym.make(env_id).unwrapped
        actions = np.random.default_rng(0).integers(env.action_space.n, size=args.steps)
        _stock(env)
        stock = play(env, actions)
        speed_up(env)
        assert play(env, actions) == stock, f"{env_id}: the fast view differs from MiniGrid's"

        def as_stock(env: Any = env, actions: np.ndarray = actions) -> None:
            _stock(env)
            play(env, actions)

        def as_fast(env: Any = env, actions: np.ndarray = actions) -> None:
            speed_up(env)
            play(env, actions)

        times = interleaved({"stock": as_stock, "fast": as_fast}, args.repeats)
        per_step = {name: 1e6 * min(t) / args.steps for name, t in times.items()}
        figures[env_id] = {"us_per_step": per_step, "fast_over_stock": ratio_range(times["fast"], times["stock"])}
        print(
            f"{env_id:36s} MiniGrid's own {per_step['stock']:6.1f} µs/step   fast {per_step['fast']:6.1f} µs/step   "
            f"fast ÷ own {figures[env_id]['fast_over_stock']['median']:.2f} (identical observations)"
        )
        env.close()  # left fast, as the harness leaves it
    write_result(args.out, "minigrid_step", vars(args), figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
