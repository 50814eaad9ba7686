"""Environments that ship with envharness; importing this package registers them with Gymnasium.

Contains the registration of ``envharness/CodeRepair-v0`` (see
:mod:`envharness.envs.code_repair`), and of ``envharness/GeneratedFrozenLake-v0`` and
``envharness/PhysicsCartPole-v0``, whose levels are generated from the reset seed (see
:mod:`envharness.envs.generated`), and of ``envharness/TextWorld-v0``, a generated TextWorld
game per level (see :mod:`envharness.envs.textworld_games`; making it needs the ``textworld`` extra),
and of ``envharness/HumanEvalFix-v0``, HumanEval's problems with one bug each (see
:mod:`envharness.envs.humaneval`; it needs the ``code`` extra).

Example:
    >>> import gymnasium as gym
    >>> gym.make("envharness/CodeRepair-v0").spec.max_episode_steps
    30
"""

import gymnasium as gym

from envharness.envs import generated

if "envharness/CodeRepair-v0" not in gym.registry:
    gym.register(id="envharness/CodeRepair-v0", entry_point="envharness.envs.code_repair:CodeRepairEnv", max_episode_steps=30)
if "envharness/HumanEvalFix-v0" not in gym.registry:
    gym.register(id="envharness/HumanEvalFix-v0", entry_point="envharness.envs.humaneval:HumanEvalFixEnv", max_episode_steps=30)
if "envharness/TextWorld-v0" not in gym.registry:
    gym.register(id="envharness/TextWorld-v0", entry_point="envharness.envs.textworld_games:TextWorldEnv", max_episode_steps=50)
generated.register()
