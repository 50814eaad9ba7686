"""The Docker sandbox: one throwaway container per run, no network, hard limits.

Contains :class:`DockerSandbox` and :func:`build_base_image`. Containers run with
``network_mode="none"``, a memory limit without swap, a CPU quota, a pids limit, a
read-only root filesystem with only the work directory (and a small ``/tmp`` tmpfs)
writable, all capabilities dropped, ``no-new-privileges``, as user ``nobody``; they are
removed after every run, whatever happened.

No image registry is reachable on our machines, so the base image is built locally from
Debian packages: ``debootstrap --variant=minbase --include=python3`` into a directory, then
``docker import``. It is cached by tag and rebuilt only when missing. The Debian mirror is
read from the machine's apt configuration (or ``ENVHARNESS_DEBIAN_MIRROR``).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from envharness.sandbox.base import Limits, Sandbox, SandboxError, SandboxResult

IMAGE = "envharness-sandbox:bookworm-python3"
SUITE = "bookworm"


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

    Example:
        >>> result = DockerSandbox().run_python("print('hello from', open('/etc/debian_version').read().split('.')[0])")
        >>> result.ok, result.stdout.split()[:2]
        (True, ['hello', 'from'])
    """

    name = "docker"

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
            self._docker = _client()
            build_base_image(self.image, self._docker)
        return self._docker

    def _run(self, command: list[str], workdir: Path, limits: Limits, env: dict[str, str]) -> SandboxResult:
        from docker.types import Ulimit

        client = self.client
        for path in [workdir, *workdir.rglob("*")]:
            os.chown(path, 65534, 65534, follow_symlinks=False)
        cpu = int(max(1, limits.cpu_s))
        container = client.containers.create(
            self.image,
            command,
            network_mode="none",
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(1e9),
            pids_limit=limits.pids,
            read_only=True,
            user="65534:65534",
            working_dir="/work",
            volumes={str(workdir): {"bind": "/work", "mode": "rw"}},
            tmpfs={"/tmp": "size=64m"},
            environment={"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", **env},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            init=True,
            ulimits=[
                Ulimit(name="cpu", soft=cpu, hard=cpu + 1),
                Ulimit(name="fsize", soft=limits.file_mb * 2**20, hard=limits.file_mb * 2**20),
                Ulimit(name="core", soft=0, hard=0),
            ],
        )
        started = time.monotonic()
        timed_out = False
        try:
            container.start()
            try:
                status = container.wait(timeout=limits.timeout_s)
                code = int(status.get("StatusCode", -1))
            except Exception:  # the wait timed out
                timed_out = True
                container.kill()
                code = None
            duration = time.monotonic() - started
            container.reload()
            state = container.attrs.get("State", {})
            stdout = container.logs(stdout=True, stderr=False)
            stderr = container.logs(stdout=False, stderr=True)
        finally:
            container.remove(force=True)
        sig = code - 128 if code is not None and code > 128 else None
        err = stderr.decode(errors="replace")
        if timed_out:
            limit = "timeout"
        elif state.get("OOMKilled") or "MemoryError" in err:
            limit = "memory"
        elif sig == 24:  # SIGXCPU
            limit = "cpu"
        elif "Resource temporarily unavailable" in err or "BlockingIOError" in err:
            limit = "pids"
        elif len(stdout) > limits.output_bytes or len(stderr) > limits.output_bytes or sig == 25:
            limit = "output"
        else:
            limit = None
        return SandboxResult(
            backend=self.name,
            exit_code=None if sig is not None or timed_out else code,
            signal=sig,
            stdout=stdout[: limits.output_bytes].decode(errors="replace"),
            stderr=err[: limits.output_bytes],
            timed_out=timed_out,
            limit=limit,
            duration_s=duration,
            isolation=["network", "memory-cgroup", "cpu-quota", "pids-limit", "read-only-fs", "user-nobody", "no-capabilities"],
        )
