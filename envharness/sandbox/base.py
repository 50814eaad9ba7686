"""The sandbox interface: limits, results, and the one function every backend implements.

Contains :class:`Limits`, :class:`SandboxResult`, :class:`SandboxError` and
:class:`Sandbox` (the abstract backend). A run gets a private copy of the given files in
a fresh work directory, a wall-clock timeout, memory, CPU-time and process-count limits,
no network, and returns exit status and captured output; temporary directories,
processes and containers are always cleaned up.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from envharness.errors import EnvHarnessError

LimitName = Literal["timeout", "memory", "cpu", "pids", "output"]


class SandboxError(EnvHarnessError):
    """The sandbox itself could not run (backend missing, image build failed...), not the code in it."""


class Limits(BaseModel):
    """Resource limits of one sandboxed run.

    Example:
        >>> Limits(timeout_s=5, memory_mb=256).cpu_s
        10.0
    """

    timeout_s: float = Field(10.0, gt=0, le=3600, description="wall-clock seconds before the run is killed")
    memory_mb: int = Field(512, ge=16, le=65536, description="address space (subprocess) or memory (docker) limit")
    cpu_s: float = Field(
        10.0, gt=0, le=3600, description="CPU seconds (subprocess: RLIMIT_CPU; docker: cores = cpu_s / timeout_s, at most 1)"
    )
    pids: int = Field(64, ge=4, le=4096, description="processes the run may have at once")
    output_bytes: int = Field(1_000_000, ge=1024, le=100_000_000, description="stdout/stderr kept per stream")
    file_mb: int = Field(64, ge=1, le=10_000, description="largest file the run may write")


class SandboxResult(BaseModel):
    """What happened: exit status, output, and which limit (if any) stopped the run."""

    backend: str
    exit_code: int | None = Field(description="the process's exit code; None when killed by a signal")
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    limit: LimitName | None = Field(None, description="the limit that ended the run, if one did")
    duration_s: float = 0.0
    isolation: list[str] = Field(default_factory=list, description="what was enforced: network, filesystem, pids, user...")
    files: dict[str, str] = Field(default_factory=dict, description="text files the run left in its work directory (when asked)")

    @property
    def ok(self) -> bool:
        """Exit code 0 and no limit hit."""
        return self.exit_code == 0 and self.limit is None


class Sandbox:
    """Runs untrusted commands. Subclasses implement :meth:`_run` on a prepared work directory.

    Example:
        >>> from envharness.sandbox import SubprocessSandbox
        >>> result = SubprocessSandbox().run(["python3", "-c", "import os; print(sorted(os.listdir('.')))"], files={"a.txt": "1"})
        >>> result.stdout.strip()
        "['a.txt']"
    """

    name = "abstract"
    workdir_root: str | None = None  # where work directories are made (None: the system temp dir)

    def run(
        self,
        command: list[str],
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
        collect: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
    ) -> SandboxResult:
        """Run ``command`` with ``files`` (relative path -> content) in a fresh work directory.

        ``collect`` names files to read back from the work directory afterwards.
        """
        limits = limits or Limits()
        workdir = Path(tempfile.mkdtemp(prefix="envharness-sandbox-", dir=self.workdir_root))
        try:
            for relative, content in (files or {}).items():
                target = (workdir / relative).resolve()
                if workdir.resolve() not in target.parents:
                    raise SandboxError(f"files: {relative!r} points outside the work directory; use a relative path inside it")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content.encode() if isinstance(content, str) else content)
            result = self._run(command, workdir, limits, dict(env or {}))
            for relative in collect:
                path = workdir / relative
                if path.is_file() and not path.is_symlink():
                    result.files[relative] = path.read_text(errors="replace")[: limits.output_bytes]
            return result
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def run_python(
        self, code: str, files: Mapping[str, str | bytes] | None = None, limits: Limits | None = None, collect: tuple[str, ...] = ()
    ) -> SandboxResult:
        """Run Python ``code`` (written to ``main.py``) with ``files``."""
        return self.run(["python3", "main.py"], {**(files or {}), "main.py": code}, limits, collect)

    def _run(self, command: list[str], workdir: Path, limits: Limits, env: dict[str, str]) -> SandboxResult:
        raise NotImplementedError

    @staticmethod
    def available() -> bool:
        """Whether this backend can run on this machine."""
        return True
