"""The subprocess sandbox: a child process with rlimits, in fresh namespaces where the kernel allows.

Contains :class:`SubprocessSandbox` and the in-namespace launcher :func:`launch` (trusted
code that prepares the jail, then ``exec``\\ s the untrusted command).

As root with ``unshare`` available (the usual container or CI case) each run gets its own
network namespace (no interfaces but a downed loopback: no network), PID namespace (the
command is PID 1; when it exits every process it started dies), and mount namespace in
which every mount is read-only except the work directory and private ``/tmp`` and
``/dev/shm`` tmpfs; it then runs as the unprivileged user ``nobody`` with rlimits on
address space, CPU time, processes, file size and core dumps. Without root or
``unshare`` only the rlimits and a new session apply, and ``SandboxResult.isolation``
says so.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from envharness.sandbox.base import Limits, Sandbox, SandboxResult

NOBODY = 65534
SAFE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _jail(workdir: str) -> None:
    """Inside fresh mount/pid namespaces: everything read-only but the work dir and private tmpfs."""
    _mount("--make-rprivate", "/")
    targets = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            target = line.split()[4]
            if not target.startswith(("/proc", "/sys", "/dev")):
                targets.append(target)
    for target in sorted(set(targets), key=len):
        try:
            _mount("-o", "remount,bind,ro", target)
        except subprocess.CalledProcessError:
            pass  # a mount we cannot touch stays as it is; the user drop still guards it
    for scratch in ("/tmp", "/dev/shm"):
        _mount("-t", "tmpfs", "-o", "size=64m,mode=1777", "tmpfs", scratch)
    _mount("--bind", workdir, workdir)
    _mount("-o", "remount,bind,rw", workdir)
    _mount("-t", "proc", "proc", "/proc")


def _limit(limits: dict) -> None:
    memory = limits["memory_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    cpu = int(max(1, limits["cpu_s"]))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["pids"], limits["pids"]))
    size = limits["file_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def launch(config_json: str) -> None:
    """Entry point inside the namespaces: jail, limit, drop to nobody, exec the command."""
    config = json.loads(config_json)
    workdir = config["workdir"]
    if config["jail"]:
        _jail(workdir)
        # We are PID 1 of the new namespace, and PID 1 ignores signals it has no handler for
        # (SIGXCPU from the CPU limit included): stay as init, run the command as a child,
        # and report a signal death as exit code 128 + signal.
        child = os.fork()
        if child:
            while True:
                pid, status = os.waitpid(-1, 0)
                if pid == child:
                    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    if config["drop_user"]:
        os.chown(workdir, NOBODY, NOBODY)
        for root, dirs, files in os.walk(workdir):
            for name in dirs + files:
                os.chown(os.path.join(root, name), NOBODY, NOBODY, follow_symlinks=False)
    _limit(config["limits"])
    if config["drop_user"]:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    os.chdir(workdir)
    os.execvpe(config["command"][0], config["command"], config["env"])


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "--net", "--mount", "--pid", "--fork", "true"], capture_output=True)
    return probe.returncode == 0


class SubprocessSandbox(Sandbox):
    """The embedded default backend: rlimits, namespaces and a user drop where available.

    Example:
        >>> result = SubprocessSandbox().run_python("print(6 * 7)")
        >>> result.ok, result.stdout.strip()
        (True, '42')
    """

    name = "subprocess"
    _namespaces: bool | None = None

    def __init__(self, python: str = "python3") -> None:
        self.python = python
        if SubprocessSandbox._namespaces is None:
            SubprocessSandbox._namespaces = _can_unshare()
        if self._namespaces and os.access("/var/tmp", os.W_OK):
            self.workdir_root = "/var/tmp"  # the jail mounts a private tmpfs over /tmp, which would hide it

    @property
    def isolation(self) -> list[str]:
        base = ["rlimits", "session"]
        return base + (["network", "pid-namespace", "read-only-fs", "user-nobody"] if self._namespaces else [])

    def _run(self, command: list[str], workdir: Path, limits: Limits, env: dict[str, str]) -> SandboxResult:
        jailed = bool(self._namespaces)
        if command and command[0] == "python3":
            command = [self.python, *command[1:]]
        config = {
            "workdir": str(workdir),
            "jail": jailed,
            "drop_user": jailed,
            "command": command,
            "env": {**SAFE_ENV, **env},
            "limits": limits.model_dump(),
        }
        launcher = [
            sys.executable,
            "-c",
            "import sys; from envharness.sandbox.subprocess_backend import launch; launch(sys.argv[1])",
            json.dumps(config),
        ]
        argv = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--", *launcher] if jailed else launcher
        started = time.monotonic()
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**SAFE_ENV, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        readers = [_Drain(process.stdout, limits.output_bytes), _Drain(process.stderr, limits.output_bytes)]
        timed_out = False
        try:
            process.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:  # nothing of the run may outlive it: the whole session goes
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
            for reader in readers:
                reader.join()
        duration = time.monotonic() - started
        code = process.returncode
        sig = -code if code is not None and code < 0 else (code - 128 if jailed and code is not None and code > 128 else None)
        (stdout, out_overflow), (stderr, err_overflow) = (r.result() for r in readers)
        out, err = stdout.decode(errors="replace"), stderr.decode(errors="replace")
        limit = _which_limit(timed_out, sig, err, out_overflow or err_overflow)
        return SandboxResult(
            backend=self.name,
            exit_code=None if sig is not None else code,
            signal=sig,
            stdout=out,
            stderr=err,
            timed_out=timed_out,
            limit=limit,
            duration_s=duration,
            isolation=self.isolation,
        )


class _Drain(threading.Thread):
    """Reads a pipe to its end, keeping at most ``cap`` bytes (a flood cannot fill our memory)."""

    def __init__(self, pipe: Any, cap: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.cap, self.kept, self.overflow = pipe, cap, bytearray(), False
        self.start()

    def run(self) -> None:
        while chunk := self.pipe.read(65536):
            room = self.cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
            if len(chunk) > max(room, 0):
                self.overflow = True
        self.pipe.close()

    def result(self) -> tuple[bytes, bool]:
        return bytes(self.kept), self.overflow


def _which_limit(timed_out: bool, sig: int | None, stderr: str, overflow: bool) -> str | None:
    if timed_out:
        return "timeout"
    if sig in (signal.SIGXCPU, signal.SIGKILL) and "MemoryError" not in stderr:
        return "cpu" if sig == signal.SIGXCPU else None
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        return "memory"
    if "BlockingIOError" in stderr or "Resource temporarily unavailable" in stderr:
        return "pids"
    if sig == signal.SIGXFSZ or "File too large" in stderr:
        return "output"
    if overflow:
        return "output"
    return None
