"""Making base envs from ids: ``gymnasium.make`` with clear errors, and which ``module:`` ids may import.

Contains :func:`make_base`, :func:`registration`, :func:`allowing_imports` and :func:`check_env_id`. The harness,
specs and link transforms all make base envs here, so none of them imports another to do it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import gymnasium as gym

from envharness.errors import EnvHarnessError, EnvNotFoundError, SpecError
from envharness.values import check_numbers

_LAZY_NAMESPACES = {"MiniGrid-": "minigrid", "BabyAI-": "minigrid", "envharness/": "envharness.envs"}


# Modules whose ``module:Env`` ids may be made in the current context (see :func:`allowing_imports`).
_ALLOWED_IMPORTS: ContextVar[frozenset[str]] = ContextVar("envharness_allowed_imports", default=frozenset())


@contextmanager
def allowing_imports(*modules: str) -> Iterator[None]:
    """Within the block, env ids of the form ``module:Env-v0`` may import the named modules.

    Env ids are data (they come from spec files, libraries and exports), and Gymnasium
    imports the module before ``:`` when it makes such an id, so envharness refuses those
    ids unless the caller names the module here, with ``allow_imports=`` on
    :func:`wrap` / :meth:`~envharness.spec.HarnessSpec.build`, or ``--allow-import`` at the CLI.

    Example:
        >>> import envharness
        >>> envharness.wrap("gymnasium.envs.classic_control:CartPole-v1")
        Traceback (most recent call last):
        ...
        envharness.errors.SpecError: env_id: 'gymnasium.envs.classic_control:CartPole-v1' would import module 'gymnasium.envs.classic_control', and a spec is data that never runs code; import the module yourself and use its registered id, or opt in with allow_imports=['gymnasium.envs.classic_control'] (CLI: --allow-import gymnasium.envs.classic_control)
        >>> with allowing_imports("gymnasium.envs.classic_control"):
        ...     envharness.wrap("gymnasium.envs.classic_control:CartPole-v1").spec.id
        'CartPole-v1'
    """
    token = _ALLOWED_IMPORTS.set(_ALLOWED_IMPORTS.get() | frozenset(modules))
    try:
        yield
    finally:
        _ALLOWED_IMPORTS.reset(token)


def check_env_id(env_id: str) -> None:
    """Raise :class:`~envharness.errors.SpecError` if making ``env_id`` would import a module not allowed here."""
    module, colon, _ = env_id.partition(":")
    if colon and module not in _ALLOWED_IMPORTS.get():
        raise SpecError(
            f"env_id: {env_id!r} would import module {module!r}, and a spec is data that never runs code; "
            f"import the module yourself and use its registered id, or opt in with allow_imports=[{module!r}] "
            f"(CLI: --allow-import {module})"
        )


# What a registered spec's own registration holds: overriding it from env_kwargs would swap the spec.
_SPEC_ENTRY_KWARGS = frozenset({"spec", "allow_imports"})


def registration(env_id: str) -> Any:
    """The Gymnasium registration (``EnvSpec``) of ``env_id``, importing MiniGrid or our own envs on demand for their ids; None if unregistered."""
    if env_id not in gym.registry:
        for prefix, module in _LAZY_NAMESPACES.items():
            if env_id.startswith(prefix):
                __import__(module)
    return gym.registry.get(env_id)


def make_base(env_id: str, **make_kwargs: Any) -> gym.Env:
    """``gymnasium.make`` with clear errors, importing MiniGrid on demand for its ids."""
    check_env_id(env_id)
    check_numbers(make_kwargs, "env_kwargs")
    limit = make_kwargs.get("max_episode_steps")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise SpecError(f"env_kwargs.max_episode_steps: got {limit!r}; give a positive whole number of steps")
    registered = registration(env_id)
    overridden = sorted(_SPEC_ENTRY_KWARGS & set(make_kwargs))
    if registered is not None and registered.entry_point == "envharness.spec:make_harness" and overridden:
        raise SpecError(
            f"env_kwargs.{overridden[0]}: {env_id} is a registered envharness spec, and this would replace its "
            "registration; remove it (reshape the env with transforms instead)"
        )
    try:
        return gym.make(env_id, **make_kwargs)
    except EnvHarnessError:
        raise
    except gym.error.DependencyNotInstalled as error:
        raise EnvNotFoundError(f"env id {env_id!r} needs a package that is not installed: {str(error).splitlines()[0]}") from None
    except gym.error.Error as error:
        raise EnvNotFoundError(
            f"env id {env_id!r} is not registered with Gymnasium ({error}); check the spelling, or import the package that registers it (at the CLI: --import MODULE)"
        ) from None
    except TypeError as error:
        raise SpecError(f"env_kwargs: {env_id} rejected them ({error}); pass only arguments its constructor takes") from None
    except RecursionError:
        raise SpecError(f"env_id: making {env_id} recursed without end; a registered spec must not contain itself") from None
    except Exception as error:  # the env's own constructor refused the arguments (ValueError, KeyError, AssertionError...)
        reason = str(error).splitlines()[0] if str(error) else ""
        raise SpecError(
            f"env_kwargs: {env_id} could not be made with them ({type(error).__name__}: {reason}); check their values"
        ) from None
