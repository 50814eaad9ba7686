"""The ``ray`` backend: episodes on Ray actors, locally or on a cluster (``pip install "envharness[ray]"``)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import cloudpickle
import pyarrow as pa

from envharness.spec import HarnessSpec
from envharness.transforms.base import import_modules, user_modules
from envrigger.data import (
    EpisodeRecord,
    steps_table,
)
from envrigger.errors import RolloutError
from envrigger.rollout.episode import WALL_TIMEOUT, error_line, failed_episode, run_episode
from envrigger.rollout.factories import PolicyFactory


# -- ray backend -------------------------------------------------------------------------
class _RayWorker:
    """A Ray actor: builds the env and policy once per rollout call, then plays the episodes sent to it."""

    def __init__(self) -> None:
        self.env: Any = None
        self.policy: Any = None
        self.spec_hash = self.spec_json = ""
        self.store_obs = "small"

    def setup(
        self,
        spec_json: str,
        factory_bytes: bytes,
        allow_imports: tuple[str, ...],
        modules: tuple[tuple[str, str | None], ...],
        store_obs: str,
    ) -> None:
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
            raise RolloutError('backend ray: Ray is not installed; pip install "envharness[ray]"') from None
        address = address or os.environ.get("RAY_ADDRESS") or None
        key = repr((address, os.getcwd(), sys.path, os.environ.get("PYTHONPATH"), tuple(user_modules())))
        if ray.is_initialized() and not self.owned:
            return ray  # the caller's own ray.init: theirs to manage
        if ray.is_initialized() and key != self.key:
            self.close()
        if not ray.is_initialized():
            quiet: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
            if address:
                _reachable(address)  # Ray itself retries an unreachable address for minutes
            try:
                if address:
                    ray.init(address=address, **quiet)
                else:
                    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, **quiet)
            except ConnectionError as error:
                raise RolloutError(
                    f"backend ray: cannot join the Ray cluster at {address} ({error_line(error)}); is it running (`ray status`)? "
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


RAY_POOL = _RayPool()


def _reachable(address: str) -> None:
    """Refuse at once a ``HOST:PORT`` (or ``ray://HOST:PORT``) where nothing listens; ``auto`` is Ray's to resolve."""
    import socket

    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        if address != "auto":
            raise RolloutError(f"backend ray: {address!r} is not a Ray address; give auto, HOST:PORT or ray://HOST:PORT")
        return
    try:
        connection = socket.create_connection((host, int(port)), timeout=5)
    except OSError as error:
        raise RolloutError(
            f"backend ray: cannot reach a Ray cluster at {address} ({error.strerror or error}); start one with "
            "`ray start --head`, or name none (no --ray-address, RAY_ADDRESS unset) to start a local one"
        ) from None
    # Something listens; Ray's GCS and its client server speak gRPC, whose HTTP/2 answers the connection preface with a
    # SETTINGS frame. Anything else (a web server, a port that accepts and says nothing) would hold ray.init for minutes.
    with connection:
        try:
            connection.settimeout(PROBE_SECONDS)
            connection.sendall(_HTTP2_PREFACE)
            answer = b""
            while len(answer) < 9 and (chunk := connection.recv(9 - len(answer))):
                answer += chunk
        except OSError:
            answer = b""
    if len(answer) < 9 or answer[3] != 0x04:
        raise RolloutError(
            f"backend ray: {address} answers, but not as a Ray cluster (no gRPC answer within {PROBE_SECONDS:g} s); give the "
            "head node's GCS address (`ray status` prints it; port 6379 by default) or ray://HOST:10001 for Ray Client"
        )


PROBE_SECONDS = 5.0
"""How long :func:`_reachable` waits for an address to answer as a Ray cluster does (a gRPC server's first HTTP/2 frame)."""
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # and an empty SETTINGS


def ray_backend(
    spec: HarnessSpec,
    factory: PolicyFactory,
    tasks: list[tuple[int, int | None]],
    workers: int | None,
    emit: Callable[..., Any],
    allow_imports: tuple[str, ...] = (),
    episode_timeout: float | None = None,
    address: str | None = None,
    store_obs: str = "small",
) -> None:
    """The Ray backend: ``tasks`` (episode id, seed) played by Ray actors on a cluster, each finished episode to ``emit``."""
    pool = RAY_POOL
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
                actor, next_task = idle.pop(), queue.pop()
                attempts[next_task[0]] = attempts.get(next_task[0], 0) + 1
                flight[actor.run.remote(next_task)] = (actor, next_task, time.monotonic())
            now = time.monotonic()
            if episode_timeout:  # a hung episode: kill its actor, record it, go on with a fresh one
                for ref, (actor, hung, since) in list(flight.items()):
                    if hung is not None and now - since >= episode_timeout:
                        del flight[ref]
                        replace(actor)
                        message = f"the episode took more than {episode_timeout:g} s; its worker was killed"
                        emit(failed_episode(hung[0], hung[1], spec_hash, spec_json, message, WALL_TIMEOUT), [])
                        pending -= 1
                if not pending:
                    break
            waits = [since + episode_timeout - now for _, sent, since in flight.values() if sent is not None] if episode_timeout else []
            done, _ = ray.wait(list(flight), num_returns=1, timeout=max(0.0, min(waits)) if waits else None)
            for ref in done:
                actor, task, _ = flight.pop(ref)
                try:
                    result = ray.get(ref)
                except RayActorError as error:  # the actor's process died (or could not start)
                    if task is None:
                        startup_failures += 1
                        if startup_failures > 2 * len(actors):
                            raise RolloutError(f"rollout: Ray workers die at start-up ({error_line(error)}); check the cluster") from None
                    replace(actor)
                    if task is None:
                        continue
                    if attempts[task[0]] < 2:
                        queue.append(task)
                    else:
                        emit(failed_episode(task[0], task[1], spec_hash, spec_json, f"ray worker failed twice: {error_line(error)}"), [])
                        pending -= 1
                    continue
                except RayTaskError as error:
                    cause = error_line(error.cause) if getattr(error, "cause", None) is not None else error_line(error)
                    if task is None:
                        raise RolloutError(
                            f"rollout: Ray workers could not build the env or policy ({cause}); check the spec and policy"
                        ) from None
                    emit(failed_episode(task[0], task[1], spec_hash, spec_json, f"ray worker: {cause}"), [])
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
