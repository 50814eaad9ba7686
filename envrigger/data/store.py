"""Trajectories: episode and step records, and the Parquet store a run directory holds.

Contains :class:`EpisodeRecord`, :class:`StepRecord`, the Arrow schemas
:data:`EPISODE_SCHEMA` and :data:`STEP_SCHEMA`, :func:`observation_digest`,
:class:`TrajectoryStore` and :class:`TrajectoryError`.

A run directory holds ``run.json`` (metadata), numbered *parts* (``steps/part-N.parquet``
and ``episodes/part-N.parquet``) and ``manifest.json``, which lists every committed part
with its row counts, sizes and SHA-256 checksums. A part is written to temporary files,
synced and renamed into place, then the manifest is replaced atomically: a part counts
only once the manifest names it, so a writer killed at any point leaves the run readable
with every committed episode whole, and readers never see half an episode. Opening a run
checks that every listed part is there with its size; reading a part checks its checksum;
a missing, truncated or altered part is an error naming the file (``envrigger verify``
checks them all). One writer at a time: :class:`DirectoryLock`.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from envharness.errors import EnvHarnessError

SCHEMA_VERSION = 1
OBS_INLINE_LIMIT = 512  # observations whose JSON is at most this long are stored whole
OBS_INLINE_NUMBERS = 64  # ... and, by default, that hold at most this many numbers (an image's JSON costs more than its step)
STORE_OBS = ("small", "fit", "none")
COST_FIELDS = ("tokens", "model_calls", "tool_errors", "retries", "human_interventions")


class TrajectoryError(EnvHarnessError):
    """A run directory, trajectory file or record is missing or malformed."""


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
        fd = os.open(self.directory / self.NAME, os.O_RDWR | os.O_CREAT, 0o644)
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


EPISODE_SCHEMA = pa.schema(
    [
        ("episode_id", pa.int64()),
        ("spec_hash", pa.string()),
        ("spec_json", pa.string()),
        ("seed", pa.int64()),
        ("policy_id", pa.string()),
        ("length", pa.int64()),
        ("return", pa.float64()),
        ("success", pa.bool_()),
        ("score", pa.float64()),
        ("reason", pa.string()),
        ("terminal_cause", pa.string()),
        ("level_features", pa.map_(pa.string(), pa.float64())),
        ("level_id", pa.string()),
        ("error", pa.string()),
        ("wall_time", pa.float64()),
        *((name, pa.int64()) for name in COST_FIELDS),
    ]
)

STEP_SCHEMA = pa.schema(
    [
        ("episode_id", pa.int64()),
        ("t", pa.int64()),
        ("action", pa.string()),
        ("reward", pa.float64()),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("blocked", pa.string()),
        ("obs_digest", pa.string()),
        ("obs", pa.string()),
        ("position", pa.string()),
        ("info", pa.string()),
    ]
)


def to_jsonable(value: Any) -> Any:
    """Plain JSON data for observations, actions and info values (arrays become lists)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON of :func:`to_jsonable` data.

    Recording calls this for every step's observation, action and position, so the common
    cases (ints, finite floats, strings, numeric arrays, dicts and lists of them) take a fast
    path that gives exactly the text ``json.dumps`` would.

    Example:
        >>> import numpy as np
        >>> dumps({"b": np.arange(3, dtype=np.uint8), "a": (1, 2.5, "x")})
        '{"a":[1,2.5,"x"],"b":[0,1,2]}'
    """
    fast = _fast_json(value)
    return fast if fast is not None else json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":"))


def inline_observation(obs: Any, store: str = "small") -> str | None:
    """The observation's JSON where the ``store`` policy keeps it whole, else None (its digest is always kept).

    ``small`` (the default): at most :data:`OBS_INLINE_NUMBERS` numbers and
    :data:`OBS_INLINE_LIMIT` characters of JSON, so CartPole's state and FrozenLake's tile
    are kept, a MiniGrid image is not; ``fit``: any observation whose JSON fits the
    character limit; ``none``: digests only. Whatever is not kept is recovered exactly by
    replaying the episode from its spec, seed and actions (as ``envrigger export`` does).

    Example:
        >>> import numpy as np
        >>> inline_observation(np.array([0.5, -1.0])), inline_observation(np.zeros((7, 7, 3), dtype=np.uint8)) is None
        ('[0.5,-1.0]', True)
    """
    if store == "none" or (store == "small" and _numbers(obs, OBS_INLINE_NUMBERS) > OBS_INLINE_NUMBERS):
        return None
    text = dumps(obs)
    return text if len(text) <= OBS_INLINE_LIMIT else None


def _numbers(obs: Any, budget: int) -> int:
    """How many scalars ``obs`` holds, counted until more than ``budget``."""
    if isinstance(obs, np.ndarray):
        return int(obs.size)
    if isinstance(obs, (dict, list, tuple)):
        total = 0
        for item in obs.values() if isinstance(obs, dict) else obs:
            total += _numbers(item, budget - total)
            if total > budget:
                break
        return total
    return 1


_ARRAY_TEMPLATES: dict[tuple[int, ...], str] = {}


def _array_template(shape: tuple[int, ...]) -> str:
    """``%s`` placeholders in JSON nesting for an array of ``shape``: ``(2, 2)`` -> ``[[%s,%s],[%s,%s]]``."""
    template = _ARRAY_TEMPLATES.get(shape)
    if template is None:
        template = "%s"
        for size in reversed(shape):
            template = "[" + ",".join([template] * size) + "]"
        if len(_ARRAY_TEMPLATES) < 256:
            _ARRAY_TEMPLATES[shape] = template
    return template


def _fast_json(value: Any) -> str | None:
    """JSON text identical to the general path's, or None where only the general path is sure to be right."""
    kind = type(value)
    if kind is int or kind is str:
        return str(value) if kind is int else json.dumps(value)
    if kind is float or isinstance(value, np.floating):
        number = float(value)
        return repr(number) if number - number == 0.0 else None  # NaN and infinities are spelled NaN, Infinity
    if isinstance(value, np.integer):
        return str(int(value))
    if kind is np.ndarray:
        if value.dtype.kind not in "iuf" or 0 in value.shape or value.size > 4096:
            return None
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return None
        if not value.ndim:
            return _fast_json(value.item())
        flat = value.ravel().tolist()  # Python ints and floats: %s spells them as JSON does
        return _array_template(value.shape) % tuple(flat)
    if kind is dict:
        if not all(type(key) is str for key in value):
            return None
        parts = []
        for key in sorted(value):
            text = _fast_json(value[key])
            if text is None:
                return None
            parts.append(json.dumps(key) + ":" + text)
        return "{" + ",".join(parts) + "}"
    if kind is list or kind is tuple:
        parts = []
        for item in value:
            text = _fast_json(item)
            if text is None:
                return None
            parts.append(text)
        return "[" + ",".join(parts) + "]"
    return None


def observation_digest(obs: Any) -> str:
    """A 16-hex-digit digest of an observation: equal observations, equal digests.

    Example:
        >>> import numpy as np
        >>> observation_digest(np.zeros(3)) == observation_digest(np.zeros(3))
        True
        >>> observation_digest({"a": 1, "b": "x"}) == observation_digest({"b": "x", "a": 1})
        True
    """
    h = hashlib.blake2b(digest_size=8)
    _feed(h, obs)
    return h.hexdigest()


_DTYPE_TEXT: dict[Any, bytes] = {}


def _feed(h: Any, obs: Any) -> None:
    if isinstance(obs, np.ndarray):
        name = _DTYPE_TEXT.get(obs.dtype)
        if name is None:
            name = _DTYPE_TEXT.setdefault(obs.dtype, str(obs.dtype).encode())  # str(dtype) is slow, and per step
        h.update(name + str(obs.shape).encode())
        h.update(np.ascontiguousarray(obs).data)
    elif isinstance(obs, dict):
        for key in sorted(obs):
            h.update(str(key).encode() + b"=")
            _feed(h, obs[key])
    elif isinstance(obs, (list, tuple)):
        for item in obs:
            _feed(h, item)
            h.update(b",")
    else:
        h.update(repr(to_jsonable(obs)).encode())


@dataclass
class EpisodeRecord:
    """One episode's summary. ``reason`` is the final verdict's; ``error`` is set when it crashed.

    Example:
        >>> record = EpisodeRecord(episode_id=0, spec_hash="ab", seed=3, policy_id="random", length=2,
        ...                        return_=1.0, success=True, score=1.0, reason="reached goal")
        >>> record.to_row()["return"], record.failed
        (1.0, False)
    """

    episode_id: int
    spec_hash: str
    seed: int | None
    policy_id: str
    length: int
    return_: float
    success: bool
    score: float
    reason: str
    spec_json: str = ""
    terminal_cause: str | None = None
    level_features: dict[str, float] = field(default_factory=dict)
    level_id: str | None = None
    error: str | None = None
    wall_time: float = 0.0
    tokens: int | None = None
    model_calls: int | None = None
    tool_errors: int | None = None
    retries: int | None = None
    human_interventions: int | None = None

    @property
    def failed(self) -> bool:
        """Whether the episode ended without the verifier's success (errors included)."""
        return not self.success

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["return"] = row.pop("return_")
        row["level_features"] = list(row["level_features"].items())
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> EpisodeRecord:
        row = dict(row)
        row["return_"] = row.pop("return")
        row["level_features"] = dict(row["level_features"] or [])
        return cls(**row)


@dataclass
class StepRecord:
    """One step: action, reward, ends, a digest of what the agent saw (and the observation if small)."""

    episode_id: int
    t: int
    action: str
    reward: float
    terminated: bool
    truncated: bool
    obs_digest: str
    blocked: str | None = None
    obs: str | None = None
    position: str | None = None
    info: str = "{}"

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> StepRecord:
        return cls(**row)


def episodes_table(episodes: list[EpisodeRecord]) -> pa.Table:
    """Episodes as an Arrow table in :data:`EPISODE_SCHEMA`."""
    return pa.Table.from_pylist([e.to_row() for e in episodes], schema=EPISODE_SCHEMA)


def steps_table(steps: list[StepRecord]) -> pa.Table:
    """Steps as an Arrow table in :data:`STEP_SCHEMA`, built column by column (no per-step dict)."""
    return pa.Table.from_arrays(
        [pa.array([getattr(s, name) for s in steps], type=STEP_SCHEMA.field(name).type) for name in STEP_SCHEMA.names],
        schema=STEP_SCHEMA,
    )


def _corrupt(path: Path, error: Exception) -> TrajectoryError:
    return TrajectoryError(f"{path}: corrupt Parquet file ({str(error).splitlines()[0]}); remove that part or collect again")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


MANIFEST = "manifest.json"


def write_json_atomically(value: Any, path: Path) -> None:
    """Write ``value`` as JSON so that readers see the old file or the new one, synced to disk."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(value, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _write_parquet_atomically(table: pa.Table, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd")
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
        if not meta_path.is_file():
            raise TrajectoryError(f"{self.path} is not a run directory (no run.json); point at a directory `envrigger collect` wrote")
        try:
            self.meta = json.loads(meta_path.read_text())
        except json.JSONDecodeError as error:
            raise TrajectoryError(f"{meta_path}: not valid JSON ({error.msg}); restore it or collect the run again") from None
        if not isinstance(self.meta, dict):
            raise TrajectoryError(
                f"{meta_path}: holds a JSON {type(self.meta).__name__}, not an object; restore it or collect the run again"
            )
        self._writer: DirectoryLock | None = None
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
        if (path / "run.json").is_file():
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
        if not path.is_file():
            return None
        try:
            manifest = json.loads(path.read_text())
            parts = manifest["parts"]
            assert isinstance(parts, list) and all(isinstance(p, dict) and isinstance(p["name"], str) for p in parts)
        except (ValueError, KeyError, TypeError, AssertionError):
            raise TrajectoryError(f"{path}: damaged; restore it from a copy, or collect the run again") from None
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
        return next(part for part in self.manifest["parts"] if part["name"] == name)

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
        return problems

    # -- writing -----------------------------------------------------------------------
    @contextmanager
    def writing(self) -> Iterator[TrajectoryStore]:
        """Hold the run's writer lock (:class:`DirectoryLock`) for a whole collection."""
        if self._writer is not None:
            yield self
            return
        with DirectoryLock(self.path) as lock:
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
            _write_parquet_atomically(steps, self.path / "steps" / name)
            _write_parquet_atomically(episodes, self.path / "episodes" / name)
            if self.manifest is not None:
                part = {"name": name, "episodes": episodes.num_rows, "steps": steps.num_rows}
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
            return pq.read_table(self._bytes(path), columns=columns)
        except (pa.ArrowInvalid, OSError) as error:
            raise _corrupt(path, error) from None

    def episodes_table(self, columns: list[str] | None = None) -> pa.Table:
        """All episode records as one Arrow table (one row per episode, small)."""
        tables = [self._read(self.path / "episodes" / n, columns) for n in self._part_names()]
        if not tables:
            schema = EPISODE_SCHEMA if columns is None else pa.schema([EPISODE_SCHEMA.field(c) for c in columns])
            return schema.empty_table()
        return pa.concat_tables(tables)

    def episode_ids(self) -> set[int]:
        return set(self.episodes_table(["episode_id"]).column("episode_id").to_pylist())

    def next_episode_id(self) -> int:
        """The id the next appended episode should take."""
        ids = self.episode_ids()
        return max(ids) + 1 if ids else 0

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
