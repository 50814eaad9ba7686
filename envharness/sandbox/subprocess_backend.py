"""The subprocess sandbox: the run in fresh namespaces and cgroups, as a uid of its own.

Contains :class:`SubprocessSandbox`. Every run (as root with ``unshare`` and cgroups, the
usual container or CI case) gets

- its own network (no interfaces but a downed loopback), PID, IPC, UTS and mount namespaces;
- a new root holding only read-only system paths (``/usr``, the ``/lib`` links, a few
  ``/etc`` files, ``/dev/null`` and friends), its work dir at ``/work``, private ``/tmp`` and
  ``/dev/shm``: the project's source, other runs' directories and host sockets do not exist
  in it;
- a uid drawn at random for this run alone, no supplementary groups, stdin on ``/dev/null``;
- a memory cgroup (swap included; tmpfs, memfd and SysV shared memory count) and a pids
  cgroup for the whole run, a tmpfs of ``disk_mb`` for work dir, ``/tmp`` and ``/dev/shm``
  together, a CPU-time limit on the whole run enforced by the trusted supervisor
  (:mod:`envharness.sandbox.supervisor`) as the namespace's PID 1, and the wall clock.

The limit a result names comes from the kernel and the host (cgroup events, the
supervisor's report, the host's clock, output counters and disk measurements), never from
what the program prints. Where this isolation is not available (not root, no ``unshare``,
no memory and pids cgroups) the backend refuses to run unless created with
``allow_weak_isolation=True``; it then has rlimits and a session only, and
``SandboxResult.isolation`` says so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from envharness.sandbox.base import Limits, RunDirs, Sandbox, SandboxError, SandboxResult

SAFE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
SUPERVISOR = Path(__file__).with_name("supervisor.py")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/alternatives",
    "/etc/ssl/certs",
)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
GRACE_S = 2.0  # how long past timeout_s the host waits for the supervisor's own kill and report
NAMESPACES = ["--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child"]


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", *NAMESPACES, "true"], capture_output=True)
    return probe.returncode == 0


class Cgroups:
    """One run's memory and pids cgroups, under our own, on cgroup v1 or v2.

    v1: the ``memory`` and ``pids`` hierarchies under ``/sys/fs/cgroup/<controller>``; v2: a
    unified ``/sys/fs/cgroup`` whose root enables both controllers. :meth:`layout` says which
    this machine has (None: neither, and the sandbox cannot promise per-run limits).
    """

    ROOT = Path("/sys/fs/cgroup")

    def __init__(self, paths: dict[str, Path], version: int) -> None:
        self.paths, self.version = paths, version

    @classmethod
    def layout(cls) -> int | None:
        if os.geteuid() != 0:
            return None
        if all((cls.ROOT / c / "cgroup.procs").is_file() for c in ("memory", "pids")) and os.access(cls.ROOT / "memory", os.W_OK):
            return 1
        controllers = cls.ROOT / "cgroup.controllers"
        if controllers.is_file() and {"memory", "pids"} <= set(controllers.read_text().split()):
            return 2
        return None

    @classmethod
    def create(cls, limits: Limits, name: str) -> Cgroups | None:
        version = cls.layout()
        memory, pids = limits.memory_mb * 2**20, limits.pids + 1  # + the supervisor
        try:
            if version == 1:
                controllers = ("memory", "pids", "cpuacct") if (cls.ROOT / "cpuacct" / "cpuacct.usage").is_file() else ("memory", "pids")
                paths = {c: cls.ROOT / c / _own_v1(c).lstrip("/") / name for c in controllers}
                for path in paths.values():
                    path.mkdir()
                (paths["memory"] / "memory.limit_in_bytes").write_text(str(memory))
                swap = paths["memory"] / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(memory))
                (paths["pids"] / "pids.max").write_text(str(pids))
                return cls(paths, 1)
            if version == 2:
                subtree = cls.ROOT / "cgroup.subtree_control"
                if not {"memory", "pids"} <= set(subtree.read_text().split()):
                    subtree.write_text("+memory +pids")
                path = cls.ROOT / name
                path.mkdir()
                (path / "memory.max").write_text(str(memory))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
                (path / "pids.max").write_text(str(pids))
                return cls({"memory": path, "pids": path, "cpu": path}, 2)
        except OSError as error:
            raise SandboxError(f"cannot create the run's cgroups ({error}); check that /sys/fs/cgroup is writable") from None
        return None

    @property
    def cpu_file(self) -> tuple[str, str] | None:
        """The run's CPU counter: (path, unit)."""
        if "cpuacct" in self.paths:
            return str(self.paths["cpuacct"] / "cpuacct.usage"), "ns"
        if "cpu" in self.paths:
            return str(self.paths["cpu"] / "cpu.stat"), "usec"
        return None

    @property
    def procs(self) -> list[str]:
        return sorted({str(path / "cgroup.procs") for path in self.paths.values()})

    def events(self) -> dict[str, int]:
        """OOM kills and refused forks, read from the kernel's counters."""
        from envharness.sandbox.supervisor import cgroup_counter

        memory = self.paths["memory"] / ("memory.oom_control" if self.version == 1 else "memory.events")
        found = {
            "oom_kills": cgroup_counter(memory, "oom_kill"),
            "pids_max_events": cgroup_counter(self.paths["pids"] / "pids.events", "max"),
        }
        return {key: value for key, value in found.items() if value is not None}

    def remove(self) -> None:
        for path in set(self.paths.values()):
            for _ in range(50):  # the last processes may still be exiting
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _own_v1(controller: str) -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path
    return "/"


class SubprocessSandbox(Sandbox):
    """The embedded default backend: namespaces, a private root, a uid and cgroups per run.

    Args:
        python: the interpreter ``python3`` commands run with (it must lie under an allowed path).
        readonly_paths: host paths to show read-only inside, besides the system ones.
        allow_weak_isolation: run even where the machine cannot isolate (rlimits only).

    Example:
        >>> result = SubprocessSandbox().run_python("print(6 * 7)")
        >>> result.ok, result.stdout.strip()
        (True, '42')
    """

    name = "subprocess"
    _namespaces: bool | None = None

    def __init__(self, python: str = "python3", readonly_paths: tuple[str, ...] = (), allow_weak_isolation: bool = False) -> None:
        self.python = python
        self.readonly_paths = tuple(readonly_paths)
        self.allow_weak_isolation = allow_weak_isolation
        if SubprocessSandbox._namespaces is None:
            SubprocessSandbox._namespaces = _can_unshare()

    @property
    def strong(self) -> bool:
        """Whether this machine gives each run namespaces, a private root and cgroups."""
        return bool(self._namespaces) and Cgroups.layout() is not None

    @property
    def isolation(self) -> list[str]:
        if not self.strong:
            return ["rlimits", "session"]
        return [
            "network",
            "pid-namespace",
            "ipc-namespace",
            "private-root",
            "read-only-system",
            "private-uid",
            "cgroup-memory",
            "cgroup-pids",
            "cpu-total",
            "disk-quota",
            "no-stdin",
        ]

    def _preflight(self) -> None:
        if not self.strong and not self.allow_weak_isolation:
            why = "not root" if os.geteuid() != 0 else "no unshare or no memory and pids cgroups"
            raise SandboxError(
                f"the subprocess sandbox cannot isolate untrusted code here ({why}); run as root with cgroups, "
                "use the docker backend, or pass allow_weak_isolation=True to accept rlimits only"
            )

    def _jail(self, dirs: RunDirs) -> dict[str, Any]:
        binds: list[tuple[str, str, bool, bool]] = [("/usr", "/usr", False, False)]
        links = []
        for path in SYSTEM_LINKS:
            if os.path.islink(path):
                links.append((path, os.readlink(path)))
            elif os.path.isdir(path):
                binds.append((path, path, False, False))
        extra = [*self.readonly_paths]
        interpreter = shutil.which(self.python, path=SAFE_ENV["PATH"]) or self.python
        if os.path.isabs(interpreter) and not os.path.realpath(interpreter).startswith("/usr/"):
            extra.append(str(Path(os.path.realpath(interpreter)).parent.parent))  # its prefix
        binds += [(p, p, False, False) for p in (*ETC_FILES, *extra) if os.path.exists(p)]
        binds += [(p, p, True, True) for p in DEVICES if os.path.exists(p)]
        binds += [
            (str(dirs.fs / "work"), "/work", True, False),
            (str(dirs.fs / "tmp"), "/tmp", True, False),
            (str(dirs.fs / "shm"), "/dev/shm", True, False),
        ]
        # The toolkit's own source is hidden from sandboxed code; envrigger's is found without
        # importing it (envharness never imports envrigger).
        masks = [str(Path(__file__).parents[1])]
        engine = importlib.util.find_spec("envrigger")
        if engine is not None and engine.origin:
            masks.append(str(Path(engine.origin).parent))
        return {"root": str(dirs.base / "root"), "symlinks": links, "binds": binds, "masks": masks}

    def _run(self, command: list[str], dirs: RunDirs, limits: Limits, env: dict[str, str]) -> SandboxResult:
        strong = self.strong
        if command and command[0] == "python3":
            command = [self.python, *command[1:]]
        cgroups = Cgroups.create(limits, dirs.base.name) if strong else None
        config = {
            "command": command,
            "env": {**SAFE_ENV, **env},
            "limits": limits.model_dump(),
            "uid": dirs.uid if strong else None,
            "cwd": "/work" if strong else str(dirs.work),
            "report": str(dirs.report),
            "jail": self._jail(dirs) if strong else None,
            "cgroup_procs": cgroups.procs if cgroups else [],
            "cpu_file": cgroups.cpu_file if cgroups else None,
            "watch_all": strong,
            "strong": strong,
        }
        settings = dirs.base / "settings.json"  # in the root-only run dir; the supervisor deletes it once read
        settings.write_text(json.dumps(config))
        script = dirs.base / "supervisor.py"  # a copy: the command's /proc/1/cmdline names no project path
        shutil.copyfile(SUPERVISOR, script)
        supervisor = [sys.executable, "-I", "-S", str(script), str(settings)]
        argv = ["unshare", *NAMESPACES, "--", *supervisor] if strong else supervisor
        started = time.monotonic()
        wake = threading.Event()
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=SAFE_ENV
            )
            readers = [Drain(process.stdout, limits.output_bytes, wake), Drain(process.stderr, limits.output_bytes, wake)]
            timed_out = overflow = False
            deadline = started + limits.timeout_s + GRACE_S  # the supervisor ends the run at timeout_s; this is the backstop
            while process.poll() is None:
                if any(r.overflow for r in readers):
                    overflow = True
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                wake.wait(min(left, 0.05))
            try:  # nothing of the run may outlive it: the whole session goes
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
            for reader in readers:
                reader.join()
            overflow = overflow or any(r.overflow for r in readers)
            duration = time.monotonic() - started
            events = cgroups.events() if cgroups else {}
        finally:
            if cgroups:
                cgroups.remove()
        report = read_report(dirs.report)
        evidence: dict[str, Any] = {**report, **events}
        code, sig = report.get("exit_code"), report.get("signal")
        if not report:  # the supervisor itself was killed (the OOM killer, the host): say what the host saw
            code, sig = None, signal.SIGKILL
        timed_out = timed_out or bool(report.get("wall_limit_hit"))
        limit = which_limit(timed_out, overflow, evidence, limits)
        (stdout, _), (stderr, _) = (r.result() for r in readers)
        return SandboxResult(
            backend=self.name,
            exit_code=None if sig is not None else code,
            signal=sig,
            stdout=stdout.decode(errors="replace"),
            stderr=stderr.decode(errors="replace"),
            timed_out=timed_out,
            limit=limit,
            duration_s=duration,
            isolation=self.isolation,
            evidence=evidence,
        )


def read_report(path: Path) -> dict[str, Any]:
    """The supervisor's report file as a dict; empty when missing or unreadable (the run then reports no evidence)."""
    try:
        found = json.loads(path.read_text())
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def which_limit(timed_out: bool, overflow: bool, evidence: dict[str, Any], limits: Limits) -> str | None:
    """The limit that ended the run, from the host's clock and counters and the kernel's evidence only."""
    if timed_out:
        return "timeout"
    if overflow:
        return "output"
    if evidence.get("oom_kills"):
        return "memory"
    cpu = evidence.get("cpu_s") or 0.0
    if evidence.get("cpu_limit_hit") or (evidence.get("signal") in (signal.SIGXCPU, signal.SIGKILL) and cpu >= limits.cpu_s):
        return "cpu"
    if evidence.get("pids_max_events"):
        return "pids"
    return None


class Drain(threading.Thread):
    """Reads a pipe as it fills, keeping at most ``cap`` bytes; past the cap it wakes the watcher, which ends the run."""

    def __init__(self, pipe: Any, cap: int, wake: threading.Event) -> None:
        super().__init__(daemon=True)
        self.pipe, self.cap, self.kept, self.overflow, self.wake = pipe, cap, bytearray(), False, wake
        self.start()

    def run(self) -> None:
        while chunk := self.pipe.read1(65536):
            room = self.cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
            if len(chunk) > max(room, 0):
                self.overflow = True
                self.wake.set()
        self.pipe.close()

    def result(self) -> tuple[bytes, bool]:
        return bytes(self.kept), self.overflow
