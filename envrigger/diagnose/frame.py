"""What the episode-level detectors read: :class:`EpisodeFrame`, a run's episodes table as numpy columns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from envrigger.data import TrajectoryStore


@dataclass
class EpisodeFrame:
    """The episodes table as numpy columns, sorted by episode id."""

    episode_id: np.ndarray
    seed: np.ndarray
    spec_hash: np.ndarray
    policy_id: np.ndarray
    length: np.ndarray
    ret: np.ndarray
    success: np.ndarray
    reason: np.ndarray
    terminal_cause: np.ndarray
    tool_errors: np.ndarray
    retries: np.ndarray
    level_id: np.ndarray
    features: dict[str, np.ndarray] = field(default_factory=dict)
    # An LLM agent's model calls per episode (-1 where the run has none).
    model_calls: np.ndarray | None = None
    parse_failures: np.ndarray | None = None
    truncated_steps: np.ndarray | None = None
    output_tokens: np.ndarray | None = None
    latency_s: np.ndarray | None = None
    # How episodes ended, in the adapter's terms (-1 / False where the run does not say).
    step_limit: np.ndarray | None = None
    agent_ended: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.episode_id)

    @classmethod
    def load(cls, store: TrajectoryStore) -> EpisodeFrame:
        table = store.episodes_table()
        table = table.sort_by("episode_id")
        col = lambda name: table.column(name).to_numpy(zero_copy_only=False)
        nullable_int = lambda name: np.asarray(table.column(name).fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
        features: dict[str, np.ndarray] = {}
        maps = table.column("level_features").combine_chunks()
        if len(maps) and len(maps.keys):
            keys = maps.keys.to_numpy(zero_copy_only=False)
            values = maps.items.to_numpy(zero_copy_only=False).astype(np.float64)
            offsets = maps.offsets.to_numpy()
            rows = np.repeat(np.arange(len(maps)), np.diff(offsets))
            for name in sorted(set(keys.tolist())):
                column = np.full(len(maps), np.nan)
                hit = keys == name
                column[rows[hit]] = values[hit]
                features[name] = column
        return cls(
            episode_id=col("episode_id"),
            seed=nullable_int("seed"),
            spec_hash=col("spec_hash"),
            policy_id=col("policy_id"),
            length=col("length"),
            ret=col("return"),
            success=col("success").astype(bool),
            reason=col("reason"),
            terminal_cause=col("terminal_cause"),
            tool_errors=nullable_int("tool_errors"),
            retries=nullable_int("retries"),
            level_id=col("level_id"),
            features=features,
            **{
                name: nullable_int(name) if name in table.column_names else np.full(table.num_rows, -1, dtype=np.int64)
                for name in ("model_calls", "parse_failures", "truncated_steps", "output_tokens")
            },
            latency_s=(
                np.asarray(table.column("latency_s").fill_null(np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)
                if "latency_s" in table.column_names
                else np.full(table.num_rows, np.nan)
            ),
            step_limit=nullable_int("step_limit") if "step_limit" in table.column_names else np.full(table.num_rows, -1),
            agent_ended=(
                np.asarray(table.column("agent_ended").fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
                if "agent_ended" in table.column_names
                else np.zeros(table.num_rows, dtype=bool)
            ),
        )
