"""Rollouts: run a policy on a spec for many seeded episodes and store the trajectories.

Contains :func:`rollout`, :func:`backend_for`, :func:`run_episode`, :func:`policy_factory` and the three
backends: ``serial``, ``process`` (a pool of spawned workers that replaces a worker that
dies and retries its episode once) and ``ray`` (``pip install "envharness[ray]"``).

Determinism: episode *i* resets with ``seeds[i]`` and its policy is reseeded from
``(policy_seed, seeds[i])``, so the stored episodes are the same on every backend and for
any number of workers (only ``wall_time`` differs).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from envharness.polite_stop import say_kept
from envharness.spec import HarnessSpec
from envrigger.data import (
    STORE_OBS,
    EpisodeRecord,
    TrajectoryStore,
)
from envrigger.errors import RolloutError
from envrigger.rollout.batched import batched_backend
from envrigger.rollout.episode import DEFAULT_EPISODE_TIMEOUT, Abandoned, run_episode, serial_episode
from envrigger.rollout.factories import check_policy, policy_factory
from envrigger.rollout.process import close_pool, process_backend
from envrigger.rollout.ray_backend import RAY_POOL, ray_backend
from envrigger.rollout.writer import OrderedWriter

BACKENDS = ("serial", "process", "ray")
STOP_GRACE_S = 2.0  # seconds the episode threads get to end after a stop, before the process goes on without them


@atexit.register
def close_workers() -> None:
    """End the worker processes now: the process backend's, and the Ray actors and the local Ray this process started.

    They are otherwise kept for the next rollout, and end with this process.
    """
    close_pool()
    if RAY_POOL.actors or RAY_POOL.owned:
        RAY_POOL.close()


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
    flush_seconds: float | None = 10.0,
    progress: bool = False,
    allow_imports: Iterable[str] = (),
    episode_timeout: float | None = DEFAULT_EPISODE_TIMEOUT,
    ray_address: str | None = None,
    store_obs: str = "small",
    batch: int = 1,
    concurrency: int = 1,
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
        flush_steps: commit a part to the store once this many steps are ready.
        flush_seconds: also commit once a finished episode has waited this many seconds (None: no
            time bound), so it is on disk within seconds whatever the step count (an LLM agent's few, costly steps).
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
            characters) or ``none``; text is kept up to 1 MiB under both; see
            :func:`~envrigger.data.store.inline_observation`.
        batch: on the serial backend, play this many episodes at once on as many envs, in
            lockstep, so that a policy with ``act_batch`` (PPO's network, a deterministic SB3
            model) chooses all their actions in one forward pass; the stored episodes are the
            serial ones.
        concurrency: on the serial backend, keep this many episodes in flight at once, each
            on its own env and policy in a thread of this process: for policies that wait on
            the network (an LLM agent's model calls). Episodes are stored in episode order,
            the same for every value; the wall-time limit is the policy's own (per request).

    Ctrl-C commits every episode that finished, then raises ``KeyboardInterrupt``; ids of
    episodes that never ran are left out, episodes in flight are abandoned (a thread's
    before its next action, a worker process's at once). Under
    :class:`~envharness.polite_stop.polite_stops` (every command line) SIGTERM and SIGHUP do
    the same, and the stop says how many episodes were kept. One collection at a time may
    write to ``out``.

    Example:
        >>> store = rollout("FrozenLake-v1", "random", episodes=5)
        >>> len(store), sorted({e.seed for e in store.iter_episodes()})
        (5, [0, 1, 2, 3, 4])
    """
    if backend not in BACKENDS:
        raise RolloutError(f"backend: got {backend!r}; use one of {', '.join(BACKENDS)}")
    if batch < 1 or (batch > 1 and backend != "serial"):
        raise RolloutError(f"batch: got {batch} with backend {backend!r}; batch is a whole number >= 1, above 1 on the serial backend only")
    if concurrency < 1 or (concurrency > 1 and (backend != "serial" or batch > 1)):
        raise RolloutError(
            f"concurrency: got {concurrency} with backend {backend!r}; it is a whole number >= 1, above 1 on the serial backend without batch"
        )
    if store_obs not in STORE_OBS:
        raise RolloutError(f"store_obs: got {store_obs!r}; use one of {', '.join(STORE_OBS)}")
    spec = (
        spec
        if isinstance(spec, HarnessSpec)
        else (HarnessSpec(env_id=spec) if isinstance(spec, str) and not spec.lstrip().startswith("{") else HarnessSpec.coerce(spec))
    )
    seed_list = list(seeds) if seeds is not None else list(range(episodes if episodes is not None else 10))
    if not seed_list:
        raise RolloutError("episodes: nothing to run; give episodes >= 1 or a non-empty seed list")
    factory = policy_factory(policy, policy_seed)
    allowed = tuple(allow_imports)
    # Fail here, in the caller, on a bad spec or policy, before anything is written.
    probe = spec.build(allow_imports=allowed)
    try:
        instance = factory(probe)
        check_policy(instance, probe)
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
    tasks: list[tuple[int, int | None]] = [(first + i, int(s)) for i, s in enumerate(seed_list)]
    bar, on_episode = _progress(len(tasks)) if progress else (None, None)
    writer = OrderedWriter(store, first, flush_steps, on_episode, flush_seconds)
    stop: KeyboardInterrupt | None = None
    failed = True
    try:
        if backend == "serial" and batch > 1:
            spec_json, spec_hash = spec.to_json(indent=None), spec.hash()
            extra = [spec.build(allow_imports=allowed) for _ in range(min(batch, len(tasks)) - 1)]
            try:
                envs = [probe, *extra]
                batched_backend(
                    envs, [instance, *(factory(env) for env in extra)], tasks, writer, spec_hash, spec_json, store_obs, episode_timeout
                )
            finally:
                for env in extra:
                    env.close()
        elif backend == "serial" and concurrency > 1:
            _threaded(spec, allowed, probe, instance, factory, tasks, writer, concurrency, store_obs)
        elif backend == "serial":
            spec_json, spec_hash = spec.to_json(indent=None), spec.hash()
            for episode_id, seed in tasks:
                writer(*serial_episode(probe, instance, episode_id, seed, spec_hash, spec_json, episode_timeout, store_obs))
        elif backend == "process":
            process_backend(spec, factory, tasks, workers or os.cpu_count() or 1, writer, allowed, episode_timeout, store_obs)
        else:
            ray_backend(spec, factory, tasks, workers, writer, allowed, episode_timeout, ray_address, store_obs)
        failed = False
    except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM or SIGHUP under polite_stops
        stop = interrupt
        raise
    finally:
        try:
            probe.close()
            if bar is not None:
                bar.stop()
            writer.flush(everything=stop is not None)
        finally:
            writer.close()
            lock.__exit__(None, None, None)
            if fresh and failed and stop is None and len(store) == 0:
                shutil.rmtree(path, ignore_errors=True)  # a first collect that failed leaves no empty run behind
        if stop is not None:
            say_kept(stop, f"{writer.committed} finished episode{'s' if writer.committed != 1 else ''} kept in {path}")
    return store


def backend_for(policy: Any, backend: str, workers: int | None, batch: int) -> dict[str, Any]:
    """:func:`rollout`'s backend arguments for ``policy``: lockstep in this process when it acts in batches, else ``backend``.

    A policy whose class has ``act_batch`` (the PPO learner's network) plays ``batch``
    episodes at once here, one forward pass for all of them: faster than a process pool on
    the same cores, and the stored episodes are the same (see :func:`rollout`). Any other
    policy, or ``batch`` 1, runs on ``backend`` with ``workers``.

    Example:
        >>> backend_for("random", "process", 2, 32)
        {'backend': 'process', 'workers': 2}
    """
    if batch > 1 and callable(getattr(type(policy), "act_batch", None)):
        return {"backend": "serial", "batch": batch}
    return {"backend": backend, "workers": workers}


def _threaded(
    spec: HarnessSpec, allowed: tuple[str, ...], probe: Any, instance: Any, factory: Any, tasks: list[tuple[int, int | None]],
    writer: Any, concurrency: int, store_obs: str,
) -> None:  # fmt: skip
    """Episodes in ``concurrency`` threads, each with its own env and policy; the writer is fed from this thread, in order.

    On a stop (or an error) every thread abandons its episode before its next action, so no
    model call is paid for after it; the threads are daemons, given ``STOP_GRACE_S`` to end
    (an episode whose last step ends meanwhile is kept), so one waiting on a slow model never
    holds the process. The first thread plays on ``probe``, which the caller closes.
    """
    import queue
    import threading

    spec_json, spec_hash = spec.to_json(indent=None), spec.hash()
    todo: queue.SimpleQueue[tuple[int, int | None]] = queue.SimpleQueue()
    for task in tasks:
        todo.put(task)
    results: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    stop = threading.Event()

    def play(env: Any, policy: Any) -> None:
        own = env is None
        try:
            if own:
                env = spec.build(allow_imports=allowed)
                policy = factory(env)
            while not stop.is_set():
                try:
                    episode_id, seed = todo.get_nowait()
                except queue.Empty:
                    return
                results.put((True, run_episode(env, policy, episode_id, seed, spec_hash, spec_json, store_obs, stop)))
        except Abandoned:
            return
        except BaseException as error:  # noqa: BLE001 - raised in the caller's thread
            results.put((False, error))
        finally:
            if own and env is not None:
                env.close()

    threads = [
        threading.Thread(target=play, args=(probe, instance) if i == 0 else (None, None), name=f"envrigger-episode-{i}", daemon=True)
        for i in range(min(concurrency, len(tasks)))
    ]
    for thread in threads:
        thread.start()
    answered = 0
    try:
        while answered < len(tasks):
            ok, payload = results.get()
            answered += 1
            if not ok:
                raise payload
            writer(*payload)
    finally:
        stop.set()
        until = time.monotonic() + STOP_GRACE_S
        for thread in threads:  # all done, they are closing their envs: wait; else give them the grace only
            thread.join(timeout=None if answered == len(tasks) else max(0.0, until - time.monotonic()))
        if answered < len(tasks):  # episodes that ended while the threads stopped: finished, so kept
            while True:
                try:
                    ok, payload = results.get_nowait()
                except queue.Empty:
                    break
                if ok:
                    writer(*payload)


def _progress(total: int) -> tuple[Any, Callable[..., Any]]:
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
