"""Rollouts: run a policy on a spec for many seeded episodes and store the trajectories.

The face of the package: :func:`rollout`, :func:`backend_for`, :func:`run_episode`, :func:`policy_factory`,
:func:`step_record`, :func:`episode_record`, :func:`close_workers` and :data:`BACKENDS`.
Inside, one module a question:

- :mod:`~envrigger.rollout.run`: the front door, :func:`rollout`, choosing a backend;
- :mod:`~envrigger.rollout.factories`: what to play, as a picklable ``env -> policy`` maker;
- :mod:`~envrigger.rollout.episode`: one episode and its records;
- :mod:`~envrigger.rollout.batched`: N envs in lockstep (``batch=N``);
- :mod:`~envrigger.rollout.process` and :mod:`~envrigger.rollout.ray_backend`: the two
  parallel backends;
- :mod:`~envrigger.rollout.writer`: episodes committed to the store in order.
"""

from envrigger.rollout.episode import DEFAULT_EPISODE_TIMEOUT, WALL_TIMEOUT, episode_record, run_episode, step_record
from envrigger.rollout.factories import PolicyFactory, policy_factory
from envrigger.rollout.run import BACKENDS, backend_for, close_workers, rollout

__all__ = [
    "BACKENDS",
    "DEFAULT_EPISODE_TIMEOUT",
    "WALL_TIMEOUT",
    "PolicyFactory",
    "backend_for",
    "close_workers",
    "episode_record",
    "policy_factory",
    "rollout",
    "run_episode",
    "step_record",
]
