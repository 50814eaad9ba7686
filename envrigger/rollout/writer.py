"""The ordered writer: finished episodes, from any backend, committed to the store in episode order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from envrigger.data import (
    EpisodeRecord,
    StepRecord,
    TrajectoryStore,
    episodes_table,
    steps_table,
)


# -- front door --------------------------------------------------------------------------
class OrderedWriter:
    """Buffers finished episodes and commits them to the store in episode order.

    Steps arrive as records (serial) or as an Arrow table in ``STEP_SCHEMA`` (from workers).
    """

    def __init__(self, store: TrajectoryStore, first_id: int, flush_steps: int, on_episode: Callable[..., Any] | None) -> None:
        self.store, self.next_id, self.flush_steps, self.on_episode = store, first_id, flush_steps, on_episode
        self.done: dict[int, tuple[EpisodeRecord, list[StepRecord] | pa.Table]] = {}
        self.batch: list[tuple[EpisodeRecord, list[StepRecord] | pa.Table]] = []
        self.batch_steps = 0

    def __call__(self, episode: EpisodeRecord, steps: list[StepRecord] | pa.Table) -> None:
        self.done[episode.episode_id] = (episode, steps)
        while self.next_id in self.done:
            item = self.done.pop(self.next_id)
            self.batch.append(item)
            self.batch_steps += len(item[1])
            self.next_id += 1
        if self.on_episode is not None:
            self.on_episode(episode)
        if self.batch_steps >= self.flush_steps:
            self.flush()

    def flush(self, everything: bool = False) -> None:
        """Commit the episodes ready in order; ``everything`` (on Ctrl-C) also those finished after a gap."""
        if everything and self.done:
            self.batch += [self.done.pop(i) for i in sorted(self.done)]  # their ids leave a gap: the episodes never run
        if everything and self.batch:
            # A Ctrl-C may have landed after a commit and before the batch was cleared: what is stored is not stored again.
            self.store.refresh()
            stored = self.store.episode_ids()
            self.batch = [item for item in self.batch if item[0].episode_id not in stored]
        if self.batch:
            records = [s for _, steps in self.batch if not isinstance(steps, pa.Table) for s in steps]
            tables = [steps for _, steps in self.batch if isinstance(steps, pa.Table)]
            self.store.append_tables(episodes_table([e for e, _ in self.batch]), pa.concat_tables([steps_table(records), *tables]))
            self.batch, self.batch_steps = [], 0
