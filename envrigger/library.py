"""The library: admitted environments with their provenance, versioned, in SQLite.

Contains :class:`Component` and :class:`Library`. The database runs in WAL mode and every
change is one transaction, so a process killed at any point leaves it consistent; the
library version increases with each admission or removal.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from envharness.spec import HarnessSpec
from envrigger.trajectory import TrajectoryError

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
    library_version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rounds (
    round INTEGER PRIMARY KEY,
    summary_json TEXT NOT NULL,
    completed TEXT NOT NULL
);
"""


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

    def __init__(self, path: str | Path, create: bool = True) -> None:
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise TrajectoryError(f"library {self.path} does not exist; run `envrigger run` to build one")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            with self._transaction():
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        self.db.execute(statement)
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('version', '0')")
        except sqlite3.DatabaseError as error:
            raise TrajectoryError(f"{self.path}: not a library database ({error}); point at a library.db written by envrigger") from None

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
            cursor = self.db.execute(
                "INSERT INTO components (hash, spec_json, finding, finding_json, rationale, origin, parent, gates_json, "
                "seeds_json, agent_id, round, created, library_version) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
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
                ),
            )
            self.db.execute("UPDATE meta SET value=? WHERE key='version'", (str(version),))
            return int(cursor.lastrowid)

    def remove(self, component_id: int) -> None:
        """Delete a component; the library version moves on."""
        with self._transaction():
            if self.db.execute("DELETE FROM components WHERE id=?", (component_id,)).rowcount == 0:
                raise TrajectoryError(f"library: no component with id {component_id}; see `envrigger library list`")
            self.db.execute("UPDATE meta SET value=CAST(value AS INTEGER) + 1 WHERE key='version'")

    def _component(self, row: tuple) -> Component:
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
        ) = row
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
            raise TrajectoryError(f"library: no component {key!r}; see `envrigger library list`")
        return self._component(row)

    # -- loop rounds -------------------------------------------------------------------
    def complete_round(self, number: int, summary: dict[str, Any]) -> None:
        with self._transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO rounds VALUES (?,?,?)",
                (number, json.dumps(summary), dt.datetime.now(dt.UTC).isoformat(timespec="seconds")),
            )

    def rounds(self) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in self.db.execute("SELECT summary_json FROM rounds ORDER BY round")]

    def close(self) -> None:
        self.db.close()
