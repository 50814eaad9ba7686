"""Is this SQLite file ours? One check for every SQLite file envrigger keeps (ledgers, libraries), made before anything is written.

Contains :func:`schema_objects` (every schema object a set of ``CREATE`` scripts makes),
:func:`schema_problem` (why a file is not one of ours, or None) and :func:`open_ours`
(that check, then a connection). A file is ours when every schema object in it (table,
index, view, trigger) is one our own schema makes, with the same definition: a copy of a
ledger with one trigger added is not a ledger. The check reads the file without SQLite's
help first (its header), then through a read-only connection that creates no ``-wal`` or
``-shm`` file and takes no lock (``immutable``), so a file refused as not ours is left
byte-identical: no journal mode, no table, no side file is written before it passes.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path

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


def _read_only(path: Path) -> sqlite3.Connection:
    uri = path.resolve().as_uri()
    # immutable: no lock, no -wal or -shm, no journal rolled back. Where a -wal file is already there (a
    # writer killed, or one at work), the newest schema may be in it: read it read-only instead.
    wal = Path(str(path) + "-wal")
    return sqlite3.connect(f"{uri}?mode=ro" if wal.exists() else f"{uri}?immutable=1", uri=True)


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
        db = _read_only(path)
        try:
            found = {(t, n, tb, _normal(sql)) for t, n, tb, sql in db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")}
        finally:
            db.close()
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
) -> sqlite3.Connection:
    """A connection to ``path`` once :func:`schema_problem` finds it ours; else a one-line ``error``, the file untouched.

    ``what`` names the kind (``ledger``), ``hint`` the fix (``point at a ledger made by ...``), ``error`` the exception
    named for it (:class:`~envrigger.errors.LedgerError`).
    """
    path = Path(path)
    problem = schema_problem(path, allowed, empty_ok=empty_ok)
    if problem is not None:
        raise error(f"{path}: not a {what}: {problem}; {hint}")
    return sqlite3.connect(path, timeout=30, isolation_level=None)


__all__ = ["MAGIC", "open_ours", "schema_objects", "schema_problem", "statements"]
