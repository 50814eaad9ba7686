"""One episode: play a policy on an env and turn what happened into records.

Contains :func:`run_episode` (and :class:`Abandoned`, an episode given up on a stop),
:func:`step_record`, :func:`episode_record` and the wall-time limit of a serial episode. Every backend runs episodes through here, so an
episode's records do not depend on the backend.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from envharness.offclock import steps_taken
from envrigger.data import (
    EpisodeRecord,
    StepRecord,
    add_calls,
    dumps,
    inline_observation,
    observation_digest,
    sum_calls,
)

DEFAULT_EPISODE_TIMEOUT = 600.0  # seconds of wall time an episode may take before it is recorded as hung
WALL_TIMEOUT = "timeout (wall)"


def error_line(error: BaseException) -> str:
    """An exception as one line for a record or a message: its type and the first line of its text."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _info_fields(info: dict[str, Any]) -> str:
    kept = {k: v for k, v in info.items() if k not in ("verdict", "level") and isinstance(v, (str, int, float, bool))}
    return dumps(kept) if kept else "{}"


class Abandoned(Exception):
    """An episode given up before its next action because the rollout is stopping: nothing of it is stored."""


def run_episode(
    env: Any, policy: Any, episode_id: int, seed: int | None, spec_hash: str = "", spec_json: str = "", store_obs: str = "small",
    stop: threading.Event | None = None,
) -> tuple[EpisodeRecord, list[StepRecord]]:  # fmt: skip
    """One episode; an exception in the env or the policy ends it with the error recorded.

    Once ``stop`` is set, the episode raises :class:`Abandoned` before its next action
    (so an LLM agent's next model call is never paid for).

    Example:
        >>> import envharness
        >>> from envrigger.policies import RandomPolicy
        >>> env = envharness.wrap("FrozenLake-v1")
        >>> episode, steps = run_episode(env, RandomPolicy(env.action_space, seed=0), 0, seed=1)
        >>> episode.length == len(steps), episode.reason in {"hole", "reached goal", "timeout"}
        (True, True)
    """
    play = EpisodePlay(env, policy, episode_id, seed, spec_hash, spec_json, store_obs)
    act, advance = policy.act, play.advance
    pop_calls = getattr(policy, "pop_calls", None)  # an LLM agent's model calls, per action
    if pop_calls is not None:
        observe = getattr(policy, "observe_reward", None)
        while not play.done:
            if stop is not None and stop.is_set():
                raise Abandoned(f"episode {episode_id}")
            try:
                action = act(play.obs, play.info)
            except Exception as exc:  # the policy raised: record it, keep the run going
                play.fail(exc, pop_calls())
                break
            advance(action, pop_calls())
            if observe is not None and play.steps:
                observe(play.steps[-1].reward)
        return play.record()
    while not play.done:
        if stop is not None and stop.is_set():
            raise Abandoned(f"episode {episode_id}")
        try:
            action = act(play.obs, play.info)
        except Exception as exc:  # the policy raised: record it, keep the run going
            play.fail(exc)
            break
        advance(action)
    return play.record()


class EpisodePlay:
    """One episode being played a step at a time: :func:`run_episode` drives one, a batched rollout several in lockstep."""

    __slots__ = ("env", "policy", "episode_id", "seed", "spec_hash", "spec_json", "store_obs", "adapter", "started", "steps",
                 "total", "verdict", "level", "level_id", "error", "done", "obs", "info", "unfinished", "humans", "cut",
                 "searched")  # fmt: skip

    def __init__(self, env: Any, policy: Any, episode_id: int, seed: int | None, spec_hash: str, spec_json: str, store_obs: str) -> None:
        self.env, self.policy, self.episode_id, self.seed = env, policy, episode_id, seed
        self.spec_hash, self.spec_json, self.store_obs = spec_hash, spec_json, store_obs
        self.started = time.perf_counter()
        self.adapter = getattr(env, "adapter", None)
        self.steps: list[StepRecord] = []
        self.total, self.verdict, self.level = 0.0, None, {}
        self.level_id: str | None = None
        self.error: str | None = None
        self.done, self.obs, self.info = False, None, {}
        self.unfinished: list[dict[str, Any]] = []
        self.humans = 0  # steps the env handed to a person (code repair's ask_human)
        self.cut: str | None = None  # the limit that ended the episode before the env did (an agent's call budget)
        self.searched = 0  # env steps off the agent's clock (a search behind a start, setup played at reset): charged with the episode
        try:
            if hasattr(policy, "reset"):
                policy.reset(seed)
            before = steps_taken()  # this thread's: episodes played in other threads at once charge their own
            try:
                self.obs, self.info = env.reset(seed=seed)
            finally:
                self.searched += steps_taken() - before
            self.level, self.level_id = self.info.get("level", {}), self.info.get("level_id")
        except Exception as exc:  # the env or the policy raised: record it, keep the run going
            self.fail(exc)

    def advance(self, action: Any, calls: list[dict[str, Any]] | None = None) -> None:
        """Take the agent's ``action`` and record the step (with the model ``calls`` that chose it, for an LLM agent)."""
        try:
            before = steps_taken()
            try:
                obs, reward, terminated, truncated, info = self.env.step(action)
            finally:
                self.searched += steps_taken() - before
            steps = self.steps
            record = step_record(
                self.episode_id, len(steps), action, obs, reward, terminated, truncated, info, self.adapter, self.store_obs
            )
            if calls is not None:
                add_calls(record, calls)
            steps.append(record)
            if "human_intervention" in info:
                self.humans += 1
            self.total += float(reward)
            self.obs, self.info = obs, info
            if terminated or truncated:
                self.verdict, self.done = info.get("verdict"), True
        except Exception as exc:
            self.fail(exc)

    def fail(self, exc: BaseException, calls: list[dict[str, Any]] | None = None) -> None:
        cut = getattr(exc, "cut", None)  # a limit the agent reached (its call budget): the episode is cut, not failed by an error
        if isinstance(cut, str):
            self.cut, self.verdict, self.done = cut, None, True
        else:
            self.error, self.verdict, self.done = error_line(exc), None, True
        if calls:  # the model calls of a step the agent could not finish: kept, so the transcript shows why
            self.unfinished = calls

    def record(self) -> tuple[EpisodeRecord, list[StepRecord]]:
        policy = self.policy
        policy_id = str(getattr(policy, "policy_id", getattr(policy, "name", type(policy).__name__)))
        record = episode_record(
            self.episode_id, self.spec_hash, self.spec_json, self.seed, policy_id, self.steps, self.total, self.verdict, self.level,
            self.level_id, self.error, time.perf_counter() - self.started, cut=self.cut,
        )  # fmt: skip
        if any(step.model_calls is not None for step in self.steps) or self.unfinished:
            sum_calls(record, self.steps, self.unfinished)
        if self.humans:
            record.human_interventions = self.humans
        if self.searched:
            record.search_steps = self.searched
        adapter = self.adapter
        if adapter is not None:
            note_ending(record, adapter)
        return record, self.steps


def step_record(
    episode_id: int,
    t: int,
    action: Any,
    obs: Any,
    reward: Any,
    terminated: bool,
    truncated: bool,
    info: dict[str, Any],
    adapter: Any,
    store_obs: str = "small",
) -> StepRecord:
    """The stored form of one step (``obs`` is the observation after it), as every recorder writes it."""
    where = adapter.position() if adapter is not None else None
    return StepRecord(
        episode_id=episode_id,
        t=t,
        action=dumps(action),
        reward=float(reward),
        terminated=bool(terminated),
        truncated=bool(truncated),
        obs_digest=observation_digest(obs),
        blocked=info.get("blocked"),
        obs=inline_observation(obs, store_obs),
        position=dumps(where) if where is not None else None,
        info=_info_fields(info),
    )


def episode_record(
    episode_id: int,
    spec_hash: str,
    spec_json: str,
    seed: int | None,
    policy_id: str,
    steps: list[StepRecord],
    total: float,
    verdict: Any,
    level: dict[str, Any],
    level_id: str | None,
    error: str | None,
    wall_time: float,
    cut: str | None = None,
) -> EpisodeRecord:
    """The stored summary of one episode from its steps and final verdict (``cut``: the limit that ended it before the env did)."""
    success = bool(verdict is not None and verdict.success and error is None and cut is None)
    reason = "error" if error is not None else cut if cut is not None else (verdict.reason if verdict is not None else "no verdict")
    return EpisodeRecord(
        episode_id=episode_id,
        spec_hash=spec_hash,
        spec_json=spec_json,
        seed=seed,
        policy_id=policy_id,
        length=len(steps),
        return_=total,
        success=success,
        score=float(verdict.score) if verdict is not None and error is None else 0.0,
        reason=reason,
        terminal_cause=None if success else reason,
        level_features={k: float(v) for k, v in level.items()},
        level_id=level_id,
        error=error,
        wall_time=wall_time,
    )


def note_ending(record: EpisodeRecord, adapter: Any) -> None:
    """How the episode ended in the adapter's terms: its step limit, an ending the agent chose, an irreversible failure."""
    limit = getattr(adapter, "time_limit", None)
    record.step_limit = limit() if callable(limit) else None
    if record.error is not None:
        return
    record.agent_ended = record.reason in getattr(adapter, "agent_endings", ())
    if not record.success:
        irreversible = record.reason in getattr(adapter, "irreversible_endings", ())
        record.irreversible = record.reason if irreversible else getattr(adapter, "destroyed", None)


class _WallTimeout(BaseException):
    """Raised into a serial episode by SIGALRM (a BaseException, so run_episode does not record it as the env's error)."""


def serial_episode(
    env: Any,
    policy: Any,
    episode_id: int,
    seed: int | None,
    spec_hash: str,
    spec_json: str,
    timeout: float | None,
    store_obs: str = "small",
) -> tuple[EpisodeRecord, list[StepRecord]]:
    """:func:`run_episode` under a wall-time limit enforced with SIGALRM (main thread only; elsewhere no limit)."""
    if not timeout or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return run_episode(env, policy, episode_id, seed, spec_hash, spec_json, store_obs)

    def expire(signum: int, frame: Any) -> None:
        raise _WallTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return run_episode(env, policy, episode_id, seed, spec_hash, spec_json, store_obs)
    except _WallTimeout:
        return failed_episode(episode_id, seed, spec_hash, spec_json, f"the episode took more than {timeout:g} s", WALL_TIMEOUT), []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def failed_episode(episode_id: int, seed: int | None, spec_hash: str, spec_json: str, error: str, reason: str = "error") -> EpisodeRecord:
    """The record of an episode that never ran to an end (its env or worker failed): no steps, no success, ``error`` kept."""
    return EpisodeRecord(
        episode_id=episode_id,
        spec_hash=spec_hash,
        spec_json=spec_json,
        seed=seed,
        policy_id="unknown",
        length=0,
        return_=0.0,
        success=False,
        score=0.0,
        reason=reason,
        terminal_cause=reason,
        error=error,
    )
