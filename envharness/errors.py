"""Exceptions raised by envharness.

Contains :class:`EnvHarnessError`, the one base class, and its specific kinds:
:class:`SpecError` (malformed spec or transform parameters), :class:`UnknownTransformError`,
:class:`IncompatibleTransformError`, :class:`StateAccessError`, :class:`EnvNotFoundError`,
:class:`TransformError` (a transform failed while the environment ran),
:class:`VerifierTamperError` (something changed what the verifier judges, outside the
base env's own step), :class:`EpisodeEndedError` (a step after the episode ended),
:class:`ActionError` (an action outside the action space), :class:`UserError` (a bad
command-line argument or file), :class:`UnreadableFileError` (a file a command reads that is
not the file it should be) and :class:`UnsafePathError` (a symbolic link or special file
planted where a file is written, refused).

Every message is one line that says what was wrong and how to fix it, so the CLI can
print it as is and exit with code 2.

Example:
    >>> from envharness.transforms import MoveGoal
    >>> try:
    ...     MoveGoal(max_dist=0)
    ... except EnvHarnessError as error:
    ...     print(type(error).__name__, "-", error)
    SpecError - MoveGoal.max_dist: got 0; input should be greater than or equal to 1
"""

from __future__ import annotations

from gymnasium.error import ResetNeeded


class EnvHarnessError(Exception):
    """Base class of every error envharness raises on purpose."""


class SpecError(EnvHarnessError, ValueError):
    """A spec, transform name or transform parameter is malformed."""


class UnknownTransformError(SpecError, KeyError):
    """A transform name is not in the registry."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class IncompatibleTransformError(EnvHarnessError, TypeError):
    """A transform cannot reshape this environment (wrong family or spaces)."""


class StateAccessError(IncompatibleTransformError):
    """A state transform was asked of an environment whose state envharness cannot reach."""


class EnvNotFoundError(SpecError):
    """The base environment id is not registered with Gymnasium."""


class TransformError(EnvHarnessError, RuntimeError):
    """A transform could not be applied to a running episode."""


class VerifierTamperError(TransformError):
    """The base env's verifier-relevant state changed where only the base env may change it.

    Raised by the harness when a transform hook (or anything else between two checks)
    edited the base env's state, replaced one of its methods, or reached the verifier's
    own reference; the episode ends as a failure.
    """


class EpisodeEndedError(EnvHarnessError, ResetNeeded):
    """``step()`` was called after the episode ended (or before a successful ``reset()``)."""


class ActionError(EnvHarnessError, ValueError):
    """``step()`` was given an action outside the env's action space; the episode goes on."""


class UserError(EnvHarnessError):
    """A bad command-line argument or file."""


class UnreadableFileError(UserError, ValueError):
    """A file a command reads is missing, a directory, not UTF-8 text, not JSON, or JSON of the wrong shape (see :mod:`envharness.reading`)."""


class UnsafePathError(EnvHarnessError):
    """A path about to be written inside a directory is a symbolic link or a special file (FIFO, device, socket): refused."""
