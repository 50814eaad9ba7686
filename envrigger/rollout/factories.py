"""Policy factories: what a rollout is told to play, turned into a picklable ``env -> policy`` maker.

Contains :func:`policy_factory` (``"random"``, ``"reference"``, a saved learner, an
imported ``module:attr`` or a callable) and the check that a policy observes the env's space.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from envharness.transforms.base import load_file_module
from envrigger.data import (
    TrajectoryError,
)
from envrigger.rollout.episode import error_line

PolicyFactory = Callable[[Any], Any]


def policy_factory(policy: Any, policy_seed: int = 0) -> PolicyFactory:
    """A picklable ``env -> policy`` maker from ``"random"``, ``"reference"``, a saved-learner path or a callable.

    Example:
        >>> import envharness
        >>> make = policy_factory("random", policy_seed=1)
        >>> make(envharness.wrap("CartPole-v1")).name
        'random'
    """
    if isinstance(policy, type) or (callable(policy) and not hasattr(policy, "act")):
        factory: PolicyFactory = policy  # a factory: a policy class taking the env, or any env -> policy callable
        return factory
    if hasattr(policy, "act"):
        return _Fixed(policy)
    if policy == "random":
        return _Random(policy_seed)
    if policy == "reference":
        return _Reference()
    text = str(policy)
    if text.endswith(".py"):
        raise TrajectoryError(f"policy: {text} is Python code; name the class in it: {text}:ClassName")
    where = text.rpartition(":")[0]
    if where and not Path(text.rpartition(":")[2]).exists() and not where.isupper():
        return _Imported(text)  # module:Class or path/to/file.py:Class
    if Path(text.rpartition(":")[2]).exists():  # a saved learner, maybe as ALGO:model.zip
        return _Saved(text, policy_seed)
    raise TrajectoryError(
        f"policy: {policy!r} is not random, reference, or an existing saved-learner file (model.json, PPO:model.zip); "
        "pick one of those, or name your own policy class as module:Class or file.py:Class"
    )


class _Fixed:
    """Hands out a private copy of a policy object, as the process and Ray backends do by pickling it.

    So a rollout never touches a live learner: reseeding the copy per episode leaves the
    learner's own training stream (and everything else) as it was, on every backend.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def __call__(self, env: Any) -> Any:
        try:
            return copy.deepcopy(self.policy)
        except Exception:  # not copyable (open handles...): it runs as it is, and its own state moves
            return self.policy


class _Random:
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __call__(self, env: Any) -> Any:
        from envrigger.policies import RandomPolicy

        return RandomPolicy(env.action_space, seed=self.seed)


class _Reference:
    def __call__(self, env: Any) -> Any:
        from envrigger.policies import reference_policy

        return reference_policy(env)


class _Imported:
    """A policy class (or ``env -> policy`` function) named as ``module:Class`` or ``path/to/file.py:Class``.

    Named on the command line by the user, so importing it is their explicit choice; it is
    resolved again in each worker process from the name alone.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.resolve()  # fail now, in the caller, before anything is written

    def resolve(self) -> Any:
        import importlib

        where, _, name = self.target.rpartition(":")
        try:
            if where.endswith(".py"):
                path = Path(where).resolve()
                if not path.is_file():
                    raise TrajectoryError(f"policy: {where} does not exist; give an existing .py file as FILE.py:ClassName")
                module = load_file_module("envrigger_user_policy_" + hashlib.sha256(str(path).encode()).hexdigest()[:12], path)
            else:
                module = importlib.import_module(where)
        except TrajectoryError:
            raise
        except Exception as error:
            raise TrajectoryError(f"policy: cannot import {where} ({error_line(error)}); check the module name or file") from None
        made = getattr(module, name, None)
        if made is None or not callable(made):
            raise TrajectoryError(f"policy: {where} has no class or function {name!r}; name one it defines")
        return made

    def __call__(self, env: Any) -> Any:
        import inspect

        made = self.resolve()
        try:
            takes_env = any(
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                for p in inspect.signature(made).parameters.values()
            )
        except (TypeError, ValueError):
            takes_env = True
        policy = made(env) if takes_env else made()
        if not hasattr(policy, "act"):
            raise TrajectoryError(f"policy: {self.target} made a {type(policy).__name__}, which has no act(obs, info); return a policy")
        return policy


class _Saved:
    def __init__(self, path: str, seed: int) -> None:
        self.path, self.seed = path, seed

    def __call__(self, env: Any) -> Any:
        from envrigger.policies import load_policy

        return load_policy(self.path, env, seed=self.seed)


def check_policy(policy: Any, env: Any) -> None:
    """Refuse, before any output, a policy that declares spaces other than the env's (an SB3 model trained elsewhere)."""
    declared = getattr(getattr(policy, "model", policy), "observation_space", None)
    if declared is None or not hasattr(declared, "shape"):
        return
    actual = env.observation_space
    if _transposed_image(declared, actual):
        return  # SB3 trained on channel-first images (its VecTransposeImage) and its predict transposes each observation back
    if type(declared) is not type(actual) or declared.shape != actual.shape:
        raise TrajectoryError(
            f"policy: it observes {_describe(declared)} but this spec's env gives {_describe(actual)}; collect on the spec "
            "the policy was trained on (for SB3 on MiniGrid's raw Dict observations, add ImageOnly or Flatten to the spec)"
        )


def _transposed_image(declared: Any, actual: Any) -> bool:
    """Whether ``declared`` is the channel-first form of the channel-last image space ``actual``, as SB3 makes it."""
    shape, other = getattr(actual, "shape", None), getattr(declared, "shape", None)
    if type(declared) is not type(actual) or shape is None or other is None or len(shape) != 3:
        return False
    return bool(other == (shape[2], shape[0], shape[1]) and declared.dtype == actual.dtype == np.uint8)


def _describe(space: Any) -> str:
    """A space in a few words: ``Box (151,)``, ``Dict(direction, image, mission)``."""
    if hasattr(space, "spaces") and isinstance(space.spaces, dict):
        return f"Dict({', '.join(space.spaces)})"
    shape = getattr(space, "shape", None)
    return f"{type(space).__name__} {shape}" if shape else type(space).__name__
