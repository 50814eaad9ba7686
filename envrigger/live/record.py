"""The run store of a served env: :class:`StoreRecorder`, and :func:`join_calls` (a session's model calls onto its steps)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from envrigger.data import TrajectoryStore, add_calls, sum_calls
from envrigger.live.calls import CallLog
from envrigger.rollout.episode import episode_record, note_ending, step_record


def join_calls(steps: list[Any], times: list[float], calls: list[dict[str, Any]], opened: float) -> list[dict[str, Any]]:
    """Give each step the calls that ended after the step before it (or the session's start) and by its own time.

    Returns the calls after the last step (the agent's answer to which never became a step).

    Example:
        >>> from envrigger.data import StepRecord
        >>> steps = [StepRecord(episode_id=0, t=t, action="0", reward=0.0, terminated=False, truncated=False, obs_digest="") for t in (0, 1)]
        >>> calls = [{"envrigger.time": 1.5, "gen_ai.usage.input_tokens": 9}, {"envrigger.time": 2.5}, {"envrigger.time": 3.5}]
        >>> len(join_calls(steps, [2.0, 3.0], calls, opened=1.0)), steps[0].model_calls, steps[1].model_calls
        (1, 1, 1)
    """
    since = opened
    for step, at in zip(steps, times):
        mine = [c for c in calls if since < float(c.get("envrigger.time", 0.0)) <= at]
        if mine:
            add_calls(step, mine)
        since = at
    return [c for c in calls if float(c.get("envrigger.time", 0.0)) > since]


class StoreRecorder:
    """Commits each finished session's episode to a run directory (crash-safe: one part per episode, in order of ending).

    The server holds the run's writer lock while it runs, so a `collect` into the same
    directory is refused, as with two collections. The policy id is ``remote``; the
    session id is stored with the episode. A damaged call log never stops the recording:
    the session's intact calls are joined, and each damaged line is reported on stderr once.

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
        self.calls = CallLog(run)
        self.problems: list[str] = []  # damage found in the call log, reported on stderr as found
        self._writing = self.store.writing()
        self._writing.__enter__()  # for as long as the server runs: one writer per run directory

    def record(self, spec: Any, env: Any, session_id: str, seed: int | None, steps: list[tuple[Any, ...]], verdict: Any, info: dict[str, Any],
               error: str | None, wall_time: float, opened: float = 0.0) -> None:  # fmt: skip
        spec_json, spec_hash = spec.to_json(indent=None), spec.hash()
        adapter = getattr(env, "adapter", None)
        calls = self._calls(session_id)  # what the proxy recorded for this session, if it records into this run
        with self._lock:
            episode_id = self.store.next_episode_id()
            records = [
                step_record(episode_id, t, action, obs, reward, terminated, truncated, step_info, adapter, "small")
                for t, (action, obs, reward, terminated, truncated, step_info, _) in enumerate(steps)
            ]
            unfinished = join_calls(records, [step[6] for step in steps], calls, opened)
            total = sum(float(r.reward) for r in records)
            record = episode_record(
                episode_id, spec_hash, spec_json, seed, "remote", records, total, verdict, info.get("level", {}), info.get("level_id"),
                error, wall_time,
            )  # fmt: skip
            record.session_id = session_id
            humans = sum(1 for s in steps if "human_intervention" in s[5])
            if humans:
                record.human_interventions = humans
            if calls:
                sum_calls(record, records, unfinished)
            if adapter is not None:
                note_ending(record, adapter)
            self.store.append([record], records)

    def _calls(self, session_id: str) -> list[dict[str, Any]]:
        """The session's intact calls; damage to the log is reported (once per damaged line), and never stops the recording."""
        calls, problems = self.calls.scan_calls(session_id)
        for problem in problems:
            if str(problem) not in self.problems:
                self.problems.append(str(problem))
                left = "its call is still joined (its own checksum holds)" if problem.usable else "its call is left out"
                print(
                    f"envrigger: warning: {self.calls.path}: {problem}; {left}; restore the file from a copy", file=sys.stderr, flush=True
                )
        return calls

    def close(self) -> None:
        self._writing.__exit__(None, None, None)


__all__ = ["StoreRecorder"]
