"""A wrapped env over HTTP: :func:`create_app` (a FastAPI app) and :func:`serve` (run it with uvicorn until stopped).

Routes (JSON in and out; errors are ``{"error": "one line"}`` with a status code):

- ``GET /healthz``: liveness and the number of open sessions.
- ``GET /v1/spec``: the spec and both spaces described as JSON (:func:`envharness.wire.describe_space`).
- ``POST /v1/sessions`` ``{"seed": S, "options": {...}}``: a new episode, ``{session_id, observation, info}``.
- ``POST /v1/sessions/{id}/step`` ``{"action": A}``: ``{observation, reward, terminated, truncated, info}``
  with the verdict in ``info["verdict"]``; an action is decoded and refused exactly as
  in-process (400); a step after the episode ended is refused (409).
- ``DELETE /v1/sessions/{id}``: close it.

The verdict is computed here, by the harness, from the base env: nothing a client sends
can change it (an ``info`` or a verdict in a request is not read; unknown fields are
refused). A bearer token (``Authorization: Bearer ...``) is required whenever one is set,
and one must be set to bind to anything but loopback. Bodies over ``max_body`` bytes get
413, sessions past ``max_sessions`` get 429 (a place is reserved before a session is built,
so simultaneous opens never exceed it), sessions idle past ``idle_timeout`` seconds are
closed (by a reaper that runs for as long as the app does), a body must arrive within
``body_timeout`` seconds (408). With a ``recorder`` (``--record RUN`` on the CLI), every
episode a session plays is handed to it when it ends (see :class:`Recorder`).

A session's state changes only under its own lock, and a session ends exactly once: the
first of close, the reaper, or an env that raised ends it, records it and releases its
env; the others find it gone (404). The token gates every route through one middleware
(:class:`envharness.httpguard.Gate`), and the framework's own routes (OpenAPI, docs) are
off.

(No ``from __future__ import annotations`` here: FastAPI reads the routes' annotations,
and ``Request`` is imported inside :func:`create_app`, so fastapi stays optional.)
"""

import contextlib
import ipaddress
import json
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from envharness.errors import ActionError, EnvHarnessError, EpisodeEndedError, SpecError
from envharness.httpguard import DEPTH, Gate, HTTPError, Redactor, first_line, parse_json, read_body
from envharness.wire import decode, describe_space, encode

__all__ = ["EnvService", "HTTPError", "Recorder", "Session", "background", "create_app", "is_loopback", "run_until_stopped", "serve"]

LOOPBACK = ("127.0.0.1", "::1", "localhost")


class Recorder(Protocol):
    """Where a server's episodes go (``envrigger`` provides one that writes a run directory, under the entry point
    group ``envharness.recorders``, name ``store``). ``steps`` are ``(action, obs, reward, terminated, truncated,
    info, wall time)``; ``opened`` is the session's wall-clock start."""

    def record(self, spec: Any, env: Any, session_id: str, seed: int | None, steps: list[tuple[Any, ...]], verdict: Any, info: dict[str, Any],
               error: str | None, wall_time: float, opened: float) -> None: ...  # fmt: skip


@dataclass
class Session:
    env: Any
    seed: int | None
    info: dict[str, Any]
    started: float = field(default_factory=time.perf_counter)
    used: float = field(default_factory=time.monotonic)
    steps: list[tuple[Any, ...]] = field(default_factory=list)  # (action, obs, reward, terminated, truncated, info, wall time)
    opened: float = field(default_factory=time.time)  # wall clock: the model calls of a session are joined to its steps by time
    done: bool = False  # the episode ended (terminated or truncated); the session stays open until closed
    recorded: bool = False
    closed: bool = False  # ended, recorded and its env released: set once, under ``lock``, by whichever path got there first
    lock: threading.Lock = field(default_factory=threading.Lock)  # every change to this session happens under it


def is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class EnvService:
    """The sessions of one served spec, independent of the web framework (the app's routes call it).

    Example:
        >>> from envharness import HarnessSpec
        >>> service = EnvService(HarnessSpec(env_id="CartPole-v1"))
        >>> opened = service.open({"seed": 0})
        >>> step = service.step(opened["session_id"], {"action": 1})
        >>> sorted(step), step["info"]["verdict"]["reason"]
        (['info', 'observation', 'reward', 'terminated', 'truncated'], 'in progress')
    """

    def __init__(self, spec: Any, max_sessions: int = 64, idle_timeout: float = 600.0, recorder: Recorder | None = None,
                 allow_imports: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.spec, self.max_sessions, self.idle_timeout, self.recorder = spec, max_sessions, idle_timeout, recorder
        self.allow_imports = allow_imports
        probe = spec.build(allow_imports=list(allow_imports))
        self.observation_space, self.action_space = probe.observation_space, probe.action_space
        self.described = {
            "spec": json.loads(spec.to_json()),
            "observation_space": describe_space(probe.observation_space),
            "action_space": describe_space(probe.action_space),
        }
        self._idle: list[Any] = [probe]  # built envs waiting for a session (building one costs more than a reset)
        self.sessions: dict[str, Session] = {}
        self.lock = threading.Lock()  # owns sessions, _idle and _opening: the registry, the pool and the reservations
        self._opening = 0  # places reserved by opens still building or resetting their env
        self.recorded = 0  # episodes handed to the recorder (what a stop says was kept)
        self._resetting = threading.Lock()

    # -- sessions ----------------------------------------------------------------------
    def open(self, body: dict[str, Any]) -> dict[str, Any]:
        _only(body, {"seed", "options"}, "POST /v1/sessions")
        seed, options = body.get("seed"), body.get("options")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
            raise HTTPError(400, f"seed: got {str(seed)[:40]}; give a whole number >= 0, or leave it out")
        if options is not None and not isinstance(options, dict):
            raise HTTPError(400, "options: give a JSON object, or leave it out")
        self.reap()
        with self.lock:  # the place is reserved here, atomically with the check: simultaneous opens never exceed the limit
            if len(self.sessions) + self._opening >= self.max_sessions:
                raise HTTPError(
                    429, f"{self.max_sessions} sessions are open or opening, the most this server allows; close one (DELETE) and retry"
                )
            self._opening += 1
            reserved = True
            env = self._idle.pop() if self._idle else None
        try:
            # One build or reset at a time: some families load their levels with code that is not thread-safe (TextWorld's parser).
            with self._resetting:
                if env is None:
                    env = self.spec.build(allow_imports=list(self.allow_imports))
                try:
                    obs, info = env.reset(seed=seed, options=options)
                except EnvHarnessError as error:  # a refusal: the env is as it was, and goes back to the pool
                    self._release(env, reusable=True)
                    raise HTTPError(400, f"reset refused: {first_line(error)}") from None
                except Exception as error:  # the env raised: closed, never reused
                    self._release(env, reusable=False)
                    if options:
                        raise HTTPError(400, f"reset refused: {type(error).__name__}: {first_line(error, 200)}; check options") from None
                    raise HTTPError(500, f"the env raised {type(error).__name__} at reset: {first_line(error, 200)}") from None
            session_id = secrets.token_hex(8)
            with self.lock:  # the reservation becomes the session in one move
                self.sessions[session_id] = Session(env, seed, dict(info))
                self._opening -= 1
                reserved = False
        finally:
            if reserved:  # refused or failed: the place is free again
                with self.lock:
                    self._opening -= 1
        return {"session_id": session_id, "observation": encode(obs), "info": encode(info)}

    def step(self, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        _only(body, {"action"}, "POST /v1/sessions/{id}/step")
        if "action" not in body:
            raise HTTPError(400, 'the body needs "action": {"action": ...}')
        session = self._session(session_id)
        with session.lock:
            if session.closed:  # ended by another path while this request waited: its env is no longer this session's
                raise _gone(session_id)
            session.used = time.monotonic()
            try:
                action = decode(self.action_space, body["action"])
            except ActionError as error:
                raise HTTPError(400, first_line(error)) from None
            except Exception as error:  # what the client sent cannot be read as an action: its problem, not the episode's
                raise HTTPError(400, f"action: cannot be read ({type(error).__name__}); send a value of {self.action_space}") from None
            try:
                obs, reward, terminated, truncated, info = session.env.step(action)
            except EpisodeEndedError:
                raise HTTPError(409, f"session {session_id}: the episode has ended; open a new session to play again") from None
            except ActionError as error:
                raise HTTPError(400, first_line(error)) from None
            except Exception as error:  # the env raised: the episode ends, recorded with its error
                self._end(session_id, session, f"{type(error).__name__}: {first_line(error)}")
                raise HTTPError(
                    500, f"the env raised {type(error).__name__}; the episode ended and session {session_id} is closed"
                ) from None
            session.steps.append((action, obs, reward, terminated, truncated, info, time.time()))
            session.used = time.monotonic()
            if terminated or truncated:
                session.done = True
                self._record(session_id, session, None)
        return {"observation": encode(obs), "reward": encode(float(reward)), "terminated": bool(terminated), "truncated": bool(truncated),
                "info": encode(info)}  # fmt: skip

    def close(self, session_id: str) -> dict[str, Any]:
        session = self._session(session_id)
        with session.lock:
            if not self._end(session_id, session, None if session.done else "the client closed the session before the episode ended"):
                raise _gone(session_id)  # another close, or the reaper, ended it first
        return {"closed": session_id}

    def reap(self) -> int:
        """Close every session idle past the timeout; how many were closed."""
        now = time.monotonic()
        with self.lock:
            stale = [(k, s) for k, s in self.sessions.items() if now - s.used > self.idle_timeout]
        closed = 0
        for session_id, session in stale:
            if not session.lock.acquire(blocking=False):
                continue  # a request holds it: the session is in use, not idle
            try:
                if time.monotonic() - session.used > self.idle_timeout:  # still idle, now that nothing else can touch it
                    closed += self._end(session_id, session, f"the session was idle for more than {self.idle_timeout:g} s")
            finally:
                session.lock.release()
        return closed

    def count(self) -> int:
        with self.lock:
            return len(self.sessions)

    # -- inside --------------------------------------------------------------------------
    def _session(self, session_id: str) -> Session:
        with self.lock:
            session = self.sessions.get(session_id)
        if session is None:
            raise _gone(session_id)
        return session

    def _end(self, session_id: str, session: Session, error: str | None) -> bool:
        """End ``session`` (its lock held): record it, unregister it, release its env, once; False if it had ended already."""
        if session.closed:
            return False
        session.closed = True
        try:
            self._record(session_id, session, error)
        finally:
            with self.lock:
                self.sessions.pop(session_id, None)
            self._release(session.env, reusable=error is None or session.done)
        return True

    def _record(self, session_id: str, session: Session, error: str | None) -> None:
        if self.recorder is None or session.recorded or not (session.steps or session.done):
            return  # nothing was played: no episode to keep
        session.recorded = True
        verdict = session.steps[-1][5].get("verdict") if session.steps and error is None else None
        self.recorder.record(self.spec, session.env, session_id, session.seed, session.steps, verdict, session.info, error,
                             time.perf_counter() - session.started, session.opened)  # fmt: skip
        with self.lock:
            self.recorded += 1

    def _release(self, env: Any, reusable: bool) -> None:
        """``env`` back to the pool (at most 8 wait there), or closed; called once per env a session or an open held."""
        if reusable:
            with self.lock:
                if len(self._idle) < 8:
                    self._idle.append(env)
                    return
        try:
            env.close()
        except Exception:  # noqa: BLE001, S110 - an env that fails to close is dropped all the same
            pass


def _gone(session_id: str) -> HTTPError:
    return HTTPError(404, f"no session {session_id[:40]!r}; open one with POST /v1/sessions (idle sessions are closed)")


def _only(body: Any, allowed: set[str], route: str) -> None:
    if not isinstance(body, dict):
        raise HTTPError(400, f"{route}: the body must be a JSON object")
    extra = sorted(set(body) - allowed)
    if extra:  # a forged info or verdict is refused, not ignored silently
        raise HTTPError(
            400, f"{route}: unknown field {extra[0]!r}; send only {', '.join(sorted(allowed))} (the server computes info and the verdict)"
        )


def _reaper(service: EnvService) -> Callable[[], None]:
    """A thread closing ``service``'s idle sessions every ``min(5, idle_timeout / 4)`` s; the function that stops it."""
    stop = threading.Event()

    def reap() -> None:
        while not stop.wait(min(5.0, max(service.idle_timeout / 4, 0.05))):
            try:
                service.reap()
            except Exception:  # noqa: BLE001, S112 - a recorder that failed once must not stop the reaping
                continue

    threading.Thread(target=reap, daemon=True, name="envharness-reaper").start()
    return stop.set


def create_app(service: EnvService, token: str | None = None, max_body: int = 1 << 20, body_timeout: float = 30.0) -> Any:
    """The FastAPI app over ``service``: every route but ``/healthz`` behind ``token`` when one is set, bodies limited to
    ``max_body`` bytes and ``body_timeout`` seconds, the framework's own routes (OpenAPI, docs) off, and, while the app
    runs, a reaper closing idle sessions."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    scrub = Redactor([token])

    @contextlib.asynccontextmanager
    async def running(app: Any) -> AsyncIterator[None]:
        stop = _reaper(service)
        try:
            yield
        finally:
            stop()

    app = FastAPI(title="envharness serve", description=f"{service.spec.env_id}, served with its verdict enforced", openapi_url=None,
                  docs_url=None, redoc_url=None, lifespan=running)  # fmt: skip

    def render(status: int, message: str) -> bytes:
        return json.dumps({"error": scrub.text(first_line(message, 500))}).encode()

    app.add_middleware(Gate, token=token, render=render)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": scrub.text(first_line(message, 500))}, status_code=status)

    async def body_of(request: Request) -> Any:
        raw = await read_body(request, max_body, body_timeout)
        if not raw:
            return {}
        try:
            return parse_json(raw, limit=DEPTH)
        except ValueError as problem:
            raise HTTPError(400, f"{problem}; send a JSON object") from None

    @app.exception_handler(HTTPError)
    async def refused(request: Request, exc: HTTPError) -> JSONResponse:
        return error(exc.status, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def routed(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return error(404, f"no route {request.method} {request.url.path[:80]}; the routes are /healthz, /v1/spec and /v1/sessions")
        if exc.status_code == 405:
            return error(405, f"{request.method} is not allowed on {request.url.path[:80]}; see the routes in the docs (live-harness.md)")
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error(400, f"the request is not valid for {request.url.path[:80]}")

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:  # the env raised at reset, say: one line, no traceback
        return error(500, f"the server failed: {type(exc).__name__}: {first_line(exc, 200)}")

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "env_id": service.spec.env_id, "sessions": service.count()}

    @app.get("/v1/spec")
    def spec() -> dict[str, Any]:
        return service.described

    @app.post("/v1/sessions")
    async def open_session(request: Request) -> Any:
        body = await body_of(request)
        return await run_in_threadpool(service.open, body)

    @app.post("/v1/sessions/{session_id}/step")
    async def step(session_id: str, request: Request) -> Any:
        body = await body_of(request)
        return await run_in_threadpool(service.step, session_id, body)

    @app.delete("/v1/sessions/{session_id}")
    async def close(session_id: str) -> Any:
        return await run_in_threadpool(service.close, session_id)

    return app


def serve(service: EnvService, host: str = "127.0.0.1", port: int = 8000, token: str | None = None, max_body: int = 1 << 20,
          body_timeout: float = 30.0) -> None:  # fmt: skip
    """Run the app with uvicorn until stopped (its reaper closes idle sessions); see :func:`run_until_stopped`."""
    if token is None and not is_loopback(host):
        raise SpecError(f"--host {host} is not loopback: set a bearer token with --token-env NAME (the variable holding it)")
    run_until_stopped(create_app(service, token, max_body, body_timeout), host, port)


STOP_GRACE_S = 5  # seconds the requests in flight at a stop get to finish before they are cut


def run_until_stopped(app: Any, host: str, port: int) -> None:
    """Serve ``app`` with uvicorn until Ctrl-C, SIGTERM or SIGHUP; then stop politely and pass the stop on.

    The listener closes, the requests in flight get ``STOP_GRACE_S`` seconds to finish (an
    episode's last step, a model call: recorded and answered), the app's lifespan ends, and
    the signal is raised again for the caller's handler: under
    :class:`~envharness.polite_stop.polite_stops` (every command line), :class:`~envharness.polite_stop.Stopped`.
    uvicorn does this for SIGINT and SIGTERM; SIGHUP, which it leaves alone, is added here.
    """
    import asyncio
    import signal

    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            with super().capture_signals():  # raises what it caught again on the way out, once its handlers are back
                if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
                    yield
                    return
                before = signal.signal(signal.SIGHUP, self.handle_exit)
                try:
                    yield
                finally:
                    signal.signal(signal.SIGHUP, before)

        async def shutdown(self, sockets: Any = None) -> None:
            # An app that can end its own work in flight (the proxy: its upstream calls) does so a second before the
            # grace is over, so each is answered and recorded rather than cancelled; nothing then outlives the process.
            cut = getattr(getattr(app, "state", None), "cut_in_flight", None)
            timer = asyncio.get_running_loop().call_later(max(STOP_GRACE_S - 1, 0), cut) if callable(cut) else None
            try:
                await super().shutdown(sockets)
            finally:
                if timer is not None:
                    timer.cancel()

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=STOP_GRACE_S)
    Server(config).run()


class background:  # noqa: N801 - used like a function: background(service) -> a running server
    """Serve ``service`` on a free loopback port in a thread (for tests, notebooks and benchmarks); ``url`` and ``stop()``."""

    def __init__(self, service: EnvService, token: str | None = None, max_body: int = 1 << 20, body_timeout: float = 30.0) -> None:
        import socket

        import uvicorn

        # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted sockets only then (else Nagle costs ~40 ms a request).
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(create_app(service, token, max_body, body_timeout), log_level="error", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
