"""Writing files atomically: readers see the old file or the new one, never half of either.

Contains :func:`write_text_atomically`, :func:`write_bytes_atomically`,
:func:`write_file_atomically` (a writer given the temporary path: Parquet, NumPy, zip
archives) and :func:`fsync_directory`. Each writes a temporary file beside the target
(``.NAME.XXXXXXXX.tmp``, so a folder's leftovers of a killed writer are found by that
pattern), syncs it, renames it over the target and syncs the folder; on any failure the
temporary file is removed and the target is left as it was.

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
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


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


def write_file_atomically(path: str | os.PathLike[str], write: Callable[[Path], object], mode: int | None = None) -> None:
    """Call ``write(tmp)`` to fill a temporary file beside ``path``, then replace ``path`` with it.

    ``write`` may reopen ``tmp`` as it likes (``pq.write_table(table, tmp)``,
    ``model.save(tmp)``); it must write to that path, not elsewhere. The file gets ``mode``
    (by default what a plain ``open()`` would give it). An error raised by ``write``, or
    while syncing or renaming, removes the temporary file and leaves ``path`` untouched.
    The folder must exist.
    """
    target = Path(path)
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


def write_text_atomically(path: str | os.PathLike[str], text: str, mode: int | None = None, encoding: str | None = None) -> None:
    """Replace ``path`` with ``text`` atomically (see :func:`write_file_atomically`); ``encoding`` as ``open()`` takes it."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding=encoding) as handle:
            handle.write(text)

    write_file_atomically(path, write, mode)


def write_bytes_atomically(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (see :func:`write_file_atomically`)."""
    write_file_atomically(path, lambda tmp: tmp.write_bytes(data), mode)
