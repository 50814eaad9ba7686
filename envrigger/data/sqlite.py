"""Is this SQLite file ours? One check for every SQLite file envrigger keeps (ledgers, libraries, skills), made before anything is written.

Contains :func:`schema_objects` (every schema object a set of ``CREATE`` scripts makes),
:func:`schema_problem` (why a file is not one of ours, or None), :func:`reading` (the one way
to open an SQLite file only to read it), :func:`open_ours` (that check, then a connection)
and :func:`check_planted`. A file is ours when every schema object in it (table, index,
view, trigger) is one our own schema makes, with the same definition: a copy of a ledger
with one trigger added is not a ledger.

Reading never creates, locks or changes a file, whatever lies beside the database: the
check reads the header without SQLite's help, then opens the file ``immutable`` (no lock, no
``-wal`` or ``-shm`` made, no journal rolled back). Where a ``-wal`` or ``-journal`` beside it
holds something (a writer at work or killed; a copy of a live file with its ``-wal`` and no
``-shm``), the newest committed state needs SQLite's recovery: the file and that journal are
copied into a private folder and opened there, so recovery happens to the copy only. A file
refused as not ours is left byte-identical, with the same mtime and no side file, in a
read-only folder too. Before writing, the file and its side files must be regular files, not
symbolic links or FIFOs (SQLite follows a link at the database, so its writes would land
where the link points): refused in one line naming the path.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from envharness.errors import UnsafePathError
from envharness.files import check_inside
from envrigger.errors import EnvriggerError, TrajectoryError

MAGIC = b"SQLite format 3\x00"
SchemaObject = tuple[str, str, str, str | None]  # type, name, table, normalised SQL (None for SQLite's own indexes)


def _normal(sql: str | None) -> str | None:
    return None if sql is None else re.sub(r"\s+", " ", sql).replace("( ", "(").replace(" )", ")").strip()


def schema_objects(*scripts: Iterable[str]) -> frozenset[SchemaObject]:
    """The schema objects each script (a list of SQL statements, run in order on an empty database) makes, all together.

    Several scripts allow the schemas of earlier versions (a table before a column was added).

    Example:
        >>> sorted(name for _, name, _, _ in schema_objects(["CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, n TEXT UNIQUE)"]))
        ['sqlite_autoindex_t_1', 'sqlite_sequence', 't']
    """
    found: set[SchemaObject] = set()
    for script in scripts:
        db = sqlite3.connect(":memory:")
        try:
            for statement in script:
                if statement.strip():
                    db.execute(statement)
            found |= {(t, n, tb, _normal(sql)) for t, n, tb, sql in db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")}
        finally:
            db.close()
    return frozenset(found)


def statements(schema: str) -> list[str]:
    """A schema script's statements (split on ``;``)."""
    return [s for s in schema.split(";") if s.strip()]


SIDE_FILES = ("-wal", "-shm", "-journal")  # what SQLite keeps beside a database


def check_planted(path: str | Path) -> None:
    """Refuse (:class:`~envharness.errors.UnsafePathError`) a database, or a side file of it, that is a link or a special file."""
    for name in (str(path), *(f"{path}{suffix}" for suffix in SIDE_FILES)):
        check_inside(name)


def _pending(path: Path) -> list[str]:
    """The side files that hold something SQLite's recovery needs (a -wal or -journal with bytes); a special one is refused."""
    found = []
    for suffix in SIDE_FILES:
        side = Path(f"{path}{suffix}")
        try:
            info = side.stat()
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode):  # a FIFO would hang the copy, a device never ends
            raise UnsafePathError(f"{side}: is not a regular file (a FIFO, device or socket); nothing is read from it: remove it")
        if suffix != "-shm" and info.st_size > 0:
            found.append(suffix)
    return found


@contextmanager
def reading(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A connection that reads ``path`` as last committed and never creates, locks or changes a file, beside it or in it.

    ``immutable`` when no ``-wal`` or ``-journal`` holds anything; else the file and those
    journals copied into a private folder and opened there (SQLite replays the ``-wal`` or
    rolls back the hot journal in the copy). The connection may write: to the copy only.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "theirs.db"
        >>> db = sqlite3.connect(path); _ = db.execute("PRAGMA journal_mode=WAL"); _ = db.execute("CREATE TABLE t (x)"); db.commit()
        >>> with reading(path) as view:  # while the writer is still open: its -wal holds the table
        ...     view.execute("SELECT name FROM sqlite_master").fetchall()
        [('t',)]
        >>> db.close()
    """
    path = Path(path)
    pending = _pending(path)
    if not pending:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
        try:
            yield db
        finally:
            db.close()
        return
    with tempfile.TemporaryDirectory(prefix="envrigger-sqlite-") as private:
        copy = Path(private) / "copy.db"
        shutil.copyfile(path, copy)
        for suffix in pending:
            shutil.copyfile(f"{path}{suffix}", f"{copy}{suffix}")
        db = sqlite3.connect(copy)
        try:
            yield db
        finally:
            db.close()


def snapshot(path: str | Path) -> sqlite3.Connection:
    """An in-memory copy of the SQLite file at ``path`` as last committed (read by :func:`reading`): what it changes stays in memory."""
    memory = sqlite3.connect(":memory:", isolation_level=None)
    with reading(path) as db:
        db.backup(memory)
    return memory


def schema_problem(path: str | Path, allowed: frozenset[SchemaObject], empty_ok: bool = False) -> str | None:
    """Why the SQLite file at ``path`` is not one of ours (its schema objects not all in ``allowed``), or None if it is.

    Writes nothing. A missing file is fine (it will be made); an empty one only with ``empty_ok``.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "other.db"
        >>> _ = path.write_text("a to-do list")
        >>> schema_problem(path, schema_objects(["CREATE TABLE t (x TEXT)"]))
        'not an SQLite database'
    """
    path = Path(path)
    if not path.exists():
        return None
    if not path.is_file():
        return "not a file"
    with open(path, "rb") as handle:
        header = handle.read(100)
    in_wal = Path(str(path) + "-wal").is_file()  # a database never checkpointed yet has an empty main file and its pages in -wal
    if not header and not in_wal:
        return None if empty_ok else "an empty file"
    if header and (len(header) < 100 or not header.startswith(MAGIC)):
        return "not an SQLite database"
    try:
        with reading(path) as db:
            found = {(t, n, tb, _normal(sql)) for t, n, tb, sql in db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")}
    except sqlite3.DatabaseError as error:
        return f"an unreadable SQLite database ({str(error).splitlines()[0][:80]})"
    if not found:
        return None if empty_ok else "an SQLite database with nothing in it"
    foreign = sorted(found - allowed, key=lambda o: (o[0] != "table", o[0], o[1]))
    if foreign:
        kind, name, _, _ = foreign[0]
        ours = {(t, n) for t, n, _, _ in allowed}
        what = f"a {kind} {name!r} unlike ours" if (kind, name) in ours else f"a {kind} {name!r}"
        more = f" (and {len(foreign) - 1} more foreign schema objects)" if len(foreign) > 1 else ""
        return f"an SQLite database with {what}{more}"
    return None


def open_ours(
    path: str | Path,
    allowed: frozenset[SchemaObject],
    what: str,
    hint: str,
    empty_ok: bool = False,
    error: type[EnvriggerError] = TrajectoryError,
    read_only: bool = False,
) -> sqlite3.Connection:
    """A connection to ``path`` once :func:`schema_problem` finds it ours; else a one-line ``error``, the file untouched.

    ``what`` names the kind (``ledger``), ``hint`` the fix (``point at a ledger made by ...``), ``error`` the exception
    named for it (:class:`~envrigger.errors.LedgerError`). ``read_only``: an in-memory :func:`snapshot`, the file never
    written; else the file itself, once it and its side files are found to be no link or FIFO (:func:`check_planted`).
    """
    path = Path(path)
    if not read_only:
        check_planted(path)
    problem = schema_problem(path, allowed, empty_ok=empty_ok)
    if problem is not None:
        raise error(f"{path}: not a {what}: {problem}; {hint}")
    if read_only:
        return snapshot(path)
    return sqlite3.connect(path, timeout=30, isolation_level=None)


__all__ = ["MAGIC", "SIDE_FILES", "check_planted", "open_ours", "reading", "schema_objects", "schema_problem", "snapshot", "statements"]
