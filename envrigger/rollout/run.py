"""Rollouts: run a policy on a spec for many seeded episodes and store the trajectories.

Contains :func:`rollout`, :func:`run_episode`, :func:`policy_factory` and the three
backends: ``serial``, ``process`` (a pool of spawned workers that replaces a worker that
dies and retries its episode once) and ``ray`` (``pip install "envharness[ray]"``).

Determinism: episode *i* resets with ``seeds[i]`` and its policy is reseeded from
``(policy_seed, seeds[i])``, so the stored episodes are the same on every backend and for
any number of workers (only ``wall_time`` differs).
"""

from __future__ import annotations

import atexit
import copy
import hashlib
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import cloudpickle
import pyarrow as pa

from envharness.spec import HarnessSpec
from envharness.transforms.base import import_modules, load_file_module, user_modules
from envrigger.trajectory import (
    STORE_OBS,
    EpisodeRecord,
    StepRecord,
    TrajectoryError,
    TrajectoryStore,
    dumps,
    episodes_table,
    inline_observation,
    observation_digest,
    steps_table,
)

BACKENDS = ("serial", "process", "ray")
DEFAULT_EPISODE_TIMEOUT = 600.0  # seconds of wall time an episode may take before it is recorded as hung
WALL_TIMEOUT = "timeout (wall)"
PolicyFactory = Callable[[Any], Any]


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def policy_factory(policy: Any, policy_seed: int = 0) -> PolicyFactory:
    """A picklable ``env -> policy`` maker from ``"random"``, ``"reference"``, a saved-learner path or a callable.

    Example:
        >>> import envharness
        >>> make = policy_factory("random", policy_seed=1)
        >>> make(envharness.wrap("CartPole-v1")).name
        'random'
    """
    if isinstance(policy, type) or (callable(policy) and not hasattr(policy, "act")):
        return policy  # a factory: a policy class taking the env, or any env -> policy callable
    if hasattr(policy, "act"):
        return _Fixed(policy)
    if policy == "random":
        return _Random(policy_seed)
    if policy == "reference":
        return _Reference()
    text = str(policy)
    if text.endswith(".py"):
        raise TrajectoryError(f"policy: {text} is Python code; name the class in it: {text}:ClassName")
    where = text.rpartition(":")[0]
    if where and not Path(text.rpartition(":")[2]).exists() and not where.isupper():
        return _Imported(text)  # module:Class or path/to/file.py:Class
    if Path(text.rpartition(":")[2]).exists():  # a saved learner, maybe as ALGO:model.zip
        return _Saved(text, policy_seed)
    raise TrajectoryError(f"policy: {policy!r} is not random, reference, or an existing saved-learner file; pick one of those")


class _Fixed:
    """Hands out a private copy of a policy object, as the process and Ray backends do by pickling it.

    So a rollout never touches a live learner: reseeding the copy per episode leaves the
    learner's own training stream (and everything else) as it was, on every backend.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def __call__(self, env: Any) -> Any:
        try:
            return copy.deepcopy(self.policy)
        except Exception:  # not copyable (open handles...): it runs as it is, and its own state moves
            return self.policy


class _Random:
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __call__(self, env: Any) -> Any:
        from envrigger.policies import RandomPolicy

        return RandomPolicy(env.action_space, seed=self.seed)


class _Reference:
    def __call__(self, env: Any) -> Any:
        from envrigger.policies import reference_policy

        return reference_policy(env)


class _Imported:
    """A policy class (or ``env -> policy`` function) named as ``module:Class`` or ``path/to/file.py:Class``.

    Named on the command line by the user, so importing it is their explicit choice; it is
    resolved again in each worker process from the name alone.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.resolve()  # fail now, in the caller, before anything is written

    def resolve(self) -> Any:
        import importlib

        where, _, name = self.target.rpartition(":")
        try:
            if where.endswith(".py"):
                path = Path(where).resolve()
                if not path.is_file():
                    raise TrajectoryError(f"policy: {where} does not exist; give an existing .py file as FILE.py:ClassName")
                module = load_file_module("envrigger_user_policy_" + hashlib.sha256(str(path).encode()).hexdigest()[:12], path)
            else:
                module = importlib.import_module(where)
        except TrajectoryError:
            raise
        except Exception as error:
            raise TrajectoryError(f"policy: cannot import {where} ({_one_line(error)}); check the module name or file") from None
        made = getattr(module, name, None)
        if made is None or not callable(made):
            raise TrajectoryError(f"policy: {where} has no class or function {name!r}; name one it defines")
        return made

    def __call__(self, env: Any) -> Any:
        import inspect

        made = self.resolve()
        try:
            takes_env = any(
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                for p in inspect.signature(made).parameters.values()
            )
        except (TypeError, ValueError):
            takes_env = True
        policy = made(env) if takes_env else made()
        if not hasattr(policy, "act"):
            raise TrajectoryError(f"policy: {self.target} made a {type(policy).__name__}, which has no act(obs, info); return a policy")
        return policy


class _Saved:
    def __init__(self, path: str, seed: int) -> None:
        self.path, self.seed = path, seed

    def __call__(self, env: Any) -> Any:
        from envrigger.policies import load_policy

        return load_policy(self.path, env, seed=self.seed)


def _info_fields(info: dict[str, Any]) -> str:
    kept = {k: v for k, v in info.items() if k not in ("verdict", "level") and isinstance(v, (str, int, float, bool))}
    return dumps(kept) if kept else "{}"


def run_episode(
    env: Any, policy: Any, episode_id: int, seed: int | None, spec_hash: str = "", spec_json: str = "", store_obs: str = "small"
) -> tuple[EpisodeRecord, list[StepRecord]]:
    """One episode; an exception in the env or the policy ends it with the error recorded.

    Example:
        >>> import envharness
        >>> from envrigger.policies import RandomPolicy
        >>> env = envharness.wrap("FrozenLake-v1")
        >>> episode, steps = run_episode(env, RandomPolicy(env.action_space, seed=0), 0, seed=1)
        >>> episode.length == len(steps), episode.reason in {"hole", "reached goal", "timeout"}
        (True, True)
    """
    play = _Play(env, policy, episode_id, seed, spec_hash, spec_json, store_obs)
    act, advance = policy.act, play.advance
    while not play.done:
        try:
            action = act(play.obs, play.info)
        except Exception as exc:  # the policy raised: record it, keep the run going
            play.fail(exc)
            break
        advance(action)
    return play.record()


class _Play:
    """One episode being played a step at a time: :func:`run_episode` drives one, a batched rollout several in lockstep."""

    __slots__ = ("env", "policy", "episode_id", "seed", "spec_hash", "spec_json", "store_obs", "adapter", "started", "steps",
                 "total", "verdict", "level", "level_id", "error", "done", "obs", "info")  # fmt: skip

    def __init__(self, env: Any, policy: Any, episode_id: int, seed: int | None, spec_hash: str, spec_json: str, store_obs: str) -> None:
        self.env, self.policy, self.episode_id, self.seed = env, policy, episode_id, seed
        self.spec_hash, self.spec_json, self.store_obs = spec_hash, spec_json, store_obs
        self.started = time.perf_counter()
        self.adapter = getattr(env, "adapter", None)
        self.steps: list[StepRecord] = []
        self.total, self.verdict, self.level, self.level_id, self.error = 0.0, None, {}, None, None
        self.done, self.obs, self.info = False, None, {}
        try:
            if hasattr(policy, "reset"):
                policy.reset(seed)
            self.obs, self.info = env.reset(seed=seed)
            self.level, self.level_id = self.info.get("level", {}), self.info.get("level_id")
        except Exception as exc:  # the env or the policy raised: record it, keep the run going
            self.fail(exc)

    def advance(self, action: Any) -> None:
        """Take the agent's ``action`` and record the step."""
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
            steps = self.steps
            steps.append(
                step_record(self.episode_id, len(steps), action, obs, reward, terminated, truncated, info, self.adapter, self.store_obs)
            )
            self.total += float(reward)
            self.obs, self.info = obs, info
            if terminated or truncated:
                self.verdict, self.done = info.get("verdict"), True
        except Exception as exc:
            self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        self.error, self.verdict, self.done = _one_line(exc), None, True

    def record(self) -> tuple[EpisodeRecord, list[StepRecord]]:
        policy = self.policy
        policy_id = str(getattr(policy, "policy_id", getattr(policy, "name", type(policy).__name__)))
        record = episode_record(
            self.episode_id, self.spec_hash, self.spec_json, self.seed, policy_id, self.steps, self.total, self.verdict, self.level,
            self.level_id, self.error, time.perf_counter() - self.started,
        )  # fmt: skip
        return record, self.steps


def _batched(
    envs: list[Any],
    policies: list[Any],
    tasks: list[tuple[int, int | None]],
    emit: Callable,
    spec_hash: str,
    spec_json: str,
    store_obs: str,
    episode_timeout: float | None,
) -> None:
    """Play ``tasks`` on ``len(envs)`` envs in lockstep, the policy choosing every env's action in one call where it can.

    A policy class with ``act_batch(policies, observations, infos)`` (the PPO learner's, a
    deterministic SB3 model's) acts for all running episodes at once; any other policy acts
    per episode. Each env has its own copy of the policy, reset with its episode's seed, so
    the stored episodes are the ones the serial backend stores. An episode running longer than
    ``episode_timeout`` is ended, between two steps, as ``timeout (wall)``.
    """
    queue = list(reversed(tasks))
    slots: list[_Play | None] = [None] * len(envs)
    act_batch = getattr(type(policies[0]), "act_batch", None)
    while queue or any(slots):
        for i, env in enumerate(envs):
            while slots[i] is None and queue:
                episode_id, seed = queue.pop()
                play = _Play(env, policies[i], episode_id, seed, spec_hash, spec_json, store_obs)
                if play.done:
                    emit(*play.record())
                else:
                    slots[i] = play
        live = [play for play in slots if play is not None]
        if not live:
            continue
        actions = None
        if act_batch is not None and len(live) > 1:
            try:
                actions = act_batch([p.policy for p in live], [p.obs for p in live], [p.info for p in live])
            except Exception:
                actions = None  # acted one by one below, so an error is recorded against its own episode
        for k, play in enumerate(live):
            if actions is not None:
                play.advance(actions[k])
            else:
                try:
                    play.advance(play.policy.act(play.obs, play.info))
                except Exception as exc:
                    play.fail(exc)
            if not play.done and episode_timeout and time.perf_counter() - play.started > episode_timeout:
                play.done = True
                emit(
                    _failed_episode(
                        play.episode_id, play.seed, spec_hash, spec_json, f"the episode took more than {episode_timeout:g} s", WALL_TIMEOUT
                    ),
                    [],
                )
                slots[slots.index(play)] = None
            elif play.done:
                emit(*play.record())
                slots[slots.index(play)] = None


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
) -> EpisodeRecord:
    """The stored summary of one episode from its steps and final verdict."""
    success = bool(verdict is not None and verdict.success and error is None)
    reason = "error" if error is not None else (verdict.reason if verdict is not None else "no verdict")
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


def _death(code: int | None) -> str:
    """How a worker process ended, with the signal's name: ``killed by SIGSEGV``."""
    if code is None:
        return "died"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
    return f"exited with code {code}"


class _WallTimeout(BaseException):
    """Raised into a serial episode by SIGALRM (a BaseException, so run_episode does not record it as the env's error)."""


def _check_policy(policy: Any, env: Any) -> None:
    """Refuse, before any output, a policy that declares spaces other than the env's (an SB3 model trained elsewhere)."""
    declared = getattr(getattr(policy, "model", policy), "observation_space", None)
    if declared is None or not hasattr(declared, "shape"):
        return
    actual = env.observation_space
    if type(declared) is not type(actual) or declared.shape != actual.shape:
        raise TrajectoryError(
            f"policy: it observes {_describe(declared)} but this spec's env gives {_describe(actual)}; collect on the spec "
            "the policy was trained on (for SB3 on MiniGrid, add ImageOnly or Flatten to the spec)"
        )


def _describe(space: Any) -> str:
    """A space in a few words: ``Box (151,)``, ``Dict(direction, image, mission)``."""
    if hasattr(space, "spaces") and isinstance(space.spaces, dict):
        return f"Dict({', '.join(space.spaces)})"
    shape = getattr(space, "shape", None)
    return f"{type(space).__name__} {shape}" if shape else type(space).__name__


def _serial_episode(
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
        return _failed_episode(episode_id, seed, spec_hash, spec_json, f"the episode took more than {timeout:g} s", WALL_TIMEOUT), []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _failed_episode(episode_id: int, seed: int | None, spec_hash: str, spec_json: str, error: str, reason: str = "error") -> EpisodeRecord:
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


# -- process backend ---------------------------------------------------------------------
def _worker_main(conn: Any) -> None:
    """Worker loop: on ``("setup", ...)`` build the env and policy (closing the last ones), on ``("run", task)`` play an episode."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it commits what finished, then ends us
    env = policy = None
    spec_hash = spec_json = ""
    store_obs = "small"
    while True:
        message = conn.recv()
        if message is None:
            break
        kind, payload = message
        if kind == "setup":
            if env is not None:
                env.close()
                env = None
            spec_json, factory_bytes, allow_imports, modules, store_obs = payload
            try:
                import_modules(list(modules))  # the parent's user modules: their transforms and policies
                spec = HarnessSpec.from_json(spec_json)
                env = spec.build(allow_imports=allow_imports)
                policy = cloudpickle.loads(factory_bytes)(env)
                spec_hash = spec.hash()
            except Exception as exc:
                conn.send(("setup_error", _one_line(exc)))
                return
            conn.send(("ready", None))
        else:
            episode_id, seed = payload
            record, steps = run_episode(env, policy, episode_id, seed, spec_hash, spec_json, store_obs)
            conn.send(("done", (record, steps_table(steps))))  # columns pickle far faster than a list of records
    if env is not None:
        env.close()


class _Pool:
    """Spawned workers kept for the life of the process, one episode in flight each; a dead worker is replaced.

    Starting a worker costs about half a second (a fresh interpreter and its imports), and
    the loop's validation makes many short rollouts, so workers outlive a rollout: each call
    sends them its spec and policy factory (a fresh env and policy per call, as if the
    workers were new), uses as many as it needs, and leaves them waiting. Workers are
    started anew when the working directory, ``sys.path`` or the user modules changed. A
    call that ends abnormally (an error, Ctrl-C) closes them all, so no episode in flight
    outlives it.
    :func:`close_workers` ends them early.
    """

    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")
        self.workers: list[dict[str, Any]] = []
        self.idle: list[dict[str, Any]] = []
        self.setup: tuple[Any, ...] = ()

    def configure(
        self, workers: int, spec_json: str, factory_bytes: bytes, allow_imports: tuple[str, ...] = (), store_obs: str = "small"
    ) -> None:
        """Use ``workers`` workers (starting more if needed) for this spec and policy; each answers ready or setup_error."""
        self.setup = (spec_json, factory_bytes, allow_imports, tuple(user_modules()), store_obs)
        # A worker imported what the parent could import when it started: where it ran, its
        # path and user modules. If any changed, a module of the same name may now be another file.
        key = repr((os.getcwd(), sys.path, self.setup[3]))
        if key != getattr(self, "key", key):
            self.close()
        self.key = key
        self.workers = [w for w in self.workers + self.idle if w["process"].is_alive()]
        while len(self.workers) < workers:
            self._start()
        self.idle, self.workers = self.workers[workers:], self.workers[:workers]
        for worker in self.workers:
            self._send_setup(worker)

    def _send_setup(self, worker: dict[str, Any]) -> None:
        worker["ready"], worker["task"] = False, None
        try:
            worker["conn"].send(("setup", self.setup))
        except (BrokenPipeError, OSError):
            pass  # a dead worker: its sentinel fires and it is replaced

    def _start(self) -> dict[str, Any]:
        parent, child = self.ctx.Pipe()
        process = self.ctx.Process(target=_worker_main, args=(child,), daemon=True)
        process.start()
        child.close()
        worker = {"process": process, "conn": parent, "task": None, "ready": False}
        self.workers.append(worker)
        return worker

    def replace(self, worker: dict[str, Any]) -> None:
        worker["conn"].close()
        worker["process"].join(timeout=1)
        self.workers.remove(worker)
        self._send_setup(self._start())

    def release(self) -> None:
        """The call is over and every episode answered: keep the workers for the next call."""
        self.workers += self.idle
        self.idle = []

    def close(self) -> None:
        everyone = self.workers + self.idle
        for worker in everyone:
            try:
                worker["conn"].send(None)
            except (BrokenPipeError, OSError):
                pass
        for worker in everyone:
            worker["process"].join(timeout=5)
            if worker["process"].is_alive():
                worker["process"].kill()
            worker["conn"].close()
        self.workers, self.idle = [], []


_POOL: _Pool | None = None


def _shared_pool() -> _Pool:
    global _POOL
    if _POOL is None:
        _POOL = _Pool()
    return _POOL


@atexit.register
def close_workers() -> None:
    """End the worker processes now: the process backend's, and the Ray actors and the local Ray this process started.

    They are otherwise kept for the next rollout, and end with this process.
    """
    global _POOL
    if _POOL is not None:
        _POOL.close()
        _POOL = None
    ray_pool = globals().get("_RAY_POOL")
    if ray_pool is not None and (ray_pool.actors or ray_pool.owned):
        ray_pool.close()


def _process_backend(
    spec: HarnessSpec,
    factory: PolicyFactory,
    tasks: list[tuple[int, int | None]],
    workers: int,
    emit: Callable,
    allow_imports: tuple[str, ...] = (),
    episode_timeout: float | None = None,
    store_obs: str = "small",
) -> None:
    spec_json, spec_hash = spec.to_json(indent=None), spec.hash()
    pool = _shared_pool()
    pool.configure(min(workers, len(tasks)), spec_json, cloudpickle.dumps(factory), allow_imports, store_obs)
    finished = False
    queue = list(reversed(tasks))
    attempts: dict[int, int] = {}
    pending, startup_failures = len(tasks), 0
    try:
        while pending:
            for worker in pool.workers:
                if worker["ready"] and worker["task"] is None and queue:
                    worker["task"] = queue.pop()
                    worker["since"] = time.monotonic()
                    attempts[worker["task"][0]] = attempts.get(worker["task"][0], 0) + 1
                    worker["conn"].send(("run", worker["task"]))
            if episode_timeout:  # a hung episode: kill its worker, record it, go on with a fresh worker
                now = time.monotonic()
                for worker in [w for w in pool.workers if w["task"] is not None and now - w["since"] >= episode_timeout]:
                    task = worker["task"]
                    worker["process"].kill()
                    pool.replace(worker)
                    message = f"the episode took more than {episode_timeout:g} s; its worker was killed"
                    emit(_failed_episode(task[0], task[1], spec_hash, spec_json, message, WALL_TIMEOUT), [])
                    pending -= 1
                if not pending:
                    break
            busy = (
                [w["since"] + episode_timeout - time.monotonic() for w in pool.workers if w["task"] is not None] if episode_timeout else []
            )
            by_conn = {id(w["conn"]): w for w in pool.workers}
            by_sentinel = {w["process"].sentinel: w for w in pool.workers}
            for ready in wait([w["conn"] for w in pool.workers] + list(by_sentinel), timeout=max(0.0, min(busy)) if busy else None):
                worker = by_conn.get(id(ready)) or by_sentinel.get(ready)
                if worker is None or worker not in pool.workers:
                    continue
                try:
                    if worker["conn"].poll():
                        kind, payload = worker["conn"].recv()
                    else:
                        raise EOFError
                except (EOFError, OSError):
                    task = worker["task"]
                    worker["process"].join(timeout=2)  # the pipe closes before the process is reaped
                    code = worker["process"].exitcode
                    if not worker["ready"]:
                        startup_failures += 1
                        if startup_failures > 2 * len(pool.workers):
                            raise TrajectoryError(
                                f"rollout: worker processes die at start-up (exit code {code}); run from a script file "
                                "(not stdin) or use backend='serial'"
                            ) from None
                    pool.replace(worker)
                    if task is None:
                        continue
                    if attempts[task[0]] < 2:
                        queue.append(task)
                    else:
                        emit(_failed_episode(task[0], task[1], spec_hash, spec_json, f"worker process {_death(code)} twice"), [])
                        pending -= 1
                    continue
                if kind == "setup_error":
                    raise TrajectoryError(f"rollout: workers could not build the env or policy ({payload}); check the spec and policy")
                if kind == "ready":
                    worker["ready"] = True
                    continue
                worker["task"] = None
                emit(*payload)
                pending -= 1
        finished = True
    finally:
        if finished:
            pool.release()
        else:
            close_workers()


# -- ray backend -------------------------------------------------------------------------
class _RayWorker:
    """A Ray actor: builds the env and policy once per rollout call, then plays the episodes sent to it."""

    def __init__(self) -> None:
        self.env: Any = None
        self.policy: Any = None
        self.spec_hash = self.spec_json = ""
        self.store_obs = "small"

    def setup(self, spec_json: str, factory_bytes: bytes, allow_imports: tuple[str, ...], modules: tuple[str, ...], store_obs: str) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
        import_modules(list(modules))
        spec = HarnessSpec.from_json(spec_json)
        self.env = spec.build(allow_imports=allow_imports)
        self.policy = cloudpickle.loads(factory_bytes)(self.env)
        self.spec_hash, self.spec_json, self.store_obs = spec.hash(), spec_json, store_obs

    def run(self, task: tuple[int, int | None]) -> tuple[EpisodeRecord, pa.Table]:
        if self.env is None:
            raise RuntimeError("this Ray worker was not set up")
        record, steps = run_episode(self.env, self.policy, task[0], task[1], self.spec_hash, self.spec_json, self.store_obs)
        return record, steps_table(steps)


class _RayPool:
    """The Ray connection and actors of this process, kept across rollout calls like the process pool.

    Joins the cluster named by ``address`` (or ``RAY_ADDRESS``), else starts a local Ray
    instance with one CPU per core; a Ray the caller initialised is used as it is. Each
    actor keeps one env for the whole call. The local instance is started anew when the
    working directory, ``sys.path``, ``PYTHONPATH`` or the user modules changed (its workers
    import what the driver could import when it started).
    """

    def __init__(self) -> None:
        self.actors: list[Any] = []
        self.key = ""
        self.owned = False  # we called ray.init (so we may shut it down to start afresh)

    def connect(self, address: str | None) -> Any:
        try:
            import ray
        except ImportError:
            raise TrajectoryError('backend ray: Ray is not installed; pip install "envharness[ray]"') from None
        address = address or os.environ.get("RAY_ADDRESS") or None
        key = repr((address, os.getcwd(), sys.path, os.environ.get("PYTHONPATH"), tuple(user_modules())))
        if ray.is_initialized() and not self.owned:
            return ray  # the caller's own ray.init: theirs to manage
        if ray.is_initialized() and key != self.key:
            self.close()
        if not ray.is_initialized():
            quiet = {"log_to_driver": False, "configure_logging": False}
            if address:
                _reachable(address)  # Ray itself retries an unreachable address for minutes
            try:
                if address:
                    ray.init(address=address, **quiet)
                else:
                    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, **quiet)
            except ConnectionError as error:
                raise TrajectoryError(
                    f"backend ray: cannot join the Ray cluster at {address} ({_one_line(error)}); is it running (`ray status`)? "
                    "If it uses token authentication, set RAY_AUTH_MODE=token and its token (`ray get-auth-token`)"
                ) from None
            self.owned, self.key = True, key
        return ray

    def capacity(self, ray: Any) -> int:
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def actor(self, ray: Any) -> Any:
        return ray.remote(num_cpus=1, max_restarts=0)(_RayWorker).remote()

    def kill(self, ray: Any, actor: Any) -> None:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass  # already gone
        if actor in self.actors:
            self.actors.remove(actor)

    def close(self) -> None:
        import ray

        for actor in list(self.actors):
            self.kill(ray, actor)
        if self.owned and ray.is_initialized():
            ray.shutdown()
        self.actors, self.owned = [], False


_RAY_POOL = _RayPool()


def _reachable(address: str) -> None:
    """Refuse at once a ``HOST:PORT`` (or ``ray://HOST:PORT``) where nothing listens; ``auto`` is Ray's to resolve."""
    import socket

    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        if address != "auto":
            raise TrajectoryError(f"backend ray: {address!r} is not a Ray address; give auto, HOST:PORT or ray://HOST:PORT")
        return
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        raise TrajectoryError(
            f"backend ray: cannot reach a Ray cluster at {address} ({error.strerror or error}); start one with "
            "`ray start --head`, or name none (no --ray-address, RAY_ADDRESS unset) to start a local one"
        ) from None


def _ray_backend(
    spec: HarnessSpec,
    factory: PolicyFactory,
    tasks: list[tuple[int, int | None]],
    workers: int | None,
    emit: Callable,
    allow_imports: tuple[str, ...] = (),
    episode_timeout: float | None = None,
    address: str | None = None,
    store_obs: str = "small",
) -> None:
    pool = _RAY_POOL
    ray = pool.connect(address)
    from ray.exceptions import RayActorError, RayTaskError

    spec_json, spec_hash = spec.to_json(indent=None), spec.hash()
    setup_args = (spec_json, cloudpickle.dumps(factory), allow_imports, tuple(user_modules()), store_obs)
    wanted = min(workers or pool.capacity(ray), pool.capacity(ray), len(tasks))
    while len(pool.actors) < wanted:
        pool.actors.append(pool.actor(ray))
    actors = pool.actors[:wanted]
    # In flight: an object ref -> (actor, task or None for a set-up, when it was sent).
    flight: dict[Any, tuple[Any, tuple[int, int | None] | None, float]] = {}
    idle: list[Any] = []
    for actor in actors:
        flight[actor.setup.remote(*setup_args)] = (actor, None, time.monotonic())
    queue = list(reversed(tasks))
    attempts: dict[int, int] = {}
    pending, startup_failures, finished = len(tasks), 0, False

    def replace(actor: Any) -> None:
        pool.kill(ray, actor)
        fresh = pool.actor(ray)
        pool.actors.append(fresh)
        flight[fresh.setup.remote(*setup_args)] = (fresh, None, time.monotonic())

    try:
        while pending:
            while idle and queue:
                actor, task = idle.pop(), queue.pop()
                attempts[task[0]] = attempts.get(task[0], 0) + 1
                flight[actor.run.remote(task)] = (actor, task, time.monotonic())
            now = time.monotonic()
            if episode_timeout:  # a hung episode: kill its actor, record it, go on with a fresh one
                for ref, (actor, task, since) in list(flight.items()):
                    if task is not None and now - since >= episode_timeout:
                        del flight[ref]
                        replace(actor)
                        message = f"the episode took more than {episode_timeout:g} s; its worker was killed"
                        emit(_failed_episode(task[0], task[1], spec_hash, spec_json, message, WALL_TIMEOUT), [])
                        pending -= 1
                if not pending:
                    break
            waits = [since + episode_timeout - now for _, task, since in flight.values() if task is not None] if episode_timeout else []
            done, _ = ray.wait(list(flight), num_returns=1, timeout=max(0.0, min(waits)) if waits else None)
            for ref in done:
                actor, task, _ = flight.pop(ref)
                try:
                    result = ray.get(ref)
                except RayActorError as error:  # the actor's process died (or could not start)
                    if task is None:
                        startup_failures += 1
                        if startup_failures > 2 * len(actors):
                            raise TrajectoryError(f"rollout: Ray workers die at start-up ({_one_line(error)}); check the cluster") from None
                    replace(actor)
                    if task is None:
                        continue
                    if attempts[task[0]] < 2:
                        queue.append(task)
                    else:
                        emit(_failed_episode(task[0], task[1], spec_hash, spec_json, f"ray worker failed twice: {_one_line(error)}"), [])
                        pending -= 1
                    continue
                except RayTaskError as error:
                    cause = _one_line(error.cause) if getattr(error, "cause", None) is not None else _one_line(error)
                    if task is None:
                        raise TrajectoryError(
                            f"rollout: Ray workers could not build the env or policy ({cause}); check the spec and policy"
                        ) from None
                    emit(_failed_episode(task[0], task[1], spec_hash, spec_json, f"ray worker: {cause}"), [])
                    pending -= 1
                    idle.append(actor)
                    continue
                if task is not None:
                    emit(*result)
                    pending -= 1
                idle.append(actor)
        finished = True
    finally:
        if not finished:  # an error or Ctrl-C: no episode in flight outlives the call
            for actor in list(pool.actors):
                pool.kill(ray, actor)


# -- front door --------------------------------------------------------------------------
class _OrderedWriter:
    """Buffers finished episodes and commits them to the store in episode order.

    Steps arrive as records (serial) or as an Arrow table in ``STEP_SCHEMA`` (from workers).
    """

    def __init__(self, store: TrajectoryStore, first_id: int, flush_steps: int, on_episode: Callable | None) -> None:
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
        if self.batch:
            records = [s for _, steps in self.batch if not isinstance(steps, pa.Table) for s in steps]
            tables = [steps for _, steps in self.batch if isinstance(steps, pa.Table)]
            self.store.append_tables(episodes_table([e for e, _ in self.batch]), pa.concat_tables([steps_table(records), *tables]))
            self.batch, self.batch_steps = [], 0


def rollout(
    spec: Any,
    policy: Any = "random",
    episodes: int | None = None,
    seeds: Iterable[int] | None = None,
    backend: str = "serial",
    workers: int | None = None,
    policy_seed: int = 0,
    out: str | Path | None = None,
    flush_steps: int = 50_000,
    progress: bool = False,
    allow_imports: Iterable[str] = (),
    episode_timeout: float | None = DEFAULT_EPISODE_TIMEOUT,
    ray_address: str | None = None,
    store_obs: str = "small",
    batch: int = 1,
) -> TrajectoryStore:
    """Roll ``policy`` out on ``spec`` once per seed and store the trajectories in ``out``.

    Args:
        spec: a :class:`~envharness.HarnessSpec`, its JSON or dict, or a Gymnasium env id.
        policy: ``"random"``, ``"reference"``, a saved-learner path, a policy object, or an
            ``env -> policy`` callable (needed for env-bound policies on parallel backends).
        episodes: number of episodes; seeds default to ``0 .. episodes-1``.
        seeds: one level seed per episode (overrides ``episodes``).
        backend: ``serial``, ``process`` (``workers`` processes, default all cores) or ``ray``
            (``workers`` actors, default one per CPU of the cluster; each keeps one env).
        policy_seed: seeds the policy's randomness together with each episode's seed.
        out: run directory to create or append to (default: a new temporary directory).
        flush_steps: commit a part to the store every this many steps.
        progress: show a progress bar.
        allow_imports: modules a ``module:Env`` id in the spec may import (none by default).
        episode_timeout: wall-clock seconds an episode may take (None: no limit); one that
            takes longer is recorded as failed with reason ``timeout (wall)``. The process and
            Ray backends kill its worker; the serial backend interrupts the episode with
            ``SIGALRM`` (in the main thread only) — use ``process`` for envs that hang in C code.
        ray_address: the Ray cluster to join (``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``);
            default ``RAY_ADDRESS``, and with neither a local Ray is started, once per process.
        store_obs: which observations are stored whole beside their digests: ``small`` (at
            most 64 numbers and 512 characters of JSON), ``fit`` (any that fits 512
            characters) or ``none``; see :func:`~envrigger.trajectory.inline_observation`.
        batch: on the serial backend, play this many episodes at once on as many envs, in
            lockstep, so that a policy with ``act_batch`` (PPO's network, a deterministic SB3
            model) chooses all their actions in one forward pass; the stored episodes are the
            serial ones.

    Ctrl-C commits every episode that finished, then raises ``KeyboardInterrupt``; ids of
    episodes that never ran are left out. One collection at a time may write to ``out``.

    Example:
        >>> store = rollout("FrozenLake-v1", "random", episodes=5)
        >>> len(store), sorted({e.seed for e in store.iter_episodes()})
        (5, [0, 1, 2, 3, 4])
    """
    if backend not in BACKENDS:
        raise TrajectoryError(f"backend: got {backend!r}; use one of {', '.join(BACKENDS)}")
    if batch < 1 or (batch > 1 and backend != "serial"):
        raise TrajectoryError(
            f"batch: got {batch} with backend {backend!r}; batch is a whole number >= 1, above 1 on the serial backend only"
        )
    if store_obs not in STORE_OBS:
        raise TrajectoryError(f"store_obs: got {store_obs!r}; use one of {', '.join(STORE_OBS)}")
    spec = (
        spec
        if isinstance(spec, HarnessSpec)
        else (HarnessSpec(env_id=spec) if isinstance(spec, str) and not spec.lstrip().startswith("{") else HarnessSpec.coerce(spec))
    )
    seed_list = list(seeds) if seeds is not None else list(range(episodes if episodes is not None else 10))
    if not seed_list:
        raise TrajectoryError("episodes: nothing to run; give episodes >= 1 or a non-empty seed list")
    factory = policy_factory(policy, policy_seed)
    allowed = tuple(allow_imports)
    # Fail here, in the caller, on a bad spec or policy, before anything is written.
    probe = spec.build(allow_imports=allowed)
    try:
        instance = factory(probe)
        _check_policy(instance, probe)
        path = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="envrigger-run-"))
        fresh = not (path / "run.json").exists()  # made by this call: removed again if it fails before storing anything
        store = TrajectoryStore.create(
            path,
            meta={
                "spec": spec.model_dump(mode="json"),
                "spec_hash": spec.hash(),
                "policy": str(policy) if isinstance(policy, (str, Path)) else type(policy).__name__,
            },
            exist_ok=True,
        )
    except BaseException:
        probe.close()
        raise
    try:
        lock = store.writing()
        lock.__enter__()  # one writer at a time, taken before any episode id is handed out
    except BaseException:
        probe.close()
        raise
    first = store.next_episode_id()
    tasks = [(first + i, int(s)) for i, s in enumerate(seed_list)]
    bar, on_episode = _progress(len(tasks)) if progress else (None, None)
    writer = _OrderedWriter(store, first, flush_steps, on_episode)
    interrupted, failed = False, True
    try:
        if backend == "serial" and batch > 1:
            spec_json, spec_hash = spec.to_json(indent=None), spec.hash()
            extra = [spec.build(allow_imports=allowed) for _ in range(min(batch, len(tasks)) - 1)]
            try:
                envs = [probe, *extra]
                _batched(
                    envs, [instance, *(factory(env) for env in extra)], tasks, writer, spec_hash, spec_json, store_obs, episode_timeout
                )
            finally:
                for env in extra:
                    env.close()
        elif backend == "serial":
            spec_json, spec_hash = spec.to_json(indent=None), spec.hash()
            for episode_id, seed in tasks:
                writer(*_serial_episode(probe, instance, episode_id, seed, spec_hash, spec_json, episode_timeout, store_obs))
        elif backend == "process":
            _process_backend(spec, factory, tasks, workers or os.cpu_count() or 1, writer, allowed, episode_timeout, store_obs)
        else:
            _ray_backend(spec, factory, tasks, workers, writer, allowed, episode_timeout, ray_address, store_obs)
        failed = False
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        try:
            probe.close()
            if bar is not None:
                bar.stop()
            writer.flush(everything=interrupted)
        finally:
            lock.__exit__(None, None, None)
            if fresh and failed and not interrupted and len(store) == 0:
                shutil.rmtree(path, ignore_errors=True)  # a first collect that failed leaves no empty run behind
    return store


def _progress(total: int) -> tuple[Any, Callable]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("collecting"), BarColumn(), MofNCompleteColumn(), TextColumn("success {task.fields[rate]}"), TimeRemainingColumn()
    )
    task = bar.add_task("episodes", total=total, rate="-")
    counts = {"n": 0, "ok": 0}
    bar.start()

    def advance(episode: EpisodeRecord) -> None:
        counts["n"] += 1
        counts["ok"] += episode.success
        bar.update(task, advance=1, rate=f"{counts['ok'] / counts['n']:.2f}")

    return bar, advance


__all__ = ["BACKENDS", "close_workers", "policy_factory", "rollout", "run_episode"]
