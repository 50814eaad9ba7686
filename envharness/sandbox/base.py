"""The sandbox interface: limits, results, the run's directories, and what every backend shares.

Contains :class:`Limits`, :class:`SandboxResult`, :class:`SandboxError`, :class:`Sandbox`
(the abstract backend), :func:`remove_tree` and :func:`read_inside`. A run gets a private
copy of the given files in a fresh work directory, its own uid, a wall-clock timeout,
memory, CPU-time, process-count and disk limits that hold for the whole run, no network,
and returns exit status, captured output and the evidence for the limit that ended it;
directories, processes and containers are always cleaned up.

The run's directories live under one root-only directory per run (``base``)::

    base/            0700 root
      report.json    written by the trusted supervisor only
      root/          the jail's mount point (subprocess backend)
      fs/            a tmpfs of ``disk_mb`` when the host is root (the disk quota)
        work/        the work dir (``/work`` inside), owned by the run's uid
        tmp/         ``/tmp`` inside
        shm/         ``/dev/shm`` inside
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from envharness.errors import EnvHarnessError
from envharness.validated import ValidatedModel

UID_BASE, UID_SPAN = 1_000_000, 2**22  # each run gets a uid drawn from here, shared with no one
MNT_DETACH = 2

LimitName = Literal["timeout", "memory", "cpu", "pids", "output", "disk"]


class SandboxError(EnvHarnessError):
    """The sandbox itself could not run (backend missing, image build failed...), not the code in it."""


class Limits(ValidatedModel):
    """Resource limits of one sandboxed run.

    Example:
        >>> Limits(timeout_s=5, memory_mb=256).cpu_s
        10.0
    """

    timeout_s: float = Field(10.0, gt=0, le=3600, description="wall-clock seconds before the run is killed")
    memory_mb: int = Field(
        512, ge=16, le=65536, description="memory of the whole run: every process, tmpfs, memfd and shared memory (a cgroup)"
    )
    cpu_s: float = Field(
        10.0, gt=0, le=3600, description="CPU seconds of the whole run, all processes together (on docker also at most one core)"
    )
    pids: int = Field(64, ge=4, le=4096, description="processes the run may have at once (a pids cgroup)")
    output_bytes: int = Field(1_000_000, ge=1024, le=100_000_000, description="stdout/stderr kept per stream; more ends the run")
    file_mb: int = Field(64, ge=1, le=10_000, description="largest file the run may write")
    disk_mb: int = Field(
        64, ge=1, le=10_000, description="what the work dir, /tmp and /dev/shm may hold together (a tmpfs; it counts as memory too)"
    )


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
    evidence: dict[str, int | float | bool | None] = Field(
        default_factory=dict, description="what the kernel and the host measured: cpu_s, oom_kills, pids_max_events, disk_free_bytes..."
    )

    @property
    def ok(self) -> bool:
        """Exit code 0 and no limit hit."""
        return self.exit_code == 0 and self.limit is None


class Sandbox:
    """Runs untrusted commands. Subclasses implement :meth:`_run` on prepared run directories.

    Example:
        >>> from envharness.sandbox import SubprocessSandbox
        >>> result = SubprocessSandbox().run(["python3", "-c", "import os; print(sorted(os.listdir('.')))"], files={"a.txt": "1"})
        >>> result.stdout.strip()
        "['a.txt']"
    """

    name = "abstract"
    workdir_root: str | None = None  # where run directories are made (None: the system temp dir)

    def run(
        self,
        command: list[str],
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
        collect: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
    ) -> SandboxResult:
        """Run ``command`` with ``files`` (relative path -> content) in a fresh work directory.

        ``collect`` names regular files to read back from the work directory afterwards; a
        path with a symlink or anything but a regular file in it is not read.
        """
        limits = limits or Limits()
        self._preflight()
        dirs = RunDirs.make(self.workdir_root, limits)
        try:
            for relative, content in (files or {}).items():
                target = (dirs.work / relative).resolve()
                if dirs.work.resolve() not in target.parents:
                    raise SandboxError(f"files: {relative!r} points outside the work directory; use a relative path inside it")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content.encode() if isinstance(content, str) else content)
            dirs.hand_over()
            result = self._run(command, dirs, limits, dict(env or {}))
            disk = dirs.disk_evidence()
            result.evidence.update(disk)
            if result.limit is None and disk.get("disk_full"):
                result.limit = "disk"  # the kernel refused writes: the tmpfs is full
            for relative in collect:
                text = read_inside(dirs.work, relative, limits.output_bytes)
                if text is not None:
                    result.files[relative] = text
            return result
        finally:
            dirs.remove()

    def run_python(
        self, code: str, files: Mapping[str, str | bytes] | None = None, limits: Limits | None = None, collect: tuple[str, ...] = ()
    ) -> SandboxResult:
        """Run Python ``code`` (written to ``main.py``) with ``files``."""
        return self.run(["python3", "main.py"], {**(files or {}), "main.py": code}, limits, collect)

    def _preflight(self) -> None:
        """Raise :class:`SandboxError` when this backend may not run untrusted code here."""

    def _run(self, command: list[str], dirs: RunDirs, limits: Limits, env: dict[str, str]) -> SandboxResult:
        raise NotImplementedError

    @staticmethod
    def available() -> bool:
        """Whether this backend can run on this machine."""
        return True


@dataclass
class RunDirs:
    """One run's directories (see the module docstring) and its uid."""

    base: Path
    quota: bool  # fs/ is a tmpfs of disk_mb
    uid: int

    @property
    def fs(self) -> Path:
        return self.base / "fs"

    @property
    def work(self) -> Path:
        return self.fs / "work"

    @property
    def report(self) -> Path:
        return self.base / "report.json"

    @classmethod
    def make(cls, root: str | None, limits: Limits) -> RunDirs:
        base = Path(tempfile.mkdtemp(prefix="envharness-sandbox-", dir=root))  # 0700, ours
        (base / "fs").mkdir()
        (base / "root").mkdir()
        quota = False
        if os.geteuid() == 0:
            inodes = max(4096, limits.disk_mb * 256)
            options = f"size={limits.disk_mb}m,nr_inodes={inodes},mode=0755"
            quota = _libc_mount("tmpfs", str(base / "fs"), "tmpfs", 2 | 4, options)  # nosuid, nodev
        dirs = cls(base, quota, UID_BASE + secrets.randbelow(UID_SPAN))
        for name in ("work", "tmp", "shm"):
            (dirs.fs / name).mkdir()
        return dirs

    def hand_over(self) -> None:
        """Give the run's uid its directories (private to it: 0700).

        Not root (a Docker user without root): the directories are opened to everyone instead,
        inside the run's own 0700 directory, so the container's uid can write them.
        """
        if os.geteuid() != 0:
            for name in ("work", "tmp", "shm"):
                (self.fs / name).chmod(0o777)
            return
        for name in ("work", "tmp", "shm"):
            top = self.fs / name
            for folder, subdirs, names in os.walk(top):
                for entry in [folder, *(os.path.join(folder, n) for n in subdirs + names)]:
                    os.chown(entry, self.uid, self.uid, follow_symlinks=False)
            top.chmod(0o700)

    def disk_evidence(self) -> dict[str, int | bool]:
        """Free space and inodes left on the run's tmpfs, and its largest file, measured by the host."""
        evidence: dict[str, int | bool] = {}
        if self.quota:
            info = os.statvfs(self.fs)
            free = info.f_bavail * info.f_frsize
            evidence["disk_free_bytes"] = free
            evidence["disk_full"] = info.f_bavail == 0 or info.f_favail == 0  # a write or a create was refused
        largest = _largest_file(self.fs, limit=100_000)
        evidence["largest_file_bytes"] = largest
        return evidence

    def remove(self) -> None:
        """Unmount and delete everything; never raises, whatever the run left behind."""
        if self.quota:
            _libc_umount(str(self.fs))
        remove_tree(self.base)


def _libc_mount(source: str, target: str, fstype: str, flags: int, data: str) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(flags), data.encode()) == 0


def _libc_umount(target: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(target.encode(), MNT_DETACH)


def _largest_file(top: Path, limit: int) -> int:
    """The size of the largest regular file under ``top`` (no symlinks followed; at most ``limit`` entries looked at)."""
    largest, seen, stack = 0, 0, [str(top)]
    while stack and seen < limit:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    largest = max(largest, entry.stat(follow_symlinks=False).st_size)
            except OSError:
                continue
    return largest


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Delete ``path`` and everything in it, however hostile the tree; never raises.

    Works with constant recursion depth and open files: subdirectories are moved up to the
    top directory one level at a time (a 3000-deep tree is as easy as a flat one), rights
    are restored where a directory was made unreadable, and symlinks are never followed.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        top = os.open(path, flags)
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    counter = 0
    try:
        for _ in range(10_000_000):
            entries = list(os.scandir(top))
            if not entries:
                break
            for entry in entries:
                try:
                    if not entry.is_dir(follow_symlinks=False):
                        os.unlink(entry.name, dir_fd=top)
                        continue
                    try:
                        os.rmdir(entry.name, dir_fd=top)
                        continue
                    except OSError:
                        pass
                    os.chmod(entry.name, 0o700, dir_fd=top, follow_symlinks=False)
                    inner = os.open(entry.name, flags, dir_fd=top)
                    try:
                        for child in list(os.scandir(inner)):
                            if child.is_dir(follow_symlinks=False):
                                while True:  # hoist it to the top, under a name not taken there
                                    counter += 1
                                    try:
                                        os.rename(child.name, f".rm-{counter}", src_dir_fd=inner, dst_dir_fd=top)
                                        break
                                    except OSError as error:
                                        if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                                            raise
                            else:
                                os.unlink(child.name, dir_fd=inner)
                    finally:
                        os.close(inner)
                except OSError:
                    continue
    except OSError:
        pass
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except OSError:
        pass


def read_inside(top: Path, relative: str, cap: int) -> str | None:
    """Read regular file ``relative`` under ``top``, refusing symlinks in any component; at most ``cap`` bytes."""
    parts = [p for p in Path(relative).parts if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts) or Path(relative).is_absolute():
        return None
    try:
        folder = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
            os.close(folder)
            folder = inner
        handle = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        try:
            if not stat.S_ISREG(os.fstat(handle).st_mode):
                return None
            chunks, left = [], cap
            while left > 0 and (chunk := os.read(handle, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks).decode(errors="replace")
        finally:
            os.close(handle)
    except OSError:
        return None
    finally:
        os.close(folder)
