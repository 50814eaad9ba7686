"""Making and loading learners by kind: :func:`make_learner` and :func:`load_learner`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym

from envrigger.loop.learners.ppo import PPOLearner
from envrigger.loop.learners.protocol import LEARNERS, check_params
from envrigger.loop.learners.tabular import TabularLearner
from envrigger.loop.learners.textq import TextQLearner


def make_learner(kind: str, env: gym.Env, seed: int = 0, **params: Any) -> Any:
    """A fresh learner of ``kind`` (``qlearning``, ``ppo``, ``textq``, or ``none``: an agent not trained) for ``env``'s spaces."""
    check_params(kind, params)
    if kind == "none":
        from envrigger.loop.learners.fixed import AgentLearner

        return AgentLearner(env, seed=seed, **params)
    if kind == "skills":
        from envrigger.loop.learners.skills import SkillsLearner

        return SkillsLearner(env, seed=seed, **params)
    if kind == "qlearning":
        return TabularLearner(env, seed=seed, **params)
    if kind == "textq":
        return TextQLearner(env, seed=seed, **params)
    if kind == "ppo":
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            raise ValueError('--learner ppo needs Stable-Baselines3: pip install "envharness[sb3]"') from None
        return PPOLearner(env, seed=seed, **params)
    raise ValueError(f"--learner: got {kind!r}; use one of {', '.join(LEARNERS)}")


def load_learner(kind: str, path: Path, env: gym.Env) -> Any:
    """Load a learner saved by :meth:`LoopLearner.save` under ``path`` (without its suffix)."""
    if kind == "none":
        from envrigger.loop.learners.fixed import AgentLearner

        return AgentLearner.load(path, env)
    if kind == "skills":
        from envrigger.loop.learners.skills import SkillsLearner

        return SkillsLearner.load(path, env)
    if kind == "textq":
        return TextQLearner.load(path, env)
    return (TabularLearner if kind == "qlearning" else PPOLearner).load(path, env)
