"""The ledger file: held-out tasks, evaluated cells with their per-task results, and named releases, in SQLite.

Contains :class:`Ledger` and :class:`TaskResult`. The held-out task set is fixed when the
ledger is made (:meth:`Ledger.create`) and never changes. A cell (a model, a harness, an
environment) is evaluated once on every task and its results go in with it in one
transaction, so a process killed during an evaluation leaves the ledger as it was before;
a release names one cell.

Damage is detected, never read as data, as in the library: WAL mode with full sync, a
SHA-256 over every row checked when it is read, and the counts of committed rows kept
beside the file (``LEDGER.db.commit.json``), so a database that comes back behind them (a
damaged or lost ``-wal`` file) is refused. An SQLite file that is not a ledger (any schema
object, a trigger, view or index included, that a ledger does not have) is refused before
anything is written to it, and left byte-identical (:func:`envrigger.data.sqlite.open_ours`).
Opened ``read_only`` (list, show, report), a ledger is read into memory and no file is made
or changed, whatever lies beside it; opened to write, the file, its side files and its
commit record must not be links or FIFOs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envharness.files import check_inside
from envharness.reading import read_json
from envrigger.data import write_json_atomically
from envrigger.data.sqlite import open_ours, schema_objects, statements
from envrigger.errors import LedgerError
from envrigger.ledger.factors import Cell

KIND = "envrigger-ledger"
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (idx INTEGER PRIMARY KEY, seed INTEGER NOT NULL, level_id TEXT NOT NULL, checksum TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
    key TEXT PRIMARY KEY, cell_json TEXT NOT NULL, evaluated TEXT NOT NULL, run TEXT NOT NULL, checksum TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    cell TEXT NOT NULL, idx INTEGER NOT NULL, result_json TEXT NOT NULL, checksum TEXT NOT NULL, PRIMARY KEY (cell, idx)
);
CREATE TABLE IF NOT EXISTS releases (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, cell TEXT NOT NULL, created TEXT NOT NULL, checksum TEXT NOT NULL
);
"""
ALLOWED = schema_objects(statements(SCHEMA))  # every schema object a ledger holds: anything else is not a ledger
HINT = "point at a ledger made by `envrigger ledger init`"
COUNTED = ("tasks", "cells", "results", "releases")


def _sum(*values: Any) -> str:
    return hashlib.sha256(json.dumps(list(values), separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class TaskResult:
    """One held-out task played by one cell: the verdict and what it cost."""

    success: bool
    score: float
    steps: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    wall_s: float
    tool_errors: int
    retries: int
    human_interventions: int
    irreversible: bool
    error: str | None
    actions: str  # a digest of the action sequence
    visits: dict[str, int]  # observation digest -> visits


class Ledger:
    """One ledger file: the env, its held-out tasks, evaluated cells and releases.

    Example:
        >>> import tempfile
        >>> from envharness import HarnessSpec
        >>> path = tempfile.mkdtemp() + "/ledger.db"
        >>> ledger = Ledger.create(path, HarnessSpec(env_id="FrozenLake-v1"), [(8, "a"), (9, "b")], seed=0)
        >>> again = Ledger(path)
        >>> again.env.env_id, [level for _, level in again.tasks()], again.releases()
        ('FrozenLake-v1', ['a', 'b'], [])
    """

    def __init__(self, path: str | Path, check: bool = False, _create: bool = False, read_only: bool = False) -> None:
        """``read_only``: work on an in-memory copy of the file as committed; nothing is written (list, show, report)."""
        self.path, self.read_only = Path(path), read_only and not _create
        if not _create and not self.path.exists():
            raise LedgerError(f"ledger {self.path} does not exist; make one with `envrigger ledger init {self.path} --env ENV_ID`")
        if self.path.is_dir():
            raise LedgerError(f"{self.path}: a directory, not a ledger file; {HINT}")
        if not self.read_only:
            check_inside(self._commits)  # its commit record too: never written through a link or into a FIFO beside it
        # Nothing is written (not even the journal mode) before the file is known to be a ledger: one refused is left as it was.
        self.db = open_ours(self.path, ALLOWED, "ledger", HINT, empty_ok=_create, error=LedgerError, read_only=self.read_only)
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            if check:
                found = [row[0] for row in self.db.execute("PRAGMA integrity_check")]
                if found != ["ok"]:
                    raise LedgerError(f"{self.path}: damaged ({found[0]}); restore the ledger from a copy")
            if _create:
                with self._transaction():
                    for statement in statements(SCHEMA):
                        self.db.execute(statement)
            elif self._meta_value("kind") != KIND:
                raise LedgerError(f"{self.path}: not a ledger (no ledger metadata); {HINT}")
            else:
                self._check_commits()
        except sqlite3.DatabaseError as error:
            self.db.close()
            raise LedgerError(f"{self.path}: not a ledger database ({str(error).splitlines()[0]}); {HINT}") from None
        except BaseException:
            self.db.close()
            raise

    @classmethod
    def create(cls, path: str | Path, env: Any, tasks: list[tuple[int, str]], seed: int) -> Ledger:
        """A new ledger for ``env`` (a :class:`~envharness.HarnessSpec`) with its held-out ``tasks`` (seed, level id)."""
        path = Path(path)
        if path.exists():
            raise LedgerError(f"{path} already exists; pick a new file (a ledger's tasks are fixed when it is made)")
        path.parent.mkdir(parents=True, exist_ok=True)
        ledger = cls(path, _create=True)
        meta = {"kind": KIND, "env": env.to_json(indent=None), "seed": str(seed), "created": _now()}
        with ledger._transaction():
            for key, value in meta.items():
                ledger.db.execute("INSERT INTO meta VALUES (?, ?)", (key, value))
            ledger.db.execute("INSERT INTO meta VALUES ('checksum', ?)", (_sum(sorted(meta.items())),))
            for idx, (task_seed, level) in enumerate(tasks):
                ledger.db.execute("INSERT INTO tasks VALUES (?, ?, ?, ?)", (idx, int(task_seed), str(level), _sum(idx, task_seed, level)))
        ledger._record_commit()
        return ledger

    def close(self) -> None:
        self.db.close()

    # -- integrity ---------------------------------------------------------------------
    def _transaction(self) -> Any:
        db = self.db

        class _Tx:
            def __enter__(self) -> None:
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, kind: Any, *_: Any) -> None:
                db.execute("ROLLBACK" if kind else "COMMIT")

        return _Tx()

    def _meta_value(self, key: str) -> str | None:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        except sqlite3.OperationalError:
            return None
        return None if row is None else str(row[0])

    @property
    def _commits(self) -> Path:
        return self.path.with_name(self.path.name + ".commit.json")

    def _counts(self) -> dict[str, int]:
        return {table: int(self.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]) for table in COUNTED}

    def _record_commit(self) -> None:
        if self.read_only:
            raise LedgerError(f"{self.path}: opened read-only, so the change was not stored; open it with read_only=False to change it")
        # Into the main file, so that a copy of LEDGER.db alone (an artifact kept by CI) holds every release.
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        write_json_atomically(self._counts(), self._commits)

    def _check_commits(self) -> None:
        meta = {key: self._meta_value(key) for key in ("kind", "env", "seed", "created")}
        if self._meta_value("checksum") != _sum(sorted(meta.items())):
            raise LedgerError(f"{self.path}: its metadata was altered (checksum differs); restore the ledger from a copy")
        if not self._commits.exists():
            raise LedgerError(f"{self._commits} is missing; restore it beside the ledger (it records what was committed)")
        saved = read_json(self._commits, dict, fix="restore it from a copy of the ledger", error=LedgerError)
        try:
            committed = {table: int(saved[table]) for table in COUNTED}
        except (ValueError, KeyError, TypeError):
            raise LedgerError(f"{self._commits}: damaged; restore it from a copy of the ledger") from None
        now = self._counts()
        behind = [table for table in COUNTED if now[table] < committed[table]]
        if behind:
            raise LedgerError(
                f"{self.path}: holds fewer {behind[0]} ({now[behind[0]]}) than were committed ({committed[behind[0]]}); its -wal file "
                "was damaged or lost? restore the ledger and its -wal file from a copy"
            )
        if now != committed and not self.read_only:  # a commit whose record a kill cut short: the database is ahead, and right
            self._record_commit()

    def _checked(self, table: str, row: tuple[Any, ...]) -> tuple[Any, ...]:
        *values, checksum = row
        if _sum(*values) != checksum:
            raise LedgerError(f"{self.path}: a row of {table} was altered (checksum differs); restore the ledger from a copy")
        return tuple(values)

    # -- reading -----------------------------------------------------------------------
    @property
    def env(self) -> Any:
        from envharness.spec import HarnessSpec

        return HarnessSpec.from_json(self._meta_value("env") or "{}")

    @property
    def seed(self) -> int:
        return int(self._meta_value("seed") or 0)

    @property
    def created(self) -> str:
        return self._meta_value("created") or ""

    def tasks(self) -> list[tuple[int, str]]:
        """The held-out tasks: (seed, level id of the original env), in order."""
        rows = self.db.execute("SELECT idx, seed, level_id, checksum FROM tasks ORDER BY idx").fetchall()
        return [(int(seed), str(level)) for _, seed, level in (self._checked("tasks", row) for row in rows)]

    def releases(self) -> list[dict[str, Any]]:
        """Every release in the order they were recorded: name, cell key, when."""
        rows = self.db.execute("SELECT seq, name, cell, created, checksum FROM releases ORDER BY seq").fetchall()
        return [{"seq": s, "name": n, "cell": c, "created": t} for s, n, c, t in (self._checked("releases", row) for row in rows)]

    def release(self, name: str) -> dict[str, Any]:
        found = next((r for r in self.releases() if r["name"] == name), None)
        if found is None:
            known = ", ".join(r["name"] for r in self.releases()) or "none yet"
            raise LedgerError(f"release {name!r} is not in {self.path} (releases: {known}); evaluate it with `envrigger ledger eval`")
        return found

    def cell(self, key: str) -> tuple[Cell, str] | None:
        """The cell with ``key`` and its run directory, if it was evaluated."""
        row = self.db.execute("SELECT key, cell_json, evaluated, run, checksum FROM cells WHERE key=?", (key,)).fetchone()
        if row is None:
            return None
        _, cell_json, _, run = self._checked("cells", row)
        return Cell.model_validate_json(cell_json), str(run)

    def stored_cell(self, key: str) -> tuple[Cell, str]:
        """:meth:`cell` for a key a release names: it must be there."""
        found = self.cell(key)
        if found is None:
            raise LedgerError(f"{self.path}: a release names cell {key}, which is not stored; restore the ledger from a copy")
        return found

    def results(self, key: str) -> list[TaskResult]:
        rows = self.db.execute("SELECT cell, idx, result_json, checksum FROM results WHERE cell=? ORDER BY idx", (key,)).fetchall()
        return [TaskResult(**json.loads(result)) for _, _, result in (self._checked("results", row) for row in rows)]

    # -- writing -----------------------------------------------------------------------
    def add_cell(self, cell: Cell, results: list[TaskResult], run: str, release: str | None = None) -> None:
        """Store an evaluated cell with one result per task (and name it ``release``), in one transaction."""
        if len(results) != len(self.tasks()):
            raise LedgerError(f"{len(results)} results for {len(self.tasks())} tasks; a cell is stored whole or not at all")
        secret = cell.model.secret_problem()
        if secret is not None:  # a key never goes into the ledger (nor into this error)
            raise LedgerError(secret)
        key, cell_json, when = cell.key(), cell.model_dump_json(), _now()
        with self._transaction():
            if self.db.execute("SELECT 1 FROM cells WHERE key=?", (key,)).fetchone() is None:
                self.db.execute("INSERT INTO cells VALUES (?, ?, ?, ?, ?)", (key, cell_json, when, run, _sum(key, cell_json, when, run)))
                for idx, result in enumerate(results):
                    data = json.dumps(asdict(result), sort_keys=True)
                    self.db.execute("INSERT INTO results VALUES (?, ?, ?, ?)", (key, idx, data, _sum(key, idx, data)))
            if release is not None:
                self._name(release, key, when)
        self._record_commit()

    def name_release(self, release: str, key: str) -> None:
        """Name an already evaluated cell ``release``."""
        with self._transaction():
            self._name(release, key, _now())
        self._record_commit()

    def _name(self, release: str, key: str, when: str) -> None:
        if self.db.execute("SELECT 1 FROM releases WHERE name=?", (release,)).fetchone() is not None:
            raise LedgerError(f"release {release!r} is already in {self.path}; a release is evaluated once: give the new one another name")
        seq = int(self.db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM releases").fetchone()[0])
        self.db.execute("INSERT INTO releases VALUES (?, ?, ?, ?, ?)", (seq, release, key, when, _sum(seq, release, key, when)))


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
