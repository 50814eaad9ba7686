"""What a run is on disk: trajectory records, the Parquet store, and the formats they move in and out by.

- :mod:`~envrigger.data.records`: :class:`EpisodeRecord`, :class:`StepRecord`, their Arrow
  schemas, and how observations are stored (digests, inline JSON).
- :mod:`~envrigger.data.store`: :class:`TrajectoryStore` (a crash-safe run directory),
  :class:`DirectoryLock`, :class:`TrajectoryError`.
- :mod:`~envrigger.data.jsonl`: JSONL from any agent harness, in and out.
- :mod:`~envrigger.data.minari`: Minari datasets in and out (extra ``minari``).
"""

from envrigger.data.jsonl import JsonlEpisode, JsonlStep, export_jsonl, import_jsonl
from envrigger.data.minari import export_minari, import_minari
from envrigger.data.records import (
    COST_FIELDS,
    EPISODE_SCHEMA,
    STEP_SCHEMA,
    STORE_OBS,
    EpisodeRecord,
    StepRecord,
    add_calls,
    dumps,
    episodes_table,
    inline_observation,
    observation_digest,
    steps_table,
    sum_calls,
    to_jsonable,
)
from envrigger.data.store import DirectoryLock, TrajectoryStore, write_json_atomically
from envrigger.errors import TrajectoryError

__all__ = [
    "COST_FIELDS",
    "EPISODE_SCHEMA",
    "STEP_SCHEMA",
    "STORE_OBS",
    "DirectoryLock",
    "EpisodeRecord",
    "JsonlEpisode",
    "JsonlStep",
    "StepRecord",
    "add_calls",
    "sum_calls",
    "TrajectoryError",
    "TrajectoryStore",
    "dumps",
    "episodes_table",
    "export_jsonl",
    "export_minari",
    "import_jsonl",
    "import_minari",
    "inline_observation",
    "observation_digest",
    "steps_table",
    "to_jsonable",
    "write_json_atomically",
]
