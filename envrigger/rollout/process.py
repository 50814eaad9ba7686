"""The ``process`` backend: a pool of spawned worker processes, kept for the next rollout.

A worker that dies is replaced and its episode retried once; a second death is recorded
as the episode's error. Workers send steps back as Arrow columns.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

import cloudpickle

from envharness.spec import HarnessSpec
from envharness.transforms.base import import_modules, user_modules
from envrigger.data import (
    steps_table,
)
from envrigger.errors import RolloutError
from envrigger.rollout.episode import WALL_TIMEOUT, error_line, failed_episode, run_episode
from envrigger.rollout.factories import PolicyFactory


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


CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)


def _default_crash_signals() -> None:
    """Let a crash in native code kill the worker with its own signal.

    pygame (imported by MiniGrid and others) installs a handler that turns a segfault into
    an abort, so the parent read ``killed by SIGABRT`` and a user looked for an assertion.
    Re-armed before every episode because an env may import pygame at any step.
    """
    for crash in CRASH_SIGNALS:
        signal.signal(crash, signal.SIG_DFL)


# -- process backend ---------------------------------------------------------------------
def _leave(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _worker_main(conn: Any) -> None:
    """Worker loop: on ``("setup", ...)`` build the env and policy (closing the last ones), on ``("run", task)`` play an episode."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it commits what finished, then ends us
    signal.signal(signal.SIGTERM, _leave)  # the parent abandoning our episode on a stop: the env is closed on the way out
    env = policy = None
    spec_hash = spec_json = ""
    store_obs = "small"
    try:
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
                    conn.send(("setup_error", error_line(exc)))
                    return
                conn.send(("ready", None))
            else:
                episode_id, seed = payload
                _default_crash_signals()
                record, steps = run_episode(env, policy, episode_id, seed, spec_hash, spec_json, store_obs)
                conn.send(("done", (record, steps_table(steps))))  # columns pickle far faster than a list of records
    finally:
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
    :func:`~envrigger.rollout.close_workers` ends them early.
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


def close_pool() -> None:
    """End the pool's worker processes now (a later rollout starts new ones)."""
    global _POOL
    if _POOL is not None:
        _POOL.close()
        _POOL = None


def process_backend(
    spec: HarnessSpec,
    factory: PolicyFactory,
    tasks: list[tuple[int, int | None]],
    workers: int,
    emit: Callable[..., Any],
    allow_imports: tuple[str, ...] = (),
    episode_timeout: float | None = None,
    store_obs: str = "small",
) -> None:
    """The process backend: ``tasks`` (episode id, seed) played by ``workers`` processes, each finished episode to ``emit``."""
    spec_json, spec_hash = spec.to_json(indent=None), spec.hash()
    pool = _shared_pool()
    pool.configure(min(workers, len(tasks)), spec_json, cloudpickle.dumps(factory), allow_imports, store_obs)
    finished = False
    queue = list(reversed(tasks))
    attempts: dict[int, int] = {}
    pending, startup_failures = len(tasks), 0
    try:
        while pending:
            for free in pool.workers:
                if free["ready"] and free["task"] is None and queue:
                    task = queue.pop()
                    free["task"], free["since"] = task, time.monotonic()
                    attempts[task[0]] = attempts.get(task[0], 0) + 1
                    free["conn"].send(("run", task))
            if episode_timeout:  # a hung episode: kill its worker, record it, go on with a fresh worker
                now = time.monotonic()
                for hung in [w for w in pool.workers if w["task"] is not None and now - w["since"] >= episode_timeout]:
                    task = hung["task"]
                    hung["process"].kill()
                    pool.replace(hung)
                    message = f"the episode took more than {episode_timeout:g} s; its worker was killed"
                    emit(failed_episode(task[0], task[1], spec_hash, spec_json, message, WALL_TIMEOUT), [])
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
                            raise RolloutError(
                                f"rollout: worker processes die at start-up (exit code {code}); run from a script file "
                                "(not stdin) or use backend='serial'"
                            ) from None
                    pool.replace(worker)
                    if task is None:
                        continue
                    if attempts[task[0]] < 2:
                        queue.append(task)
                    else:
                        emit(failed_episode(task[0], task[1], spec_hash, spec_json, f"worker process {_death(code)} twice"), [])
                        pending -= 1
                    continue
                if kind == "setup_error":
                    raise RolloutError(f"rollout: workers could not build the env or policy ({payload}); check the spec and policy")
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
            for worker in pool.workers:
                if worker["task"] is not None:
                    worker["process"].terminate()  # its episode is abandoned (a stop, an error): no waiting for it to end
            close_pool()
