"""Per-step cost of the harness, side by side with the env alone and with Gymnasium's own wrappers.

Rows (each a ratio of wall times measured back to back, repeated and interleaved):

- identity ``Harness`` ÷ the ``gym.make`` env, on CartPole, FrozenLake and MiniGrid DoorKey-8x8;
- ``Harness(StepBudget, ObservationNoise)`` ÷ the same behaviour from Gymnasium wrappers
  (``TimeLimit`` over ``TransformObservation`` adding the same clipped Gaussian noise), CartPole;
- a plain ``gymnasium.Wrapper`` ÷ the env, for scale.

Episodes are those of a uniformly random policy with a fixed seed, resets included. Writes
``--out`` (default ``overhead.json``). Run: ``python benchmarks/perf/overhead.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid ids)
import numpy as np

import envharness
from envharness.transforms import ObservationNoise, StepBudget

sys.path.insert(0, str(Path(__file__).parent))
from _common import interleaved, ratio_range, write_result  # noqa: E402


@dataclass
class Config:
    steps: dict[str, int] | None = None  # steps per timed run, per env
    repeats: int = 15
    seed: int = 0
    noise_std: float = 0.01
    step_budget: int = 400

    def __post_init__(self) -> None:
        if self.steps is None:
            self.steps = {"CartPole-v1": 20_000, "FrozenLake-v1": 20_000, "MiniGrid-DoorKey-8x8-v0": 2_000}


def stepping(env: gym.Env, actions: list[Any], seed: int) -> Callable[[], None]:
    """A run of ``len(actions)`` steps on one env, resetting whenever an episode ends (reset seeds follow the first)."""

    def run() -> None:
        env.reset(seed=seed)
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()

    return run


def gymnasium_noise(env_id: str, std: float, budget: int, seed: int) -> gym.Env:
    """What ``Harness(StepBudget(budget), ObservationNoise(std))`` does, from Gymnasium's own wrappers."""
    base = gym.make(env_id)
    space = base.observation_space
    rng = np.random.default_rng(seed)

    def noisy(obs: np.ndarray) -> np.ndarray:
        return np.clip(obs + rng.normal(0.0, std, size=space.shape), space.low, space.high).astype(space.dtype)

    return gym.wrappers.TimeLimit(gym.wrappers.TransformObservation(base, noisy, space), max_episode_steps=budget)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="overhead.json")
    parser.add_argument("--repeats", type=int, default=Config.repeats)
    args = parser.parse_args(argv)
    config = Config(repeats=args.repeats)
    assert config.steps is not None
    figures: dict[str, Any] = {}
    print(
        f"{config.repeats} interleaved repeats; ratios are best-of (fastest run / fastest run), then the median [lowest, highest] of back-to-back pairs"
    )
    for env_id, n in config.steps.items():
        actions = gym.make(env_id).action_space
        actions.seed(config.seed)
        plan = [actions.sample() for _ in range(n)]
        variants = {
            "env": stepping(gym.make(env_id), plan, config.seed),
            "gymnasium.Wrapper": stepping(gym.Wrapper(gym.make(env_id)), plan, config.seed),
            "Harness": stepping(envharness.wrap(env_id), plan, config.seed),
        }
        if env_id == "CartPole-v1":
            variants["gymnasium TimeLimit+TransformObservation(noise)"] = stepping(
                gymnasium_noise(env_id, config.noise_std, config.step_budget, config.seed), plan, config.seed
            )
            variants["Harness(StepBudget, ObservationNoise)"] = stepping(
                envharness.wrap(env_id, StepBudget(max_steps=config.step_budget), ObservationNoise(std=config.noise_std)),
                plan,
                config.seed,
            )
        times = interleaved(variants, config.repeats)
        rows = {
            "identity Harness / env": ratio_range(times["Harness"], times["env"]),
            "gymnasium.Wrapper / env": ratio_range(times["gymnasium.Wrapper"], times["env"]),
        }
        if env_id == "CartPole-v1":
            rows["Harness(StepBudget, ObservationNoise) / Gymnasium wrappers"] = ratio_range(
                times["Harness(StepBudget, ObservationNoise)"], times["gymnasium TimeLimit+TransformObservation(noise)"]
            )
        us = {name: min(t) / n * 1e6 for name, t in times.items()}
        figures[env_id] = {"us_per_step_best": us, "ratios": rows, "seconds": times}
        print(f"\n{env_id}, {n} steps per run")
        for name, value in us.items():
            print(f"  {name:48s} {value:8.2f} us/step (best)")
        for name, r in rows.items():
            print(f"  {name:60s} {r['best_of']:.3f}x   pairs {r['median']:.3f}x [{r['low']:.3f}, {r['high']:.3f}]")
    write_result(args.out, "overhead", asdict(config), figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
