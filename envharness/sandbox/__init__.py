"""Sandboxes for untrusted code: a subprocess with rlimits and namespaces, or a Docker container.

Contains :func:`get_sandbox` and re-exports :class:`Sandbox`, :class:`Limits`,
:class:`SandboxResult`, :class:`SandboxError`, :class:`SubprocessSandbox` and
:class:`DockerSandbox`. Nothing untrusted ever runs with ``exec`` in the caller's process.

Example:
    >>> result = get_sandbox("subprocess").run_python("import sys; print(sys.version_info[0])")
    >>> result.stdout.strip(), result.limit
    ('3', None)
"""

from __future__ import annotations

from envharness.sandbox.base import Limits, Sandbox, SandboxError, SandboxResult
from envharness.sandbox.docker_backend import DockerSandbox
from envharness.sandbox.subprocess_backend import SubprocessSandbox

BACKENDS = {"subprocess": SubprocessSandbox, "docker": DockerSandbox}


def get_sandbox(backend: str = "subprocess") -> Sandbox:
    """The sandbox backend called ``backend``."""
    try:
        return BACKENDS[backend]()
    except KeyError:
        raise SandboxError(f"sandbox backend {backend!r} is unknown; use one of {', '.join(BACKENDS)}") from None


__all__ = ["BACKENDS", "DockerSandbox", "Limits", "Sandbox", "SandboxError", "SandboxResult", "SubprocessSandbox", "get_sandbox"]
