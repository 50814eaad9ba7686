"""Learners the loop trains: one interface for tabular Q-learning, Stable-Baselines3 PPO and text Q-learning.

The loop talks to learners only through :class:`LoopLearner` (:mod:`~envrigger.loop.learners.protocol`),
and makes them by kind with :func:`make_learner` / :func:`load_learner`. One module a learner:

- :mod:`~envrigger.loop.learners.tabular`: :class:`TabularLearner` (``qlearning``);
- :mod:`~envrigger.loop.learners.ppo`: :class:`PPOLearner` (``ppo``) and :class:`TorchPolicy`,
  over :class:`Features` (:mod:`~envrigger.loop.learners.features`);
- :mod:`~envrigger.loop.learners.textq`: :class:`TextQLearner` (``textq``), for text games.

A new learner implements the protocol in a module of its own here and gets a kind in
:data:`LEARNERS` and :func:`make_learner`, and its numeric parameters' bounds in :data:`PARAM_BOUNDS`.
"""

from envrigger.loop.learners.features import Features
from envrigger.loop.learners.make import load_learner, make_learner
from envrigger.loop.learners.ppo import PPO_DEFAULTS, PPOLearner, TorchPolicy
from envrigger.loop.learners.protocol import LEARNERS, PARAM_BOUNDS, LoopLearner, check_params
from envrigger.loop.learners.tabular import TabularLearner
from envrigger.loop.learners.textq import TEXTQ_DEFAULTS, TextQLearner, TextQPolicy

__all__ = [
    "LEARNERS",
    "PARAM_BOUNDS",
    "PPO_DEFAULTS",
    "TEXTQ_DEFAULTS",
    "Features",
    "LoopLearner",
    "PPOLearner",
    "TabularLearner",
    "TextQLearner",
    "TextQPolicy",
    "TorchPolicy",
    "check_params",
    "load_learner",
    "make_learner",
]
