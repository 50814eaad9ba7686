"""The library: admitted environments with their provenance, versioned, in SQLite.

Contains :class:`Component` and :class:`Library`. The database runs in WAL mode and every
change is one transaction, so a process killed at any point leaves it consistent; the
library version increases with each admission or removal.

Damage is detected, never read as data: every component and round row carries a SHA-256
of its content, checked whenever it is read; after each commit the library version and
row counts are also written to ``library.db.commit.json`` (outside SQLite), so a database
that comes back behind it (a damaged or lost ``-wal`` file drops the newest transactions
silently) is refused; ``Library(path, check=True)`` (and ``envrigger verify``) also runs
SQLite's ``integrity_check``. A file that is not a library (not SQLite, or any schema object,
a trigger, view or index included, that a library does not have) is refused before anything
is written to it, and left byte-identical (:func:`envrigger.data.sqlite.open_ours`). Opened
``read_only`` (listing, verifying, exporting), a library is read into memory and no file is
made or changed, whatever lies beside it (:func:`envrigger.data.sqlite.reading`); opened to
write, the file, its side files and its commit record must not be links or FIFOs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from envharness.files import check_inside
from envharness.reading import read_json
from envharness.spec import HarnessSpec
from envrigger.data import write_json_atomically
from envrigger.data.sqlite import open_ours, schema_objects, statements
from envrigger.errors import LibraryError

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS components (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    hash TEXT NOT NULL UNIQUE,
    spec_json TEXT NOT NULL,
    finding TEXT NOT NULL,
    finding_json TEXT NOT NULL,
    rationale TEXT NOT NULL,
    origin TEXT NOT NULL,
    parent TEXT,
    gates_json TEXT NOT NULL,
    seeds_json TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    round INTEGER,
    created TEXT NOT NULL,
    library_version INTEGER NOT NULL,
    checksum TEXT
);
CREATE TABLE IF NOT EXISTS rounds (
    round INTEGER PRIMARY KEY,
    summary_json TEXT NOT NULL,
    completed TEXT NOT NULL,
    checksum TEXT
);
"""
# Every schema object a library holds, today's and those of libraries written before row checksums: anything else is not a library.
_LEGACY = SCHEMA.replace(",\n    checksum TEXT", "")
ALLOWED = schema_objects(
    statements(SCHEMA),
    statements(_LEGACY),
    [*statements(_LEGACY), *(f"ALTER TABLE {table} ADD COLUMN checksum TEXT" for table in ("components", "rounds"))],
)


def _checksum(values: tuple[Any, ...]) -> str:
    return hashlib.sha256(json.dumps(list(values), separators=(",", ":")).encode()).hexdigest()


class Component(BaseModel):
    """One admitted environment and why it was admitted."""

    id: int
    hash: str
    spec: HarnessSpec
    finding: str
    finding_stats: dict[str, Any]
    rationale: str
    origin: str
    parent: str | None
    gates: list[dict[str, Any]]
    seeds: list[int]
    agent_id: str
    round: int | None
    created: str
    library_version: int


class Library:
    """Admitted components in SQLite (WAL, one transaction per change).

    Example:
        >>> import tempfile
        >>> from envharness import HarnessSpec
        >>> lib = Library(tempfile.mkdtemp() + "/library.db")
        >>> spec = HarnessSpec(env_id="FrozenLake-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 20}}])
        >>> lib.admit(spec, finding="timeout", rationale="tighter budget", gates=[], seeds=[1, 2], agent_id="q")
        1
        >>> [c.finding for c in lib.components()], lib.version
        (['timeout'], 1)
    """

    def __init__(self, path: str | Path, create: bool = True, check: bool = False, read_only: bool = False) -> None:
        """``read_only``: work on an in-memory copy of the file as committed; nothing is written (listing, verifying, exporting)."""
        self.path, self.read_only = Path(path), read_only
        if (read_only or not create) and not self.path.exists():
            raise LibraryError(f"library {self.path} does not exist; run `envrigger run` to build one")
        if self.path.is_dir():
            raise LibraryError(f"{self.path}: a directory, not a library file; point at a library.db written by envrigger")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            check_inside(self._ledger)  # its commit record too: never written through a link planted beside it
        # Nothing is written (not even the journal mode) before the file is known to be a library: one refused is left as it was.
        self.db = open_ours(
            self.path,
            ALLOWED,
            "library",
            "point at a library.db written by envrigger",
            empty_ok=create and not read_only,
            error=LibraryError,
            read_only=read_only,
        )
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            if check:
                found = [row[0] for row in self.db.execute("PRAGMA integrity_check")]
                if found != ["ok"]:
                    raise LibraryError(f"{self.path}: damaged ({found[0]}); restore library.db from a copy")
            with self._transaction():
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        self.db.execute(statement)
                for table in ("components", "rounds"):  # libraries written before row checksums
                    if "checksum" not in {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}:
                        self.db.execute(f"ALTER TABLE {table} ADD COLUMN checksum TEXT")
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('version', '0')")
            self._check_commits()
        except sqlite3.DatabaseError as error:
            self.db.close()
            raise LibraryError(f"{self.path}: not a library database ({error}); point at a library.db written by envrigger") from None
        except BaseException:
            self.db.close()
            raise

    # -- what was committed, kept outside SQLite -------------------------------------------
    @property
    def _ledger(self) -> Path:
        return self.path.with_name(self.path.name + ".commit.json")

    def _counts(self) -> dict[str, int]:
        return {
            "version": self.version,
            "components": int(self.db.execute("SELECT COUNT(*) FROM components").fetchone()[0]),
            "rounds": int(self.db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0]),
        }

    def _check_commits(self) -> None:
        """Refuse a database that lost transactions the ledger saw committed (a damaged or missing WAL)."""
        if not self._ledger.exists():
            if not self.read_only:
                self._record_commit()
            return
        fix = "restore it (or delete it to trust library.db as it is)"
        ledger = read_json(self._ledger, dict, fix=fix, error=LibraryError)
        try:
            committed = {key: int(ledger[key]) for key in ("version", "rounds")}
        except (ValueError, KeyError, TypeError):
            raise LibraryError(f"{self._ledger}: damaged; {fix}") from None
        now = self._counts()
        if now["version"] < committed["version"] or now["rounds"] < committed["rounds"]:
            raise LibraryError(
                f"{self.path}: holds library version {now['version']} and {now['rounds']} rounds, but version "
                f"{committed['version']} and {committed['rounds']} rounds were committed (its -wal file was damaged or lost?); "
                "restore library.db and library.db-wal from a copy"
            )
        if now != ledger and not self.read_only:
            self._record_commit()

    def _record_commit(self) -> None:
        if self.read_only:
            raise LibraryError(f"{self.path}: opened read-only, so the change was not stored; open it with read_only=False to change it")
        write_json_atomically(self._counts(), self._ledger)

    def _transaction(self) -> Any:
        db = self.db

        class _Tx:
            def __enter__(self) -> None:
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, kind: Any, *_: Any) -> None:
                db.execute("ROLLBACK" if kind else "COMMIT")

        return _Tx()

    @property
    def version(self) -> int:
        return int(self.db.execute("SELECT value FROM meta WHERE key='version'").fetchone()[0])

    def admit(
        self,
        spec: HarnessSpec,
        finding: str,
        rationale: str,
        gates: list[dict[str, Any]],
        seeds: list[int],
        agent_id: str,
        finding_stats: dict[str, Any] | None = None,
        origin: str = "catalog",
        parent: str | None = None,
        round: int | None = None,
    ) -> int:
        """Store an admitted spec with its provenance; returns its id (the existing id if already admitted)."""
        digest = spec.hash()
        with self._transaction():
            row = self.db.execute("SELECT id FROM components WHERE hash=?", (digest,)).fetchone()
            if row is not None:
                return int(row[0])
            version = self.version + 1
            values = (
                digest,
                spec.to_json(indent=None),
                finding,
                json.dumps(finding_stats or {}),
                rationale,
                origin,
                parent,
                json.dumps(gates),
                json.dumps(seeds),
                agent_id,
                round,
                dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                version,
            )
            cursor = self.db.execute(
                "INSERT INTO components (hash, spec_json, finding, finding_json, rationale, origin, parent, gates_json, "
                "seeds_json, agent_id, round, created, library_version, checksum) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (*values, _checksum(values)),
            )
            self.db.execute("UPDATE meta SET value=? WHERE key='version'", (str(version),))
            added = int(cursor.lastrowid or 0)
        self._record_commit()
        return added

    def remove(self, component_id: int) -> None:
        """Delete a component; the library version moves on."""
        with self._transaction():
            if self.db.execute("DELETE FROM components WHERE id=?", (component_id,)).rowcount == 0:
                raise LibraryError(f"library: no component with id {component_id}; see `envrigger library list`")
            self.db.execute("UPDATE meta SET value=CAST(value AS INTEGER) + 1 WHERE key='version'")
        self._record_commit()

    def _component(self, row: tuple[Any, ...]) -> Component:
        *values, checksum = row
        if checksum is not None and _checksum(tuple(values[1:])) != checksum:
            raise LibraryError(f"{self.path}: component {values[0]} does not match its checksum (altered); restore library.db from a copy")
        (
            id_,
            digest,
            spec_json,
            finding,
            finding_json,
            rationale,
            origin,
            parent,
            gates_json,
            seeds_json,
            agent_id,
            round_,
            created,
            version,
        ) = values
        return Component(
            id=id_,
            hash=digest,
            spec=HarnessSpec.from_json(spec_json),
            finding=finding,
            finding_stats=json.loads(finding_json),
            rationale=rationale,
            origin=origin,
            parent=parent,
            gates=json.loads(gates_json),
            seeds=json.loads(seeds_json),
            agent_id=agent_id,
            round=round_,
            created=created,
            library_version=version,
        )

    def components(self) -> list[Component]:
        return [self._component(r) for r in self.db.execute("SELECT * FROM components ORDER BY id")]

    def get(self, key: int | str) -> Component:
        """A component by id or by spec hash."""
        column = "id" if isinstance(key, int) or str(key).isdigit() else "hash"
        row = self.db.execute(f"SELECT * FROM components WHERE {column}=?", (int(key) if column == "id" else key,)).fetchone()
        if row is None:
            raise LibraryError(f"library: no component {key!r}; see `envrigger library list`")
        return self._component(row)

    # -- loop rounds -------------------------------------------------------------------
    def complete_round(self, number: int, summary: dict[str, Any]) -> None:
        text = json.dumps(summary)
        with self._transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO rounds VALUES (?,?,?,?)",
                (number, text, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), _checksum((number, text))),
            )
        self._record_commit()

    def rounds(self) -> list[dict[str, Any]]:
        found = []
        for number, text, checksum in self.db.execute("SELECT round, summary_json, checksum FROM rounds ORDER BY round"):
            if checksum is not None and _checksum((number, text)) != checksum:
                raise LibraryError(f"{self.path}: round {number} does not match its checksum (altered); restore library.db from a copy")
            found.append(json.loads(text))
        return found

    def close(self) -> None:
        self.db.close()
