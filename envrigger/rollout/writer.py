"""The ordered writer: finished episodes, from any backend, committed to the store in episode order."""

from __future__ import annotations

import threading
import time
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
    """Buffers finished episodes and commits them to the store in episode order, as a part.

    A part is committed once ``flush_steps`` steps are ready, or once the oldest episode
    ready has waited ``flush_seconds`` (a thread of its own watches the clock, so an LLM
    agent's episode is on disk within seconds even while the next one takes minutes).
    Steps arrive as records (serial) or as an Arrow table in ``STEP_SCHEMA`` (from workers).
    :meth:`close` ends the watch; ``committed`` counts the episodes this writer stored.
    """

    def __init__(
        self,
        store: TrajectoryStore,
        first_id: int,
        flush_steps: int,
        on_episode: Callable[..., Any] | None,
        flush_seconds: float | None = None,
    ) -> None:
        self.store, self.next_id, self.flush_steps, self.on_episode = store, first_id, flush_steps, on_episode
        self.flush_seconds = flush_seconds
        self.done: dict[int, tuple[EpisodeRecord, list[StepRecord] | pa.Table]] = {}
        self.batch: list[tuple[EpisodeRecord, list[StepRecord] | pa.Table]] = []
        self.batch_steps = 0
        self.committed = 0
        self._ready_since = 0.0  # when the oldest episode in the batch became ready (monotonic)
        self._lock = threading.Lock()  # the watch and the caller's thread commit one at a time
        self._closed = threading.Event()
        self._failure: BaseException | None = None  # a commit the watch could not make: raised in the caller's thread
        self._watch: threading.Thread | None = None
        if flush_seconds is not None:
            self._watch = threading.Thread(target=self._watch_clock, name="envrigger-writer-clock", daemon=True)
            self._watch.start()

    def __call__(self, episode: EpisodeRecord, steps: list[StepRecord] | pa.Table) -> None:
        if self._failure is not None:
            raise self._failure
        with self._lock:
            self.done[episode.episode_id] = (episode, steps)
            while self.next_id in self.done:
                item = self.done.pop(self.next_id)
                if not self.batch:
                    self._ready_since = time.monotonic()
                self.batch.append(item)
                self.batch_steps += len(item[1])
                self.next_id += 1
            if self.on_episode is not None:
                self.on_episode(episode)
            if self.batch_steps >= self.flush_steps or self._overdue():
                self._commit()

    def flush(self, everything: bool = False) -> None:
        """Commit the episodes ready in order; ``everything`` (on a stop) also those finished after a gap."""
        with self._lock:
            if everything and self.done:
                self.batch += [self.done.pop(i) for i in sorted(self.done)]  # their ids leave a gap: the episodes never run
            if everything and self.batch:
                # A stop may have landed after a commit and before the batch was cleared: what is stored is not stored again.
                self.store.refresh()
                stored = self.store.episode_ids()
                kept = [item for item in self.batch if item[0].episode_id not in stored]
                self.committed += len(self.batch) - len(kept)
                self.batch = kept
            self._commit()

    def close(self) -> None:
        """Stop watching the clock (the buffered episodes stay buffered: :meth:`flush` first)."""
        self._closed.set()
        if self._watch is not None and self._watch is not threading.current_thread():
            self._watch.join()

    def _overdue(self) -> bool:
        return self.flush_seconds is not None and bool(self.batch) and time.monotonic() - self._ready_since >= self.flush_seconds

    def _commit(self) -> None:
        if self.batch:
            records = [s for _, steps in self.batch if not isinstance(steps, pa.Table) for s in steps]
            tables = [steps for _, steps in self.batch if isinstance(steps, pa.Table)]
            self.store.append_tables(episodes_table([e for e, _ in self.batch]), pa.concat_tables([steps_table(records), *tables]))
            self.committed += len(self.batch)
            self.batch, self.batch_steps = [], 0

    def _watch_clock(self) -> None:
        assert self.flush_seconds is not None
        while not self._closed.wait(min(1.0, max(self.flush_seconds / 4, 0.05))):
            with self._lock:
                if self._overdue():
                    try:
                        self._commit()
                    except BaseException as failure:  # noqa: BLE001 - disk full, say: the caller's thread raises it, with the batch kept
                        self._failure = failure
                        return
