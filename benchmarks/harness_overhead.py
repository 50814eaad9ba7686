"""Per-step overhead of the harness on CartPole, side by side with Gymnasium's own wrappers.

Prints microseconds per step for: the made env alone, the env under one plain
``gymnasium.Wrapper``, under an empty ``Harness``, under a ``Harness`` with a rule and an
observation transform, and under a ``Harness`` with one custom (non-catalog) rule that does
nothing, which switches the state audit on, plus each one's overhead over the bare env and
its time as a ratio of the bare env's. Episodes are those of a uniformly random policy
(resets included). Run: ``python benchmarks/harness_overhead.py``.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

import envharness
from envharness.transforms import ObservationNoise, RuleTransform, StepBudget


class Nothing(RuleTransform):
    """A custom rule that changes nothing: what the audit costs, alone."""

    def on_action(self, action, memo, rng):
        return action


@dataclass
class Config:
    env_id: str = "CartPole-v1"
    steps: int = 200_000
    repeats: int = 5
    seed: int = 0


def time_per_step(env: gym.Env, actions: np.ndarray) -> float:
    env.reset(seed=0)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return (time.perf_counter() - start) / len(actions) * 1e6


def time_per_step_without_resets(env: gym.Env, episodes: int = 2000, length: int = 8) -> float:
    """Steps alone: ``length`` alternating actions per episode (CartPole stays up), resets not timed."""
    total = 0.0
    for episode in range(episodes):
        env.reset(seed=episode)
        start = time.perf_counter()
        for i in range(length):
            env.step(i & 1)
        total += time.perf_counter() - start
    return total / (episodes * length) * 1e6


def main(config: Config = Config()) -> None:
    actions = np.random.default_rng(config.seed).integers(2, size=config.steps).tolist()
    makers = {
        "bare env": lambda: gym.make(config.env_id),
        "gymnasium.Wrapper": lambda: gym.Wrapper(gym.make(config.env_id)),
        "Harness (no transforms)": lambda: envharness.wrap(config.env_id),
        "Harness (StepBudget + ObservationNoise)": lambda: envharness.wrap(
            config.env_id, StepBudget(max_steps=400), ObservationNoise(std=0.01)
        ),
        "Harness (custom no-op rule, audited)": lambda: envharness.wrap(config.env_id, Nothing()),
    }
    # The audit checkpoints the env around every hook: a tenth of the steps tells its cost well enough.
    steps = {name: actions[: len(actions) // 10] if "audited" in name else actions for name in makers}
    best = {name: float("inf") for name in makers}
    for _ in range(config.repeats):  # interleaved, so drift hits every variant alike
        for name, make in makers.items():
            best[name] = min(best[name], time_per_step(make(), steps[name]))
    bare = best["bare env"]
    print(f"{config.env_id}, {config.steps} steps x {config.repeats} repeats (best), seed {config.seed}")
    print(f"python {platform.python_version()}, gymnasium {gym.__version__}, numpy {np.__version__}, {platform.machine()}")
    print(f"{'variant':44s} {'us/step':>8s} {'overhead us':>12s} {'vs bare':>8s}")
    for name, value in best.items():
        print(f"{name:44s} {value:8.3f} {value - bare:12.3f} {value / bare:7.3f}x")
    quiet = {"bare env": float("inf"), "Harness (no transforms)": float("inf")}
    for _ in range(config.repeats):
        for name in quiet:
            quiet[name] = min(quiet[name], time_per_step_without_resets(makers[name]()))
    ratio = quiet["Harness (no transforms)"] / quiet["bare env"]
    print(
        f"steps alone (resets not timed): bare {quiet['bare env']:.3f} us, Harness (no transforms) "
        f"{quiet['Harness (no transforms)']:.3f} us, {ratio:.3f}x"
    )


if __name__ == "__main__":
    main()
