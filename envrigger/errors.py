"""Exceptions raised by envrigger.

Contains :class:`EnvriggerError`, the one base class, and its specific kinds:
:class:`TrajectoryError` (a run directory, trajectory file or record is missing or
malformed), :class:`LibraryError` (a library database), :class:`LedgerError` (a ledger,
its releases and what may be evaluated on it), :class:`RolloutError` (a rollout's backend
and arguments, or workers that cannot start), :class:`SkillLibraryError` (a skill library),
:class:`AgentError` (an LLM agent cannot go on), :class:`CallBudgetSpent` (an agent's call
budget used up: the episode is cut, not failed) and :class:`WallLimitReached` (its wall
seconds per episode passed: cut likewise).

``EnvriggerError`` is an :class:`envharness.errors.EnvHarnessError`: every message is one
line that says what was wrong and how to fix it, and the command lines print it as is and
exit with code 2. (What the live proxy and the chat agent raise and catch among their own
parts, such as ``UpstreamError`` or ``IncompleteStream``, never reaches a caller.)

Example:
    >>> from envrigger.loop.library import Library
    >>> try:
    ...     Library("/nonexistent/library.db", create=False)
    ... except EnvriggerError as error:
    ...     print(type(error).__name__, "-", error)
    LibraryError - library /nonexistent/library.db does not exist; run `envrigger run` to build one
"""

from __future__ import annotations

from envharness.errors import EnvHarnessError


class EnvriggerError(EnvHarnessError):
    """Base class of every error envrigger raises on purpose."""


class ArmError(EnvriggerError):
    """An arm that cannot run as it is written: its plan raised, mixes spaces, or its sampler picked a reserved level."""


class TrajectoryError(EnvriggerError):
    """A run directory, trajectory file or record is missing or malformed."""


class LibraryError(EnvriggerError):
    """A library database is missing, damaged or not a library, or has no such component."""


class LedgerError(EnvriggerError):
    """A ledger is missing, damaged or not a ledger, or a release, cell or env cannot be evaluated or compared on it."""


class RolloutError(EnvriggerError):
    """A rollout's backend or arguments are unusable (an unknown backend, Ray missing or unreachable), or its workers cannot start."""


class SkillLibraryError(EnvriggerError):
    """A skill library file that is not one, or a skill that breaks a bound."""


class AgentError(EnvriggerError):
    """The agent cannot go on (endpoint refused, call budget used up); one line, never the API key."""


class CallBudgetSpent(AgentError):
    """The harness's budget of model calls per episode is used up: the episode is cut by a limit, not failed by an error.

    ``cut`` names the limit; a rollout records the episode with its steps and model calls, its reason ``cut``.
    """

    cut = "call budget"


class WallLimitReached(AgentError):
    """The harness's wall seconds per episode have passed: the episode is cut by a limit, its steps and calls kept.

    ``cut`` names the limit; a rollout records the episode with its steps and model calls, its reason ``cut``.
    """

    cut = "wall limit"
