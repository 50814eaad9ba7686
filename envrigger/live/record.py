"""The run store of a served env: :class:`StoreRecorder`."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from envrigger.data import TrajectoryStore
from envrigger.rollout.episode import episode_record, note_ending, step_record


class StoreRecorder:
    """Commits each finished session's episode to a run directory (crash-safe: one part per episode, in order of ending).

    The server holds the run's writer lock while it runs, so a `collect` into the same
    directory is refused, as with two collections. The policy id is ``remote``; the
    session id is stored with the episode.

    Example:
        >>> import tempfile
        >>> from envharness import HarnessSpec
        >>> from envharness.serve import EnvService
        >>> service = EnvService(HarnessSpec(env_id="FrozenLake-v1"), recorder=StoreRecorder(tempfile.mkdtemp() + "/run"))
        >>> session = service.open({"seed": 0})["session_id"]
        >>> while not service.step(session, {"action": 1})["terminated"]: pass
        >>> [(e.session_id == session, e.reason) for e in service.recorder.store.iter_episodes()]
        [(True, 'hole')]
    """

    def __init__(self, run: str | Path) -> None:
        self.store = TrajectoryStore.create(Path(run), meta={"recorded_by": "envharness serve"}, exist_ok=True)
        self._lock = threading.Lock()
        self._writing = self.store.writing()
        self._writing.__enter__()  # for as long as the server runs: one writer per run directory

    def record(self, spec: Any, env: Any, session_id: str, seed: int | None, steps: list[tuple[Any, ...]], verdict: Any, info: dict[str, Any],
               error: str | None, wall_time: float) -> None:  # fmt: skip
        spec_json, spec_hash = spec.to_json(indent=None), spec.hash()
        adapter = getattr(env, "adapter", None)
        with self._lock:
            episode_id = self.store.next_episode_id()
            records = [
                step_record(episode_id, t, action, obs, reward, terminated, truncated, step_info, adapter, "small")
                for t, (action, obs, reward, terminated, truncated, step_info) in enumerate(steps)
            ]
            total = sum(float(r.reward) for r in records)
            record = episode_record(
                episode_id, spec_hash, spec_json, seed, "remote", records, total, verdict, info.get("level", {}), info.get("level_id"),
                error, wall_time,
            )  # fmt: skip
            record.session_id = session_id
            humans = sum(1 for s in steps if "human_intervention" in s[5])
            if humans:
                record.human_interventions = humans
            if adapter is not None:
                note_ending(record, adapter)
            self.store.append([record], records)

    def close(self) -> None:
        self._writing.__exit__(None, None, None)


__all__ = ["StoreRecorder"]
