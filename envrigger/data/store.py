"""The trajectory store: the Parquet run directory that holds a run's episodes and steps.

Contains :class:`TrajectoryStore`, :class:`DirectoryLock`, :class:`TrajectoryError` and
:func:`write_json_atomically`. The records it holds are in :mod:`envrigger.data.records`.

A run directory holds ``run.json`` (metadata), numbered *parts* (``steps/part-N.parquet``
and ``episodes/part-N.parquet``) and ``manifest.json``, which lists every committed part
with its row counts, sizes and SHA-256 checksums. A part is written to temporary files,
synced and renamed into place, then the manifest is replaced atomically: a part counts
only once the manifest names it, so a writer killed at any point leaves the run readable
with every committed episode whole, and readers never see half an episode. A writer never
writes through a symbolic link or into a FIFO planted in the run (its lock, manifest, part
folders: :mod:`envharness.files`), refused in one line naming it. Opening a run
checks that every listed part is there with its size; reading a part checks its checksum;
a missing, truncated or altered part is an error naming the file (``envrigger verify``
checks them all, and any hash-chained log the run holds, ``calls.jsonl``). A manifest entry
out of shape (a name that is not ``part-NNNNNN.parquet``, a count or checksum missing) is
refused as a damaged manifest. A damaged part never stops later recording: each part's
episode-id range is in the manifest, so appends go on with fresh ids (the damage is still
reported on reading and by verify). One writer at a time: :class:`DirectoryLock`.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from envharness.files import check_inside, open_inside, write_file_atomically, write_text_atomically
from envharness.reading import json_kind, read_json
from envrigger.data.records import EPISODE_SCHEMA, STEP_SCHEMA, EpisodeRecord, StepRecord, episodes_table, steps_table
from envrigger.errors import TrajectoryError as TrajectoryError  # its home is envrigger.errors; documented here since issue 26

SCHEMA_VERSION = 1


class DirectoryLock:
    """An exclusive lock on a directory for one writer at a time, held for as long as it writes.

    It is a ``flock`` on ``DIR/.writer.lock``; the kernel releases it when the holder exits,
    however it dies, so a lock left behind by a killed process is never stale. The holder
    writes its pid, host and start time into the file, for the message a refused writer gets.
    (``flock`` is advisory and local: on a network filesystem shared by several hosts it
    does not exclude writers on other hosts.)

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with DirectoryLock(folder):
        ...     try:
        ...         DirectoryLock(folder).acquire()
        ...     except TrajectoryError as refused:
        ...         print("refused:", "is being written by pid" in str(refused))
        refused: True
        >>> DirectoryLock(folder).acquire().release()  # free again once the holder let go
    """

    NAME = ".writer.lock"

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.fd: int | None = None

    def acquire(self) -> DirectoryLock:
        fd = open_inside(self.directory / self.NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            try:
                who = json.loads(holder)
                named = f"pid {who['pid']} on {who['host']} (since {who['since']})"
            except (ValueError, KeyError, TypeError):
                named = "another process"
            raise TrajectoryError(
                f"{self.directory} is being written by {named}; wait for it to finish, or write to another directory"
            ) from None
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


ADDED_EPISODE_COLUMNS = ("search_steps",)  # added to EPISODE_SCHEMA after schema 1: a part written before reads them as null


def _conformed(table: pa.Table, columns: list[str] | None) -> pa.Table:
    """An episodes part as today's :data:`EPISODE_SCHEMA` has it (a column added since, null), cut to ``columns``."""
    for name in ADDED_EPISODE_COLUMNS:
        if name not in table.column_names:
            added = EPISODE_SCHEMA.field(name)
            table = table.append_column(added, pa.nulls(table.num_rows, added.type))
    if columns is None:
        return table
    missing = [name for name in columns if name not in table.column_names]
    if missing:
        raise pa.ArrowInvalid(f"no column {missing[0]!r}")
    return table.select(columns)


def _corrupt(path: Path, error: Exception) -> TrajectoryError:
    return TrajectoryError(f"{path}: corrupt Parquet file ({str(error).splitlines()[0]}); remove that part or collect again")


MANIFEST = "manifest.json"
PART_NAME = re.compile(r"part-[0-9]{6}\.parquet")
SHA256 = re.compile(r"[0-9a-f]{64}")
CHAINED_LOGS = {"calls.jsonl": "call"}  # hash-chained logs a run directory may hold (the live proxy's model calls), checked by verify


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _part_problem(part: Any) -> str | None:
    """What is wrong with one manifest entry, or None: a part is named part-NNNNNN.parquet, with counts, sizes and checksums."""
    if not isinstance(part, dict):
        return "is not an object"
    if not isinstance(part.get("name"), str) or not PART_NAME.fullmatch(part["name"]):
        return "has no part-NNNNNN.parquet name"
    for kind in ("episodes", "steps"):
        if not _count(part.get(kind)) or not _count(part.get(f"{kind}_bytes")):
            return f"has no whole-number {kind} count or size"
        if not isinstance(part.get(f"{kind}_sha256"), str) or not SHA256.fullmatch(part[f"{kind}_sha256"]):
            return f"has no {kind} checksum"
    if ("first_id" in part) != ("last_id" in part) or any(k in part and type(part[k]) is not int for k in ("first_id", "last_id")):
        return "has a broken episode-id range"
    return None


def write_json_atomically(value: Any, path: Path) -> None:
    """Write ``value`` as JSON so that readers see the old file or the new one, synced to disk (:mod:`envharness.files`)."""
    write_text_atomically(path, json.dumps(value, indent=1), mode=0o644)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class TrajectoryStore:
    """A run directory of episodes and steps in Parquet, appended atomically, read as a stream.

    Example:
        >>> import tempfile
        >>> store = TrajectoryStore.create(tempfile.mkdtemp() + "/run", meta={"note": "demo"})
        >>> episode = EpisodeRecord(episode_id=0, spec_hash="ab", seed=0, policy_id="p", length=1,
        ...                         return_=0.0, success=False, score=0.0, reason="timeout")
        >>> step = StepRecord(episode_id=0, t=0, action="1", reward=0.0, terminated=False,
        ...                   truncated=True, obs_digest="00")
        >>> store.append([episode], [step])
        >>> len(store), [e.reason for e in store.iter_episodes()]
        (1, ['timeout'])
        >>> [(e.episode_id, len(steps)) for e, steps in store.iter_episode_steps()]
        [(0, 1)]
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        meta_path = self.path / "run.json"
        if not self.path.is_dir():
            raise TrajectoryError(f"run directory {self.path} does not exist; collect one with `envrigger collect`")
        if not meta_path.exists():
            raise TrajectoryError(f"{self.path} is not a run directory (no run.json); point at a directory `envrigger collect` wrote")
        self.meta = read_json(meta_path, dict, fix="restore it or collect the run again", error=TrajectoryError)
        self._writer: DirectoryLock | None = None
        self._part_ids: dict[tuple[str, str], frozenset[int]] = {}
        self.manifest = self._load_manifest()
        version = self.meta.get("schema_version")
        if version != SCHEMA_VERSION:
            raise TrajectoryError(
                f"{meta_path}: schema_version {version!r} is not {SCHEMA_VERSION}; convert the run with this version of envrigger"
            )

    @classmethod
    def create(cls, path: str | Path, meta: dict[str, Any] | None = None, exist_ok: bool = False) -> TrajectoryStore:
        """Make a new run directory (or open an existing one with ``exist_ok``)."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise TrajectoryError(f"{path} is a file, not a run directory; choose a directory path")
        if (path / "run.json").exists():
            if not exist_ok:
                raise TrajectoryError(f"{path} already holds a run; choose a new directory or append to it")
            return cls(path)
        if path.exists() and any(path.iterdir()):
            raise TrajectoryError(f"{path} exists and is not an empty run directory; choose a new directory")
        for sub in ("episodes", "steps"):
            (path / sub).mkdir(parents=True, exist_ok=True)
        record = {"schema_version": SCHEMA_VERSION, "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **(meta or {})}
        write_json_atomically({"parts": []}, path / MANIFEST)
        write_json_atomically(record, path / "run.json")
        return cls(path)

    # -- the manifest --------------------------------------------------------------------
    def _load_manifest(self) -> dict[str, Any] | None:
        """The committed parts, checked against the files (sizes); None for a run written before manifests."""
        path = self.path / MANIFEST
        if not path.exists():
            return None
        manifest: dict[str, Any] = read_json(path, dict, fix="restore it from a copy, or collect the run again", error=TrajectoryError)
        parts = manifest.get("parts")
        if not isinstance(parts, list):
            raise TrajectoryError(
                f"{path}: damaged (its parts are {json_kind(parts)}, not a list); restore it from a copy, or collect the run again"
            )
        for number, part in enumerate(parts):
            problem = _part_problem(part)
            if problem is None and any(p.get("name") == part["name"] for p in parts[:number]):
                problem = f"names {part['name']} twice"
            if problem is not None:  # never a path outside the run, nor a raw KeyError later
                raise TrajectoryError(f"{path}: damaged (its part {number} {problem}); restore it from a copy, or collect the run again")
        for part in parts:
            for kind in ("episodes", "steps"):
                file = self.path / kind / part["name"]
                if not file.is_file():
                    raise TrajectoryError(
                        f"{file}: missing ({part[kind]} {kind} committed); restore it from a copy, or collect the run again"
                    )
                size = file.stat().st_size
                if size != part[f"{kind}_bytes"]:
                    raise TrajectoryError(
                        f"{file}: {size} bytes where {part[f'{kind}_bytes']} were committed (truncated or altered); "
                        "restore it from a copy, or collect the run again"
                    )
        return manifest

    def _part_names(self) -> list[str]:
        if self.manifest is not None:
            return [part["name"] for part in self.manifest["parts"]]
        return sorted(p.name for p in (self.path / "episodes").glob("part-*.parquet"))

    def _part(self, name: str) -> dict[str, Any] | None:
        if self.manifest is None:
            return None
        found: dict[str, Any] = next(part for part in self.manifest["parts"] if part["name"] == name)
        return found

    def verify(self) -> list[str]:
        """Check every committed part's checksum; the problems found, one line each (empty: all good)."""
        problems = []
        for name in self._part_names():
            part = self._part(name)
            for kind in ("episodes", "steps"):
                file = self.path / kind / name
                try:
                    if part is None:
                        pq.ParquetFile(file).metadata  # noqa: B018 - a run without a manifest: the footer must parse
                    elif _sha256(file) != part[f"{kind}_sha256"]:
                        problems.append(f"{file}: checksum differs from the committed one (altered); restore it from a copy")
                except (OSError, pa.ArrowInvalid) as error:
                    problems.append(f"{file}: unreadable ({str(error).splitlines()[0]}); restore it from a copy")
        from envrigger.data.chain import ChainedLog

        for name, key in CHAINED_LOGS.items():
            log = self.path / name
            if log.is_file():
                problems += [f"{log}: {problem}; restore the file from a copy" for problem in ChainedLog(log, key).scan()[1]]
        return problems

    # -- writing -----------------------------------------------------------------------
    @contextmanager
    def writing(self) -> Iterator[TrajectoryStore]:
        """Hold the run's writer lock (:class:`DirectoryLock`) for a whole collection."""
        if self._writer is not None:
            yield self
            return
        with DirectoryLock(self.path) as lock:
            # A run from someone else: its part folders and manifest are written below, never through a planted link.
            for sub in ("episodes", "steps"):
                check_inside(self.path / sub, self.path, folder=True)
            check_inside(self.path / MANIFEST, self.path)
            self._writer = lock
            try:
                yield self
            finally:
                self._writer = None

    def append(self, episodes: list[EpisodeRecord], steps: list[StepRecord]) -> None:
        """Commit episodes and their steps as one new part (all or nothing)."""
        if not episodes:
            return
        self.append_tables(episodes_table(episodes), steps_table(steps))

    def append_tables(self, episodes: pa.Table, steps: pa.Table) -> None:
        """:meth:`append` for Arrow tables in the two schemas (bulk writers); steps grouped by episode."""
        if episodes.schema != EPISODE_SCHEMA or steps.schema != STEP_SCHEMA:
            raise TrajectoryError("append: tables do not match EPISODE_SCHEMA / STEP_SCHEMA; build them with those schemas")
        ids = set(episodes.column("episode_id").to_pylist())
        stray = set(pc.unique(steps.column("episode_id")).to_pylist()) - ids
        if stray:
            raise TrajectoryError(f"append: steps name episodes {sorted(stray)[:3]} not in this batch; append steps with their episodes")
        with self.writing():
            self.manifest = self._load_manifest()  # as committed now, under the lock
            committed = set(self._part_names())
            for sub in ("episodes", "steps"):  # leftovers of writers killed mid-write: temp files, parts never committed
                for stale in (self.path / sub).glob(".*.tmp"):
                    stale.unlink(missing_ok=True)
                if self.manifest is not None:
                    for orphan in (self.path / sub).glob("part-*.parquet"):
                        if orphan.name not in committed:
                            orphan.unlink(missing_ok=True)
            clash = ids & self.episode_ids()
            if clash:
                raise TrajectoryError(f"append: episode ids {sorted(clash)[:3]} are already stored; use store.next_episode_id()")
            names = self._part_names()
            number = int(names[-1][5:11]) + 1 if names else 0
            name = f"part-{number:06d}.parquet"
            steps_part, episodes_part = self.path / "steps" / name, self.path / "episodes" / name
            write_file_atomically(steps_part, lambda tmp: pq.write_table(steps, tmp, compression="zstd"), mode=0o644, within=self.path)
            write_file_atomically(
                episodes_part, lambda tmp: pq.write_table(episodes, tmp, compression="zstd"), mode=0o644, within=self.path
            )
            if self.manifest is not None:
                part = {"name": name, "episodes": episodes.num_rows, "steps": steps.num_rows}
                # The part's id range, kept in the manifest: ids are never handed out twice even once the part is damaged.
                part["first_id"], part["last_id"] = min(ids), max(ids)
                for kind in ("episodes", "steps"):
                    file = self.path / kind / name
                    part[f"{kind}_bytes"], part[f"{kind}_sha256"] = file.stat().st_size, _sha256(file)
                manifest = {"parts": [*self.manifest["parts"], part]}
                write_json_atomically(manifest, self.path / MANIFEST)  # the commit point
                self.manifest = manifest

    # -- reading -----------------------------------------------------------------------
    def _bytes(self, path: Path) -> pa.BufferReader:
        """A committed part file's bytes, checked against the manifest's checksum."""
        try:
            # Arrow's own memory, not a Python bytes object: Arrow's worker threads free what
            # they read from it, and freeing a Python object there needs the GIL, which at
            # interpreter exit aborts the process ("terminate called without an active exception").
            with pa.OSFile(str(path)) as file:
                data = file.read_buffer()
        except OSError as error:
            raise _corrupt(path, error) from None
        part = self._part(path.name)
        if part is not None and hashlib.sha256(data).hexdigest() != part[f"{path.parent.name}_sha256"]:
            raise TrajectoryError(
                f"{path}: checksum differs from the committed one (altered); restore it from a copy, or collect the run again"
            )
        return pa.BufferReader(data)

    def _read(self, path: Path, columns: list[str] | None = None) -> pa.Table:
        try:
            data = self._bytes(path)
            if path.parent.name != "episodes" or columns is None:
                table = pq.read_table(data, columns=columns)
                return _conformed(table, None) if path.parent.name == "episodes" else table
            present = set(pq.read_schema(data).names)
            data.seek(0)
            return _conformed(pq.read_table(data, columns=[name for name in columns if name in present]), columns)
        except (pa.ArrowInvalid, OSError) as error:
            raise _corrupt(path, error) from None

    def episodes_table(self, columns: list[str] | None = None) -> pa.Table:
        """All episode records as one Arrow table (one row per episode, small)."""
        tables = [self._read(self.path / "episodes" / n, columns) for n in self._part_names()]
        if not tables:
            schema = EPISODE_SCHEMA if columns is None else pa.schema([EPISODE_SCHEMA.field(c) for c in columns])
            return schema.empty_table()
        return pa.concat_tables(tables)

    def refresh(self) -> None:
        """Re-read the manifest as committed on disk (after an interrupt that may have landed right after a commit)."""
        self.manifest = self._load_manifest()

    def _ids(self, name: str) -> frozenset[int]:
        """A part's episode ids; for a damaged part, every id in the range the manifest committed for it (if it has one)."""
        part = self._part(name)
        # A committed part never changes (its checksum is in the manifest): read its ids once, not at every append.
        key = (name, part["episodes_sha256"]) if part is not None else None
        known = self._part_ids.get(key) if key is not None else None
        if known is None:
            try:
                known = frozenset(self._read(self.path / "episodes" / name, ["episode_id"]).column("episode_id").to_pylist())
            except TrajectoryError:
                if part is None or "first_id" not in part:
                    raise
                return frozenset(range(part["first_id"], part["last_id"] + 1))  # damaged: its ids are never handed out again
            if key is not None:
                self._part_ids[key] = known
        return known

    def episode_ids(self) -> set[int]:
        """Every stored episode id (a damaged part counts with its whole committed id range, so none is reused)."""
        ids: set[int] = set()
        for name in self._part_names():
            ids |= self._ids(name)
        return ids

    def next_episode_id(self) -> int:
        """The id the next appended episode should take (above every committed part's, damaged or not)."""
        top = -1
        for name in self._part_names():
            part = self._part(name)
            if part is not None and "last_id" in part:
                top = max(top, int(part["last_id"]))  # from the manifest: no part is read
            else:
                top = max([top, *self._ids(name)])
        return top + 1

    def __len__(self) -> int:
        if self.manifest is not None:
            return sum(int(part["episodes"]) for part in self.manifest["parts"])
        return sum(pq.ParquetFile(self.path / "episodes" / n).metadata.num_rows for n in self._part_names())

    def iter_episodes(self) -> Iterator[EpisodeRecord]:
        """Episode records, part by part, in commit order."""
        for name in self._part_names():
            for row in self._read(self.path / "episodes" / name).to_pylist():
                yield EpisodeRecord.from_row(row)

    def iter_step_batches(self, columns: list[str] | None = None, batch_size: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Committed steps as Arrow record batches, never more than one batch in memory."""
        for name in self._part_names():
            path = self.path / "steps" / name
            try:
                parquet = pq.ParquetFile(self._bytes(path))
                yield from parquet.iter_batches(batch_size=batch_size, columns=columns)
            except (pa.ArrowInvalid, OSError) as error:
                raise _corrupt(path, error) from None

    def iter_episode_steps(self) -> Iterator[tuple[EpisodeRecord, list[StepRecord]]]:
        """Each committed episode with its steps; holds one part's steps at a time."""
        for name in self._part_names():
            episodes = [EpisodeRecord.from_row(r) for r in self._read(self.path / "episodes" / name).to_pylist()]
            steps: dict[int, list[StepRecord]] = {e.episode_id: [] for e in episodes}
            for row in self._read(self.path / "steps" / name).to_pylist():
                steps[row["episode_id"]].append(StepRecord.from_row(row))
            for episode in episodes:
                yield episode, steps[episode.episode_id]
