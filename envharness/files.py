"""Writing files atomically, and never through a path someone else planted.

Contains :func:`write_text_atomically`, :func:`write_bytes_atomically`,
:func:`write_file_atomically` (a writer given the temporary path: Parquet, NumPy, zip
archives) and :func:`fsync_directory`. Each writes a temporary file beside the target
(``.NAME.XXXXXXXX.tmp``, so a folder's leftovers of a killed writer are found by that
pattern), syncs it, renames it over the target and syncs the folder; on any failure the
temporary file is removed and the target is left as it was.

Contains too the one check for writing inside a directory someone else may have written (a
shared disk, a downloaded run): :func:`check_inside`, :func:`open_inside` (``os.open`` that
way), :func:`open_file_inside` (``open`` that way) and :func:`make_directories_inside`. Below
the directory the caller names (``within``: by default the file's own folder), no folder on
the way and not the file itself may be a symbolic link, and the file must be a regular one
(not a FIFO, a device or a socket): anything else is refused with an
:class:`~envharness.errors.UnsafePathError` naming it, before a byte is written. The
directory named is followed (the user chose it); the atomic writers check their target too.
A link planted *while* the check runs (a concurrent attacker on the same machine) is out of
scope: the final ``open`` refuses a link at the file itself, but not one swapped in for a folder.

The one place of this in envharness and envrigger (the design's invariant 7: stores, the
library and ledgers are written atomically).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> target = Path(tempfile.mkdtemp()) / "spec.json"
    >>> write_text_atomically(target, '{"env_id": "CartPole-v1"}')
    >>> target.read_text()
    '{"env_id": "CartPole-v1"}'
    >>> def broken(tmp: Path) -> None:
    ...     tmp.write_text("half")
    ...     raise RuntimeError("killed mid-write")
    >>> try:
    ...     write_file_atomically(target, broken)
    ... except RuntimeError:
    ...     pass
    >>> target.read_text(), sorted(p.name for p in target.parent.iterdir())
    ('{"env_id": "CartPole-v1"}', ['spec.json'])
    >>> (target.parent / "log.jsonl").symlink_to("spec.json")  # planted by whoever wrote the folder
    >>> try:
    ...     open_file_inside(target.parent / "log.jsonl", "a")
    ... except UnsafePathError as refused:
    ...     print(str(refused).replace(str(target.parent), "DIR"))
    DIR/log.jsonl: is a symbolic link (to spec.json), not a regular file; nothing is written through it: remove it, or work on a copy of the directory made without links (cp -rL)
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from envharness.errors import UnsafePathError

FIX = "remove it, or work on a copy of the directory made without links (cp -rL)"


def _what(path: Path, mode: int) -> str:
    """What a file that is neither a regular file nor a folder is, in words (a link says where it points)."""
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link (to {os.readlink(path)})"
        except OSError:
            return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a folder" if stat.S_ISDIR(mode) else "a regular file"


def _refused(path: Path, mode: int, wanted: str) -> UnsafePathError:
    return UnsafePathError(f"{path}: is {_what(path, mode)}, not {wanted}; nothing is written through it: {FIX}")


def check_inside(path: str | os.PathLike[str], within: str | os.PathLike[str] | None = None, folder: bool = False) -> None:
    """Refuse ``path`` if it, or a folder between ``within`` and it, is a symbolic link or a special file; missing is fine.

    ``within`` (by default ``path``'s folder) is the directory the caller chose; it is not
    checked. ``folder``: ``path`` is to be a folder, not a regular file.
    """
    path = Path(path)
    root = Path(within) if within is not None else path.parent
    parts = path.relative_to(root).parts
    current = root
    for number, part in enumerate(parts, start=1):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return  # what is missing is made by the writer, a real file or folder
        last = number == len(parts)
        if (stat.S_ISREG(mode) and last and not folder) or (stat.S_ISDIR(mode) and (folder or not last)):
            continue
        raise _refused(current, mode, "a regular file" if last and not folder else "a real folder")


def open_inside(path: str | os.PathLike[str], flags: int, mode: int = 0o666, within: str | os.PathLike[str] | None = None) -> int:
    """``os.open(path, flags, mode)`` after :func:`check_inside`, never following a link at ``path`` nor blocking on a FIFO."""
    path = Path(path)
    check_inside(path, within)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO):  # a link, or a FIFO with no reader, planted since the check
            check_inside(path, within)
        raise
    found = os.fstat(fd).st_mode
    if not stat.S_ISREG(found):
        os.close(fd)
        raise _refused(path, found, "a regular file")
    os.set_blocking(fd, True)
    return fd


_FLAGS = {
    "r": os.O_RDONLY,
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
    "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
}


def open_file_inside(
    path: str | os.PathLike[str], mode: str = "w", within: str | os.PathLike[str] | None = None, encoding: str | None = None
) -> IO[Any]:
    """``open(path, mode)`` after :func:`check_inside`, as :func:`open_inside` opens it (``mode``: r, w, a or x, with b and +)."""
    flags = _FLAGS[mode.replace("b", "").replace("+", "")]
    if "+" in mode:
        flags = (flags & ~os.O_WRONLY) | os.O_RDWR
    return os.fdopen(open_inside(path, flags, within=within), mode, encoding=None if "b" in mode else encoding)


def make_directories_inside(path: str | os.PathLike[str], within: str | os.PathLike[str]) -> Path:
    """``mkdir -p path`` below ``within``, refusing a symbolic link or a file on the way (:func:`check_inside`); the path."""
    path = Path(path)
    check_inside(path, within, folder=True)
    path.mkdir(parents=True, exist_ok=True)
    return path


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """Sync a folder's entries to disk, so a rename into it survives a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def default_mode() -> int:
    """The mode a plain ``open()`` gives a new file under the process's umask (``mkstemp`` gives 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_file_atomically(
    path: str | os.PathLike[str], write: Callable[[Path], object], mode: int | None = None, within: str | os.PathLike[str] | None = None
) -> None:
    """Call ``write(tmp)`` to fill a temporary file beside ``path``, then replace ``path`` with it.

    ``write`` may reopen ``tmp`` as it likes (``pq.write_table(table, tmp)``,
    ``model.save(tmp)``); it must write to that path, not elsewhere. The file gets ``mode``
    (by default what a plain ``open()`` would give it). An error raised by ``write``, or
    while syncing or renaming, removes the temporary file and leaves ``path`` untouched.
    The folder must exist. A link or special file at ``path``, or a link on the way from
    ``within`` (by default ``path``'s folder), is refused first (:func:`check_inside`).
    """
    target = Path(path)
    check_inside(target, within)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb") as handle:  # fsync syncs the file, whichever descriptor names it
            os.fsync(handle.fileno())
        os.chmod(tmp, default_mode() if mode is None else mode)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


def write_text_atomically(
    path: str | os.PathLike[str],
    text: str,
    mode: int | None = None,
    encoding: str | None = None,
    within: str | os.PathLike[str] | None = None,
) -> None:
    """Replace ``path`` with ``text`` atomically (see :func:`write_file_atomically`); ``encoding`` as ``open()`` takes it."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding=encoding) as handle:
            handle.write(text)

    write_file_atomically(path, write, mode, within)


def write_bytes_atomically(
    path: str | os.PathLike[str], data: bytes, mode: int | None = None, within: str | os.PathLike[str] | None = None
) -> None:
    """Replace ``path`` with ``data`` atomically (see :func:`write_file_atomically`)."""
    write_file_atomically(path, lambda tmp: tmp.write_bytes(data), mode, within)
