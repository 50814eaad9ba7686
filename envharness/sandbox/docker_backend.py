"""The Docker sandbox: one throwaway container per run, no network, hard limits.

Contains :class:`DockerSandbox` and :func:`build_base_image`. Containers run with
``network_mode="none"``, a private IPC namespace, a memory limit without swap, one CPU, a
pids limit, a read-only root filesystem with only the work dir, ``/tmp`` and ``/dev/shm``
writable (the run's ``disk_mb`` tmpfs), every capability dropped but the supervisor's
three, ``no-new-privileges``, no log, the command as a uid of the run's own; they are
removed after every run, whatever happened.

No image registry is reachable on our machines, so the base image is built locally from
Debian packages: ``debootstrap --variant=minbase --include=python3`` into a directory, then
``docker import``. It is cached by tag and rebuilt only when missing. The Debian mirror is
read from the machine's apt configuration (or ``ENVHARNESS_DEBIAN_MIRROR``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from envharness.sandbox.base import Limits, RunDirs, Sandbox, SandboxError, SandboxResult
from envharness.sandbox.subprocess_backend import GRACE_S, SUPERVISOR, read_report, which_limit

IMAGE = "envharness-sandbox:bookworm-python3"
SUITE = "bookworm"
OWNER_LABEL = "envharness.sandbox.owner"  # the pid of the process whose run a container is


def _client() -> Any:
    try:
        import docker
    except ImportError:
        raise SandboxError("the docker backend needs the docker SDK; pip install docker") from None
    try:
        client = docker.from_env(timeout=60)
        client.ping()
        return client
    except Exception as error:
        raise SandboxError(f"no Docker engine reachable ({type(error).__name__}); start dockerd or use the subprocess backend") from None


def debian_mirror() -> str:
    """The Debian mirror apt uses here (``ENVHARNESS_DEBIAN_MIRROR`` overrides)."""
    if os.environ.get("ENVHARNESS_DEBIAN_MIRROR"):
        return os.environ["ENVHARNESS_DEBIAN_MIRROR"]
    sources = [
        Path("/etc/apt/sources.list.d/debian.sources"),
        Path("/etc/apt/sources.list"),
        *Path("/etc/apt/sources.list.d").glob("*.list"),
    ]
    for path in sources:
        if not path.is_file():
            continue
        text = path.read_text()
        found = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, flags=re.M) or re.search(
            r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+/debian)\s+\w+", text, flags=re.M
        )
        if found:
            return found.group(1)
    raise SandboxError("no Debian mirror in /etc/apt; set ENVHARNESS_DEBIAN_MIRROR to one")


def build_base_image(tag: str = IMAGE, client: Any = None) -> str:
    """Build the base image with debootstrap and ``docker import`` (once; concurrent callers wait)."""
    client = client or _client()
    with open(Path(tempfile.gettempdir()) / "envharness-sandbox-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            client.images.get(tag)
            return tag
        except Exception:
            pass
        if shutil.which("debootstrap") is None:
            raise SandboxError("building the sandbox image needs debootstrap; apt-get install debootstrap")
        root = Path(tempfile.mkdtemp(prefix="envharness-rootfs-"))
        try:
            done = subprocess.run(
                ["debootstrap", "--variant=minbase", "--include=python3", SUITE, str(root), debian_mirror()], capture_output=True, text=True
            )
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise SandboxError(f"debootstrap failed ({tail[0]}); check the Debian mirror and disk space")
            archive = root.with_suffix(".tar")
            subprocess.run(["tar", "-C", str(root), "-cf", str(archive), "."], check=True)
            repository, _, version = tag.partition(":")
            client.api.import_image_from_file(
                str(archive), repository=repository, tag=version or "latest", changes=['CMD ["/bin/sh"]', "WORKDIR /work"]
            )
            archive.unlink(missing_ok=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return tag


class DockerSandbox(Sandbox):
    """Runs each command in a fresh, locked-down container of the locally built base image.

    The container's PID 1 is the trusted supervisor (:mod:`envharness.sandbox.supervisor`,
    mounted read-only), running as root with only the capabilities to drop to the run's
    own uid and to kill; it starts the command as that uid and reports what the kernel
    said to a directory only root can reach. Output is streamed and capped as it arrives
    (no container log is kept), and the work dir, ``/tmp`` and ``/dev/shm`` are bind mounts
    of the run's ``disk_mb`` tmpfs on the host.

    Example:
        >>> result = DockerSandbox().run_python("print('hello from', open('/etc/debian_version').read().split('.')[0])")
        >>> result.ok, result.stdout.split()[:2]
        (True, ['hello', 'from'])
    """

    name = "docker"
    isolation = [
        "network",
        "pid-namespace",
        "ipc-namespace",
        "container-root",
        "read-only-fs",
        "private-uid",
        "memory-cgroup",
        "pids-limit",
        "cpu-quota",
        "cpu-total",
        "no-capabilities",
        "no-stdin",
    ]

    def __init__(self, image: str = IMAGE) -> None:
        self.image = image
        self._docker: Any = None

    @staticmethod
    def available() -> bool:
        try:
            _client()
            return True
        except SandboxError:
            return False

    @property
    def client(self) -> Any:
        if self._docker is None:
            client = _client()
            build_base_image(self.image, client)
            self._docker = client  # only once the image exists: a second thread must not run before the first has built it
        return self._docker

    def _run(self, command: list[str], dirs: RunDirs, limits: Limits, env: dict[str, str]) -> SandboxResult:
        from docker.types import LogConfig

        client = self.client
        (dirs.base / "report").mkdir(mode=0o700)  # root-only: the command (its own uid) cannot reach it
        config = {
            "command": command,
            "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", **env},
            "limits": limits.model_dump(),
            "uid": dirs.uid,
            "cwd": "/work",
            "report": "/report/report.json",
            "jail": None,
            "watch_all": True,
            "strong": True,
            "cgroup_events": True,
        }
        (dirs.base / "report" / "settings.json").write_text(json.dumps(config))
        container = client.containers.create(
            self.image,
            ["/usr/bin/python3", "-I", "-S", "/sandbox/supervisor.py", "/report/settings.json"],
            network_mode="none",
            ipc_mode="private",
            cgroupns="private",
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(1e9),
            pids_limit=limits.pids + 1,  # + the supervisor
            read_only=True,
            user="0:0",
            working_dir="/work",
            volumes={
                str(dirs.fs / "work"): {"bind": "/work", "mode": "rw"},
                str(dirs.fs / "tmp"): {"bind": "/tmp", "mode": "rw"},
                str(dirs.fs / "shm"): {"bind": "/dev/shm", "mode": "rw"},
                str(dirs.base / "report"): {"bind": "/report", "mode": "rw"},
                str(SUPERVISOR): {"bind": "/sandbox/supervisor.py", "mode": "ro"},
            },
            cap_drop=["ALL"],
            cap_add=["SETUID", "SETGID", "KILL"],
            security_opt=["no-new-privileges"],
            log_config=LogConfig(type=LogConfig.types.NONE),
            stdin_open=False,
            labels={OWNER_LABEL: str(os.getpid())},  # which process's run it is, so leftovers are told apart
        )
        started = time.monotonic()
        timed_out = overflow = False
        try:
            stream = container.attach(stdout=True, stderr=True, stream=True, logs=False, demux=True)
            drain = _Demux(stream, limits.output_bytes)
            container.start()
            drain.wake.wait(limits.timeout_s + GRACE_S)  # the supervisor ends the run at timeout_s; this is the backstop
            if drain.overflow:
                overflow = True
            elif not drain.done.is_set():
                timed_out = True
            if overflow or timed_out:
                try:
                    container.kill()
                except Exception:  # it ended on its own meanwhile
                    pass
            container.wait(timeout=30)
            drain.join(10)
            duration = time.monotonic() - started
            container.reload()
            state = container.attrs.get("State", {})
        finally:
            container.remove(force=True)
        report = read_report(dirs.base / "report" / "report.json")
        evidence: dict[str, Any] = {**report, "oom_killed": bool(state.get("OOMKilled"))}
        if state.get("OOMKilled"):
            evidence["oom_kills"] = max(1, int(evidence.get("oom_kills") or 0))
        code, sig = report.get("exit_code"), report.get("signal")
        if not report:
            code, sig = None, signal.SIGKILL
        timed_out = timed_out or bool(report.get("wall_limit_hit"))
        limit = which_limit(timed_out, overflow, evidence, limits)
        return SandboxResult(
            backend=self.name,
            exit_code=None if sig is not None else code,
            signal=sig,
            stdout=bytes(drain.kept[0]).decode(errors="replace"),
            stderr=bytes(drain.kept[1]).decode(errors="replace"),
            timed_out=timed_out,
            limit=limit,
            duration_s=duration,
            isolation=self.isolation,
            evidence=evidence,
        )


class _Demux(threading.Thread):
    """Reads the container's attached (stdout, stderr) stream as it arrives, keeping ``cap`` bytes of each."""

    def __init__(self, stream: Any, cap: int) -> None:
        super().__init__(daemon=True)
        self.stream, self.cap = stream, cap
        self.kept = (bytearray(), bytearray())
        self.overflow = False
        self.wake, self.done = threading.Event(), threading.Event()
        self.start()

    def run(self) -> None:
        try:
            for pair in self.stream:
                for kept, chunk in zip(self.kept, pair):
                    if not chunk:
                        continue
                    room = self.cap - len(kept)
                    if room > 0:
                        kept += chunk[:room]
                    if len(chunk) > max(room, 0):  # keep reading (dockerd blocks if we stop) until the kill ends it
                        self.overflow = True
                        self.wake.set()
        except Exception:  # the stream closes when the container is killed or removed
            pass
        finally:
            self.done.set()
            self.wake.set()
