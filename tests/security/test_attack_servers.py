"""Attacks on the two servers of the live harness, `envharness serve` and `envrigger proxy`, as hostile clients and upstreams.

Issue 43, by root cause:

1. check-then-act and double release: dozens of real parallel clients open, step and close
   sessions at once (and race the idle reaper) against a limit and one shared env pool;
2. every route behind the same gate: the apps' routes are enumerated (``app.routes``, and
   the routes the framework adds by itself) and each is called without the token;
3. total decoding, both directions: hostile bodies from clients, and hostile answers from
   a scripted upstream (raw bytes on a socket: wrong types, non-object chunks, repeated
   ``[DONE]``, unterminated or cut streams, invalid JSON, bad status lines);
4. secrets never stored: an upstream that echoes the caller's key, in an error body or a
   completion, and a caller that sends it in a message;
7. deadlines are totals: an upstream (or a client) that drips bytes, each before the
   per-read timeout.

Every server here is real and on 127.0.0.1: `envharness serve` as a subprocess (the CLI),
or the apps under uvicorn in a thread where the test needs a setting the CLI does not
expose; clients are threads speaking HTTP (``urllib``, ``httpx``, the ``openai`` client).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv
from servers import free_port, start

import envharness
from envharness import HarnessSpec

pytest.importorskip("fastapi", reason='serving needs the serve extra: pip install "envharness[serve]"')
httpx = pytest.importorskip("httpx")

from envharness.serve import EnvService, background, create_app  # noqa: E402
from envrigger.agents.chat import decompress  # noqa: E402
from envrigger.agents.scripted import ChatServer, Reply  # noqa: E402
from envrigger.live.calls import CallLog  # noqa: E402
from envrigger.live.proxy import Upstream, create_proxy_app  # noqa: E402

TOKEN = "tok-43-SERVER-SECRET"
KEY = "sk-agent-43-VERY-SECRET-KEY"
LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False})
FRAMEWORK_ROUTES = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")


# -- servers and clients ----------------------------------------------------------------------------------------------
class Running:
    """An ASGI app under uvicorn on a free loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="critical", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the app did not start"
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()


class RawUpstream:
    """A hostile upstream on 127.0.0.1: reads each request whole, then ``script(connection, request)`` writes whatever it likes.

    ``request`` is ``{"method", "path", "headers", "body"}`` (the body parsed as JSON where it is).
    """

    def __init__(self, script: Callable[[socket.socket, dict[str, Any]], None]) -> None:
        self.script = script
        self.stopped = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        try:
            raw = b""
            while b"\r\n\r\n" not in raw:
                piece = connection.recv(65536)
                if not piece:
                    return
                raw += piece
            head, body = raw.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
            while len(body) < int(headers.get("content-length", "0")):
                piece = connection.recv(65536)
                if not piece:
                    return
                body += piece
            try:
                parsed: Any = json.loads(body) if body else None
            except ValueError:
                parsed = None
            request = {"method": method, "path": path, "headers": headers, "body": parsed}
            self.requests.append(request)
            self.script(connection, request)
        except OSError:
            pass
        finally:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()


def http_answer(status: int, body: bytes, content_type: str = "application/json", extra: str = "") -> bytes:
    reason = {200: "OK", 401: "Unauthorized", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}
    head = f"HTTP/1.1 {status} {reason.get(status, 'X')}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n{extra}"
    return head.encode() + b"Connection: close\r\n\r\n" + body


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def chunk(content: str | None = "hi", finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}], **extra}  # fmt: skip


def event(data: Any) -> bytes:
    return b"data: " + (data if isinstance(data, bytes) else json.dumps(data).encode()) + b"\n\n"


def completion(content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"id": "x1", "object": "chat.completion", "model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}], **extra}  # fmt: skip


def one_line(text: Any) -> bool:
    return isinstance(text, str) and bool(text.strip()) and "\n" not in text


def call(url: str, method: str = "GET", body: Any = None, token: str | None = None, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:  # fmt: skip
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        text, status = error.read(), error.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text.decode("utf-8", "replace")


def together(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run every job at once (released by one barrier, each in its own thread); their results or exceptions, in order."""
    barrier = threading.Barrier(len(jobs))
    out: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = jobs[i]()
        except Exception as error:  # noqa: BLE001 - reported to the test as a value
            out[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return out


class Counting:
    """A recorder that keeps what it was handed: (session id, steps, error) per episode."""

    def __init__(self) -> None:
        self.episodes: list[tuple[str, int, str | None]] = []
        self.lock = threading.Lock()

    def record(self, spec, env, session_id, seed, steps, verdict, info, error, wall_time, opened) -> None:  # noqa: ANN001
        time.sleep(0.02)  # as a store's fsync does: the window a second finisher would slip through
        with self.lock:
            self.episodes.append((session_id, len(steps), error))


def lake_plays_independently(url: str, sessions: int) -> list[str]:
    """Open ``sessions`` sessions (seed 0) at once and play each its own endless pattern at once; what differs from in-process play.

    Two sessions stepping one env see each other's moves: right/left (0 -> 1 -> 0) and down/up (0 -> 4 -> 0) never end alone.
    """
    patterns = [[2, 0], [1, 3]]
    opened = together([lambda: call(f"{url}/v1/sessions", "POST", {"seed": 0}) for _ in range(sessions)])
    ids = [answer["session_id"] for status, answer in opened if status == 200]
    wrong: list[str] = []

    def play(i: int, sid: str) -> None:
        local = envharness.wrap("FrozenLake-v1", is_slippery=False)
        local.reset(seed=0)
        for t in range(12):
            action = patterns[i % 2][t % 2]
            status, answer = call(f"{url}/v1/sessions/{sid}/step", "POST", {"action": action})
            want = local.step(action)
            if status != 200 or answer["observation"] != int(want[0]):
                wrong.append(f"session {i} step {t}: {status} {answer} where in-process play gives {int(want[0])}")
                return

    together([partial(play, i, sid) for i, sid in enumerate(ids)])
    for sid in ids:
        call(f"{url}/v1/sessions/{sid}", "DELETE")
    return wrong


@pytest.fixture
def cli_server(tmp_path):
    """`envharness serve` (the CLI, a subprocess) of the non-slippery lake, with the options given; its URL."""
    import os
    import signal

    running = []

    def launch(*extra: str) -> str:
        spec = tmp_path / "lake.json"
        spec.write_text(LAKE.to_json())
        port = free_port()
        cmd = [sys.executable, "-m", "envharness.cli", "serve", str(spec), "--port", str(port), *extra]
        running.append(start(cmd, f"http://127.0.0.1:{port}/healthz"))
        return f"http://127.0.0.1:{port}"

    yield launch
    for process in running:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@pytest.fixture
def in_process():
    """``background(EnvService(...))``: the env server in this process, so a test can hand it a recorder; stopped at the end."""
    made = []

    def launch(spec: HarnessSpec = LAKE, token: str | None = None, **options: Any) -> tuple[Any, EnvService]:
        service = EnvService(spec, **options)
        made.append(background(service, token=token))
        return made[-1], service

    yield launch
    for server in made:
        server.stop()


# == 1. check-then-act and double release ==============================================================================
def test_max_sessions_holds_under_forty_simultaneous_opens(cli_server):
    url = cli_server("--max-sessions", "4")
    for _ in range(3):
        answers = together([lambda: call(f"{url}/v1/sessions", "POST", {"seed": 0}) for _ in range(40)])
        statuses = sorted(status for status, _ in answers)
        assert statuses.count(200) == 4 and statuses.count(429) == 36, statuses
        assert all(one_line(answer["error"]) for status, answer in answers if status == 429)
        assert call(f"{url}/healthz")[1]["sessions"] == 4
        for status, answer in answers:
            if status == 200:
                call(f"{url}/v1/sessions/{answer['session_id']}", "DELETE")


class SlowLake(FrozenLakeEnv):
    """FrozenLake whose reset takes 50 ms, as a level generator's does: the window a check-then-act limit leaks through."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        time.sleep(0.05)
        return super().reset(seed=seed, options=options)


def test_max_sessions_holds_against_thirty_opens_of_an_env_slow_to_reset(in_process):
    if "tests43/SlowLake-v0" not in gym.registry:
        gym.register("tests43/SlowLake-v0", entry_point=SlowLake, max_episode_steps=100, kwargs={"is_slippery": False})
    server, service = in_process(HarnessSpec(env_id="tests43/SlowLake-v0"), max_sessions=3)
    answers = together([lambda: call(f"{server.url}/v1/sessions", "POST", {"seed": 1}) for _ in range(30)])
    statuses = sorted(status for status, _ in answers)
    assert statuses.count(200) == 3 and statuses.count(429) == 27 and service.count() == 3, statuses


def test_a_session_closed_by_thirty_clients_at_once_is_closed_once_and_its_env_never_shared(cli_server, tmp_path):
    url = cli_server("--record", str(tmp_path / "run"))
    for round_ in range(4):
        _, opened = call(f"{url}/v1/sessions", "POST", {"seed": 0})
        sid = opened["session_id"]
        for _ in range(3 if round_ % 2 else 1):  # down, down, down: into the hole, the episode over (odd rounds)
            call(f"{url}/v1/sessions/{sid}/step", "POST", {"action": 1})
        closes = together([partial(call, f"{url}/v1/sessions/{sid}", "DELETE") for _ in range(30)])
        statuses = sorted(status for status, _ in closes)
        assert statuses.count(200) == 1 and statuses.count(404) == 29, statuses
    assert lake_plays_independently(url, 8) == []


def test_closes_racing_the_idle_reaper_record_each_episode_once_and_release_each_env_once(in_process):
    recorder = Counting()
    server, service = in_process(idle_timeout=0.25, recorder=recorder, max_sessions=64)
    ids = []
    for seed in range(12):
        _, opened = call(f"{server.url}/v1/sessions", "POST", {"seed": seed})
        ids.append(opened["session_id"])
        for _ in range(3 if seed % 2 else 1):  # odd seeds: down into the hole, the episode over, the env back to the pool at the end
            call(f"{server.url}/v1/sessions/{ids[-1]}/step", "POST", {"action": 1})
    time.sleep(0.4)  # every session is now idle past the timeout: the reaper and the closes go for the same ones
    jobs: list[Callable[[], Any]] = [partial(call, f"{server.url}/v1/sessions/{sid}", "DELETE") for sid in ids]
    jobs += [lambda: service.reap() for _ in range(6)]
    closes = together(jobs)[:12]
    assert all(status in (200, 404) for status, _ in closes)
    time.sleep(0.1)
    kept = sorted(sid for sid, _, _ in recorder.episodes)
    assert kept == sorted(ids), f"episodes recorded {len(kept)} times for {len(ids)} sessions"
    assert lake_plays_independently(server.url, 10) == []


def test_steps_racing_a_close_never_step_a_released_env(in_process):
    recorder = Counting()
    server, service = in_process(recorder=recorder)
    for round_ in range(3):
        _, opened = call(f"{server.url}/v1/sessions", "POST", {"seed": 0})
        sid = opened["session_id"]
        jobs: list[Callable[[], Any]] = [
            partial(call, f"{server.url}/v1/sessions/{sid}/step", "POST", {"action": [2, 0][t % 2]}) for t in range(20)
        ]
        jobs.insert(10, partial(call, f"{server.url}/v1/sessions/{sid}", "DELETE"))
        answers = together(jobs)
        stepped = sum(1 for status, _ in answers[:10] + answers[11:] if status == 200)
        assert all(status in (200, 404) for status, _ in answers), answers
        # one episode with every step that answered 200; none when the close won before any step (nothing was played)
        recorded = [e[1] for e in recorder.episodes if e[0] == sid]
        assert recorded == ([stepped] if stepped else []), f"round {round_}: {stepped} steps answered 200 but {recorded} recorded"
    assert lake_plays_independently(server.url, 6) == []


def test_the_proxy_records_each_of_forty_simultaneous_calls_exactly_once(tmp_path):
    with ChatServer(lambda request: Reply(content="go east")) as upstream:
        proxy = Running(create_proxy_app(Upstream(upstream.url), tmp_path / "run"))
        try:

            def ask(i: int) -> int:
                body = {"model": "scripted", "messages": [{"role": "user", "content": f"call {i}"}], "stream": i % 2 == 1}
                with httpx.Client(timeout=60) as client:
                    answer = client.post(f"{proxy.url}/sessions/s{i}/v1/chat/completions", json=body)
                    return answer.status_code

            assert together([partial(ask, i) for i in range(40)]) == [200] * 40
        finally:
            proxy.stop()
    calls = CallLog(tmp_path / "run").read()
    assert sorted(c["gen_ai.conversation.id"] for c in calls) == sorted(f"s{i}" for i in range(40))


# == 2. every route behind the same gate ===============================================================================
def _probes(app: Any) -> list[tuple[str, str]]:
    """(method, path) of every route the app has, path parameters filled in, and of the routes the framework adds by itself."""
    out = []
    for route in app.routes:
        path = route.path
        for name in getattr(route, "param_convertors", {}) or {}:
            path = path.replace("{" + name + "}", "x")
        for method in sorted(getattr(route, "methods", None) or {"GET"}):
            out.append((method, path))
    out += [("GET", path) for path in FRAMEWORK_ROUTES]
    return sorted(set(out))


def test_every_route_of_the_env_server_needs_the_token(in_process):
    app = create_app(EnvService(LAKE), token=TOKEN)
    assert [p for p in _probes(app) if p[1] == "/healthz"], "healthz is enumerated"
    server = Running(app)
    try:
        for method, path in _probes(app):
            status, answer = call(server.url + path, method, raw=b"{}" if method in ("POST", "PUT", "PATCH") else None)
            if path == "/healthz":
                assert status == 200
                continue
            assert status in (401, 404), (method, path, status, str(answer)[:200])
            assert TOKEN not in json.dumps(answer)
            with_token = call(server.url + path, method, token=TOKEN, raw=b"{}" if method in ("POST", "PUT", "PATCH") else None)
            assert with_token[0] != 401, (method, path)
        for path in FRAMEWORK_ROUTES:  # off, not merely gated: nothing to read with the token either
            assert call(server.url + path, token=TOKEN)[0] == 404, path
    finally:
        server.stop()


def test_every_route_of_the_proxy_is_off_or_behind_its_token(tmp_path):
    with ChatServer(lambda request: Reply(content="ok")) as upstream:
        open_app = create_proxy_app(Upstream(upstream.url), tmp_path / "open")
        gated_app = create_proxy_app(Upstream(upstream.url), tmp_path / "gated", token=TOKEN)
        for app, gated in ((open_app, False), (gated_app, True)):
            server = Running(app)
            try:
                for method, path in _probes(app):
                    raw = json.dumps({"model": "scripted", "messages": []}).encode() if method == "POST" else None
                    status, answer = call(server.url + path, method, raw=raw)
                    if gated and path != "/healthz":
                        assert status in (401, 404), (method, path, status)
                        assert TOKEN not in json.dumps(answer)
                    elif path in FRAMEWORK_ROUTES:
                        assert status == 404, (path, status)  # the framework's own routes are off
                if gated:
                    status, _ = call(server.url + "/v1/models", headers={"X-Envrigger-Token": TOKEN})
                    assert status == 200
                    for path in FRAMEWORK_ROUTES:  # off, not merely gated: nothing to read with the token either
                        assert call(server.url + path, headers={"X-Envrigger-Token": TOKEN})[0] == 404, path
            finally:
                server.stop()
    assert not (tmp_path / "gated" / "calls.jsonl").exists()  # nothing without the token reached the upstream or the record


def test_unknown_routes_and_methods_get_one_line_errors_on_both_servers(in_process, tmp_path):
    server, _ = in_process()
    for method, path in (("GET", "/nope"), ("PUT", "/v1/sessions"), ("GET", "/v1/sessions/x/step")):
        status, answer = call(server.url + path, method, raw=b"{}" if method == "PUT" else None)
        assert status in (404, 405) and isinstance(answer, dict) and one_line(answer.get("error")), (path, answer)
    with ChatServer(lambda request: Reply(content="ok")) as upstream:
        proxy = Running(create_proxy_app(Upstream(upstream.url), tmp_path / "run"))
        try:
            for method, path in (("GET", "/nope"), ("DELETE", "/v1/chat/completions")):
                status, answer = call(proxy.url + path, method)
                assert status in (404, 405) and one_line(answer["error"]["message"]), (path, answer)
        finally:
            proxy.stop()


# == 3. total decoding, both directions ================================================================================
DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    "name, body",
    [
        ("deep JSON", DEEP),
        ("deep action", b'{"action": ' + b"[" * 990 + b"0.5" + b"]" * 990 + b"}"),
        ("deep action object", b'{"action": ' + b'{"a": ' * 990 + b"1" + b"}" * 990 + b"}"),
        ("action an object", b'{"action": {"force": 1}}'),
        ("action a string", b'{"action": "push"}'),
        ("action null", b'{"action": null}'),
        ("action huge", b'{"action": [1' + b"0" * 4000 + b"]}"),
        ("body a list", b"[1, 2]"),
        ("body null", b"null"),
        ("invalid UTF-8", b'{"action": "\xff\xfe"}'),
        ("NaN constant", b'{"action": [NaN, Infinity]}'),
    ],
)
def test_hostile_step_bodies_get_a_4xx_with_one_line_and_the_episode_goes_on(in_process, name, body):
    server, _ = in_process(HarnessSpec(env_id="MountainCarContinuous-v0"))
    _, opened = call(f"{server.url}/v1/sessions", "POST", {"seed": 0})
    step = f"{server.url}/v1/sessions/{opened['session_id']}/step"
    status, answer = call(step, "POST", raw=body)
    if name == "NaN constant":  # a float action the space holds (JSON's non-standard constants decode to floats)
        assert status in (200, 400), answer
    else:
        assert 400 <= status < 500 and one_line(answer["error"]), (name, status, answer)
    assert call(step, "POST", {"action": [0.5]})[0] == 200, f"{name}: the episode did not survive the refusal"


@pytest.mark.parametrize(
    "name, body",
    [
        ("deep JSON", DEEP),
        ("seed a float", {"seed": 1.5}),
        ("seed a string", {"seed": "3"}),
        ("seed too wide", {"seed": 2**70}),
        ("options a list", {"options": [1]}),
        ("options of the wrong type", {"options": {"low": "abc", "high": "def"}}),
        ("options nested deep", {"options": {"low": [[[[[[1]]]]]]}}),
        ("options with an unknown key", {"options": {"x": {"y": [1, 2]}}}),
        ("a forged verdict", {"seed": 1, "verdict": {"success": True}}),
    ],
)
def test_hostile_open_bodies_get_a_4xx_with_one_line_and_the_server_goes_on(in_process, name, body):
    server, service = in_process(HarnessSpec(env_id="MountainCar-v0"), max_sessions=2)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, answer = call(f"{server.url}/v1/sessions", "POST", raw=raw)
    if name == "options with an unknown key":  # the env ignores options it does not know: a new episode
        assert status == 200
    else:
        assert 400 <= status < 500 and one_line(answer["error"]), (name, status, answer)
    for _ in range(2):  # nothing leaked: a refused open holds no session and no reservation
        opened = call(f"{server.url}/v1/sessions", "POST", {"seed": 0})
        assert opened[0] == 200, opened
        call(f"{server.url}/v1/sessions/{opened[1]['session_id']}", "DELETE")


def test_bodies_over_the_limit_get_413_with_or_without_a_length(in_process):
    server = background(EnvService(LAKE), max_body=1024)
    try:
        _, opened = call(f"{server.url}/v1/sessions", "POST", {"seed": 0})
        step = f"{server.url}/v1/sessions/{opened['session_id']}/step"
        status, answer = call(step, "POST", raw=b'{"action": 1, "pad": "' + b"x" * 5000 + b'"}')
        assert status == 413 and one_line(answer["error"])
        with httpx.Client(timeout=30) as client:  # chunked: no Content-Length to refuse it by
            answer = client.post(step, content=iter([b'{"action": 1, "pad": "', b"x" * 5000, b'"}']))
            assert answer.status_code == 413 and one_line(answer.json()["error"])
    finally:
        server.stop()


@pytest.fixture
def proxy_over():
    """A proxy app (in a thread) over a given upstream URL, recording into a fresh run: (url, run)."""
    made = []

    def launch(upstream_url: str, run: Path, **options: Any) -> str:
        timeout = options.pop("timeout", 30.0)
        made.append(Running(create_proxy_app(Upstream(upstream_url, timeout=timeout), run, **options)))
        return made[-1].url

    yield launch
    for server in made:
        server.stop()


@pytest.mark.parametrize(
    "name, body",
    [
        ("deep JSON", DEEP),
        ("messages a string", {"model": "m", "messages": "hi"}),
        ("messages of numbers", {"model": "m", "messages": [1, 2]}),
        ("a message a list", {"model": "m", "messages": [["user", "hi"]]}),
        ("messages nested deep", {"model": "m", "messages": [{"role": "user", "content": json.loads("[" * 900 + "]" * 900)}]}),
        ("body a list", [1]),
        ("body null", None),
        ("invalid UTF-8", b'{"model": "\xff"}'),
    ],
)
def test_hostile_bodies_to_the_proxy_get_a_4xx_with_one_line(proxy_over, tmp_path, name, body):
    with ChatServer(lambda request: Reply(content="ok")) as upstream:
        url = proxy_over(upstream.url, tmp_path / "run")
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        answer = httpx.post(f"{url}/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"}, timeout=60)
        assert 400 <= answer.status_code < 500 and one_line(answer.json()["error"]["message"]), (
            name,
            answer.status_code,
            answer.text[:300],
        )
        assert httpx.post(f"{url}/v1/chat/completions", json={"model": "scripted", "messages": []}, timeout=60).status_code == 200


def test_a_body_over_the_proxys_limit_gets_413(proxy_over, tmp_path):
    with ChatServer(lambda request: Reply(content="ok")) as upstream:
        url = proxy_over(upstream.url, tmp_path / "run", max_body=4096)
        big = {"model": "scripted", "messages": [{"role": "user", "content": "x" * 10_000}]}
        answer = httpx.post(f"{url}/v1/chat/completions", json=big, timeout=60)
        assert answer.status_code == 413 and one_line(answer.json()["error"]["message"])
        chunked = httpx.post(f"{url}/v1/chat/completions", content=iter([json.dumps(big).encode()]), timeout=60)
        assert chunked.status_code == 413
        assert not upstream.requests  # refused before anything was forwarded


GOOD = completion()
ANSWERS: dict[str, bytes] = {
    "invalid JSON": http_answer(200, b"<html>oops</html>", "text/html"),
    "an empty body": http_answer(200, b""),
    "a JSON list": http_answer(200, b"[1, 2]"),
    "choices a string": http_answer(200, json.dumps({**GOOD, "choices": "x"}).encode()),
    "a choice a number": http_answer(200, json.dumps({**GOOD, "choices": [1]}).encode()),
    "the message a string": http_answer(200, json.dumps({**GOOD, "choices": [{"message": "hi"}]}).encode()),
    "content a number": http_answer(200, json.dumps(completion(content=5)).encode()),
    "tool_calls a string": http_answer(
        200, json.dumps({**GOOD, "choices": [{"message": {"role": "assistant", "tool_calls": "x"}}]}).encode()
    ),
    "usage tokens a string": http_answer(200, json.dumps({**GOOD, "usage": {"prompt_tokens": "many"}}).encode()),
    "usage tokens Infinity": http_answer(200, json.dumps(GOOD).replace('"prompt_tokens": 3', '"prompt_tokens": Infinity').encode()),
    "logprobs nested deep": http_answer(
        200, json.dumps({**GOOD, "choices": [{**GOOD["choices"][0], "logprobs": json.loads("[" * 900 + "]" * 900)}]}).encode()
    ),
    "nested past the parser": http_answer(200, b'{"choices": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
    "a body cut short": http_answer(200, json.dumps(GOOD).encode())[:-20],
    "a garbage status line": b"HELLO THERE\r\n\r\n",
    "no answer at all": b"",
    "an error with an HTML body": http_answer(503, b"<h1>busy</h1>", "text/html"),
}


@pytest.fixture(scope="module")
def scripted():
    """A raw upstream that answers each request with the bytes (or the callable) named by its model, and a proxy over it."""
    plan: dict[str, Any] = {}

    def script(connection: socket.socket, request: dict[str, Any]) -> None:
        answer = plan[(request["body"] or {}).get("model", "")] if request["method"] == "POST" else plan["models"]
        if callable(answer):
            answer(connection, request)
        else:
            connection.sendall(answer)

    upstream = RawUpstream(script)
    import tempfile

    run = Path(tempfile.mkdtemp())
    proxy = Running(create_proxy_app(Upstream(upstream.url, timeout=20), run))
    yield plan, proxy.url, run
    proxy.stop()
    upstream.close()


def calls_of(run: Path, session: str) -> list[dict[str, Any]]:
    return CallLog(run).read(session)


@pytest.mark.parametrize("name", list(ANSWERS))
def test_a_malformed_upstream_answer_is_502_with_one_line_and_one_record(scripted, name):
    plan, url, run = scripted
    plan[name] = ANSWERS[name]
    body = {"model": name, "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{url}/sessions/{name}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 502, (name, answer.status_code, answer.text[:300])
    assert one_line(answer.json()["error"]["message"]), answer.text[:300]
    (recorded,) = calls_of(run, name)
    assert recorded["envrigger.http.status"] == 502 and one_line(recorded["envrigger.error"])


def test_the_openai_client_sees_a_502_for_a_malformed_answer_and_one_record_is_kept(scripted):
    openai = pytest.importorskip("openai")
    plan, url, run = scripted
    plan["openai-bad"] = ANSWERS["the message a string"]
    client = openai.OpenAI(base_url=f"{url}/sessions/openai-bad/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model="openai-bad", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 502 and "upstream" in raised.value.message
    assert len(calls_of(run, "openai-bad")) == 1


def sse(*events: bytes, pause: float = 0.0) -> Callable[[socket.socket, dict[str, Any]], None]:
    def write(connection: socket.socket, request: dict[str, Any]) -> None:
        connection.sendall(STREAM_HEAD)
        for piece in events:
            connection.sendall(piece)
            time.sleep(pause)

    return write


def broken_chunked(connection: socket.socket, request: dict[str, Any]) -> None:
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    first = event(chunk("hi"))
    connection.sendall(f"{len(first):x}\r\n".encode() + first + b"\r\n" + b"zz\r\nnot a chunk\r\n")


FIRST = event(chunk("hi"))
DONE = b"data: [DONE]\n\n"
STREAMS: dict[str, Any] = {  # name -> (script, whether the fault comes before any event the caller could be sent)
    "a number as the first chunk": (sse(event(5), DONE), True),
    "a list as a later chunk": (sse(FIRST, event([1, 2]), DONE), False),
    "a string as a later chunk": (sse(FIRST, event("x"), DONE), False),
    "invalid JSON as the first chunk": (sse(b"data: {nope\n\n", DONE), True),
    "invalid JSON as a later chunk": (sse(FIRST, b"data: {nope\n\n", DONE), False),
    "a delta that is a string": (sse(FIRST, event({**chunk(), "choices": [{"index": 0, "delta": "x"}]}), DONE), False),
    "content a number": (sse(FIRST, event(chunk(content=5)), DONE), False),  # type: ignore[arg-type]
    "choices a string": (sse(FIRST, event({**chunk(), "choices": "x"}), DONE), False),
    "a tool call index a string": (
        sse(FIRST, event({**chunk(), "choices": [{"index": 0, "delta": {"tool_calls": [{"index": "a"}]}}]}), DONE),
        False,
    ),
    "unterminated": (sse(FIRST, event(chunk(None, "stop"))), False),
    "cut inside an event": (sse(FIRST, b'data: {"id": "c1", "cho'), False),
    "broken chunked encoding": (broken_chunked, False),
    "an empty stream": (sse(), True),
}


def read_stream(url: str, body: dict[str, Any]) -> tuple[int, list[Any]]:
    """POST a streamed call; (status, the events' data in order). A cut stream raises here (httpx: incomplete message)."""
    with httpx.Client(timeout=60) as client, client.stream("POST", url, json=body) as answer:
        text = answer.read().decode()
        if answer.status_code != 200:
            return answer.status_code, [json.loads(text)]
    data = []
    for block in text.split("\n\n"):
        lines = [line[5:].strip() for line in block.splitlines() if line.startswith("data:")]
        if lines:
            joined = "\n".join(lines)
            data.append(joined if joined == "[DONE]" else json.loads(joined))
    return 200, data


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_malformed_stream_ends_in_an_error_with_one_record_never_a_cut_stream(scripted, name):
    plan, url, run = scripted
    name = f"stream: {name}"  # a session of its own (some names are also non-streamed cases')
    plan[name], early = STREAMS[name.removeprefix("stream: ")]
    status, data = read_stream(f"{url}/sessions/{name}/v1/chat/completions", {"model": name, "messages": [], "stream": True})
    if early:
        assert status == 502 and one_line(data[0]["error"]["message"]), (name, status, data)
    else:
        assert status == 200 and isinstance(data[-1], dict) and "error" in data[-1], (name, data)
        assert one_line(data[-1]["error"]["message"]) and data[-1]["error"]["code"] in (502, 504), data[-1]
    (recorded,) = calls_of(run, name)
    assert recorded["envrigger.http.status"] in (502, 504) and one_line(recorded["envrigger.error"]), recorded


def test_a_repeated_done_is_one_call_and_one_record(scripted):
    plan, url, run = scripted
    plan["done-twice"] = sse(FIRST, event(chunk(" there", "stop")), DONE, DONE, event(chunk("late")), DONE)
    status, data = read_stream(f"{url}/sessions/done-twice/v1/chat/completions", {"model": "done-twice", "messages": [], "stream": True})
    assert status == 200 and data[-1] == "[DONE]" and data.count("[DONE]") == 1, data
    (recorded,) = calls_of(run, "done-twice")
    assert recorded["envrigger.http.status"] == 200 and "envrigger.error" not in recorded
    assert decompress(recorded["gen_ai.output.messages"])[0]["content"] == "hi there"


@pytest.mark.parametrize("ending", [b"data: [DONE]", b"data: [DONE]\n", b"data: [DONE]\r\n\r\n"])
def test_a_done_at_the_very_end_of_the_connection_ends_the_stream_cleanly(scripted, ending):
    plan, url, run = scripted
    name = f"done-at-end-{len(ending)}"
    plan[name] = sse(FIRST, event(chunk(None, "stop")), ending)
    status, data = read_stream(f"{url}/sessions/{name}/v1/chat/completions", {"model": name, "messages": [], "stream": True})
    assert status == 200 and data[-1] == "[DONE]", data
    (recorded,) = calls_of(run, name)
    assert recorded["envrigger.http.status"] == 200 and "envrigger.error" not in recorded, recorded


def test_the_openai_client_gets_an_api_error_not_a_cut_connection_from_a_broken_stream(scripted):
    openai = pytest.importorskip("openai")
    plan, url, run = scripted
    plan["openai-stream"] = STREAMS["a list as a later chunk"][0]
    client = openai.OpenAI(base_url=f"{url}/sessions/openai-stream/v1", api_key="none", max_retries=0)
    stream = client.chat.completions.create(model="openai-stream", messages=[], stream=True)
    with pytest.raises(openai.APIError) as raised:
        list(stream)
    assert not isinstance(raised.value, openai.APIConnectionError) and "upstream" in raised.value.message
    assert len(calls_of(run, "openai-stream")) == 1


def test_an_upstream_error_with_a_json_body_is_relayed_and_recorded_once(scripted):
    plan, url, run = scripted
    plan["limited"] = http_answer(429, json.dumps({"error": {"message": "slow down", "type": "rate_limit"}}).encode())
    answer = httpx.post(f"{url}/sessions/limited/v1/chat/completions", json={"model": "limited", "messages": []}, timeout=60)
    assert answer.status_code == 429 and answer.json()["error"]["message"] == "slow down"
    (recorded,) = calls_of(run, "limited")
    assert recorded["envrigger.http.status"] == 429 and "slow down" in recorded["envrigger.error"]


def test_a_malformed_models_list_is_502_with_one_line(scripted):
    plan, url, _ = scripted
    for answer in (b"HELLO\r\n\r\n", http_answer(200, b"{nope"), http_answer(200, json.dumps({"data": [1]}).encode())[:-3]):
        plan["models"] = answer
        got = httpx.get(f"{url}/v1/models", timeout=60)
        assert got.status_code == 502 and one_line(got.json()["error"]["message"]), got.text[:200]


# == 4. secrets never stored, whoever echoes them ======================================================================
def echo_key(kind: str) -> Callable[[socket.socket, dict[str, Any]], None]:
    """An upstream that echoes the caller's Authorization header back: in an error, a non-JSON error, a completion, a stream."""

    def write(connection: socket.socket, request: dict[str, Any]) -> None:
        said = request["headers"].get("authorization", "")
        if kind == "json error":
            connection.sendall(http_answer(401, json.dumps({"error": {"message": f"Incorrect API key provided: {said}."}}).encode(),
                                           extra=f"X-Echo: {said}\r\n"))  # fmt: skip
        elif kind == "text error":
            connection.sendall(http_answer(500, f"proxy-auth failed for header {said!r}".encode(), "text/plain"))
        elif kind == "escaped":  # the key in a JSON \\u escape: no byte of the body spells it
            escaped = "".join(f"\\u{ord(c):04x}" for c in said)
            connection.sendall(http_answer(401, b'{"error": {"message": "bad key ' + escaped.encode() + b'"}}'))
        elif kind == "completion":
            connection.sendall(http_answer(200, json.dumps(completion(content=f"your key is {said}")).encode()))
        elif kind == "stream":
            sse(event(chunk(f"key={said}")), event(chunk(None, "stop")), DONE)(connection, request)
        elif kind == "models":
            connection.sendall(http_answer(401, json.dumps({"error": {"message": f"no models for {said}"}}).encode()))

    return write


@pytest.mark.parametrize("kind", ["json error", "text error", "escaped", "completion", "stream", "models"])
def test_an_upstream_echoing_the_callers_key_gets_it_neither_stored_nor_returned(tmp_path, proxy_over, kind):
    upstream = RawUpstream(echo_key(kind))
    run = tmp_path / "run"
    try:
        url = proxy_over(upstream.url, run)
        headers = {"Authorization": f"Bearer {KEY}", "X-Envharness-Session": "s"}
        body = {"model": "m", "messages": [{"role": "user", "content": f"my key is {KEY}, keep it"}], "stream": kind == "stream"}
        if kind == "models":
            answer = httpx.get(f"{url}/v1/models", headers=headers, timeout=60)
        else:
            answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)
        assert upstream.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"  # it still goes upstream, unchanged
        returned = answer.text + json.dumps(dict(answer.headers))
        assert KEY not in returned and KEY not in json.loads(json.dumps(returned)), returned[:300]
        assert answer.status_code >= 400 or answer.status_code == 200
    finally:
        upstream.close()
    stored = (run / "calls.jsonl").read_text() if (run / "calls.jsonl").exists() else ""
    messages = "".join(
        json.dumps(decompress(c[k])) for c in CallLog(run).read() for k in ("gen_ai.input.messages", "gen_ai.output.messages")
    )
    assert KEY not in stored and KEY not in messages, (stored + messages)[:500]
    if kind != "models":
        assert len(CallLog(run).read()) == 1 and "[redacted]" in stored + messages


def test_the_proxys_own_token_is_never_forwarded_or_stored(tmp_path):
    with ChatServer(lambda request: Reply(content="ok")) as upstream:
        proxy = Running(create_proxy_app(Upstream(upstream.url), tmp_path / "run", token=TOKEN))
        try:
            body = {"model": "scripted", "messages": [{"role": "user", "content": f"the proxy token is {TOKEN}"}]}
            answer = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers={"X-Envrigger-Token": TOKEN}, timeout=60)
            assert answer.status_code == 200
            assert all("x-envrigger-token" not in {k.lower() for k in r["headers"]} for r in upstream.requests)
        finally:
            proxy.stop()
    (recorded,) = CallLog(tmp_path / "run").read()
    assert TOKEN not in json.dumps(decompress(recorded["gen_ai.input.messages"])) + (tmp_path / "run" / "calls.jsonl").read_text()


def test_the_env_server_never_echoes_its_token(in_process):
    server, _ = in_process(token=TOKEN)
    for path, method, body in ((f"/v1/sessions/{TOKEN}/step", "POST", {"action": 1}), (f"/v1/sessions/{TOKEN}", "DELETE", None),
                               ("/v1/sessions", "POST", {"seed": TOKEN}), ("/v1/sessions", "POST", {TOKEN: 1})):  # fmt: skip
        status, answer = call(server.url + path, method, body, token=TOKEN)
        assert 400 <= status < 500 and TOKEN not in json.dumps(answer), (path, answer)


# == 7. deadlines are totals ===========================================================================================
def drip(data: bytes, every: float, stopped: threading.Event) -> Callable[[socket.socket, dict[str, Any]], None]:
    """Write ``data`` one byte at a time, ``every`` seconds apart: each byte well within any per-read timeout."""

    def write(connection: socket.socket, request: dict[str, Any]) -> None:
        for i in range(len(data)):
            if stopped.is_set():
                return
            connection.sendall(data[i : i + 1])
            time.sleep(every)

    return write


def endless_stream(connection: socket.socket, request: dict[str, Any]) -> None:
    connection.sendall(STREAM_HEAD)
    for _ in range(200):
        connection.sendall(event(chunk("a")))
        time.sleep(0.05)


@pytest.mark.parametrize("where", ["headers", "body", "stream"])
def test_an_upstream_dripping_its_answer_is_cut_at_the_total_deadline(tmp_path, proxy_over, where):
    stopped = threading.Event()
    whole = http_answer(200, json.dumps(completion(content="x" * 200)).encode())
    script = {"headers": drip(whole, 0.05, stopped),
              "body": lambda c, r: (c.sendall(whole[:80]), drip(whole[80:], 0.05, stopped)(c, r)),
              "stream": endless_stream}[where]  # fmt: skip
    upstream = RawUpstream(script)
    run = tmp_path / "run"
    try:
        url = proxy_over(upstream.url, run, timeout=1.0)
        started = time.monotonic()
        if where == "stream":
            status, data = read_stream(f"{url}/v1/chat/completions", {"model": "m", "messages": [], "stream": True})
            assert status == 200 and data[-1]["error"]["code"] == 504, data[-3:]
        else:
            answer = httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "messages": []}, timeout=60)
            assert answer.status_code == 504 and one_line(answer.json()["error"]["message"]), answer.text[:300]
        took = time.monotonic() - started
        assert took < 3.0, f"the call took {took:.1f} s against a 1 s deadline"
    finally:
        stopped.set()
        upstream.close()
    (recorded,) = CallLog(run).read()
    assert recorded["envrigger.http.status"] == 504 and "deadline" in recorded["envrigger.error"]


@pytest.mark.parametrize("where", ["headers", "body", "silent"])
def test_a_remote_env_request_is_cut_at_its_total_timeout_however_the_server_drips(where):
    # The second surface of deadlines: envharness.remote.RemoteEnv's timeout bounds a whole request.
    from envharness.remote import RemoteEnv, RemoteError

    stopped = threading.Event()
    whole = http_answer(200, json.dumps({"spec": {}, "observation_space": {}, "action_space": {}}).encode())
    script = {"headers": drip(whole, 0.05, stopped),
              "body": lambda c, r: (c.sendall(whole[:60]), drip(whole[60:], 0.05, stopped)(c, r)),
              "silent": lambda c, r: stopped.wait(20)}[where]  # fmt: skip
    server = RawUpstream(script)
    try:
        started = time.monotonic()
        with pytest.raises(RemoteError, match=r"did not answer within 1 s"):
            RemoteEnv(server.url.removesuffix("/v1"), timeout=1.0)
        took = time.monotonic() - started
        assert took < 3.0, f"the request took {took:.1f} s against a 1 s timeout"
    finally:
        stopped.set()
        server.close()


@pytest.mark.parametrize("where", ["headers", "body", "stream", "silent"])
def test_a_model_call_of_the_chat_agent_is_cut_at_its_request_timeout_however_the_endpoint_drips(monkeypatch, where):
    # The third surface: `collect --request-timeout` (Endpoint.timeout_s), the client of the chat agent, proposer and skills.
    import openai

    from envrigger.agents.chat import Endpoint

    monkeypatch.setenv("OPENAI_API_KEY", "sk-drip-test-key")
    stopped = threading.Event()
    whole = http_answer(200, json.dumps(completion(content="x" * 200)).encode())
    script = {"headers": drip(whole, 0.05, stopped),
              "body": lambda c, r: (c.sendall(whole[:120]), drip(whole[120:], 0.05, stopped)(c, r)),
              "stream": endless_stream,
              "silent": lambda c, r: stopped.wait(20)}[where]  # fmt: skip
    server = RawUpstream(script)
    try:
        client = Endpoint(server.url, "m", timeout_s=1.0, attempts=1).client()
        started = time.monotonic()
        with pytest.raises(openai.APIError):
            if where == "stream":
                for _ in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True):
                    pass
            else:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        took = time.monotonic() - started
        assert took < 3.0, f"the call took {took:.1f} s against a 1 s request timeout"
    finally:
        stopped.set()
        server.close()


def test_an_upstream_that_never_answers_is_504_at_the_deadline(tmp_path, proxy_over):
    stopped = threading.Event()
    upstream = RawUpstream(lambda c, r: stopped.wait(20))
    try:
        url = proxy_over(upstream.url, tmp_path / "run", timeout=1.0)
        started = time.monotonic()
        answer = httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "messages": []}, timeout=60)
        assert answer.status_code == 504 and time.monotonic() - started < 3.0
    finally:
        stopped.set()
        upstream.close()
    assert len(CallLog(tmp_path / "run").read()) == 1


def _drip_request(url: str, path: str, body: bytes, every: float, give_up: float) -> tuple[int, float]:
    """Send a request whose body arrives a byte every ``every`` s; (the status the server answered, seconds until it did)."""
    host, port = url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=give_up) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        sock.setblocking(False)
        received = b""
        for i in range(len(body)):
            try:
                sock.sendall(body[i : i + 1])
            except OSError:
                break
            time.sleep(every)
            try:
                received += sock.recv(65536)
            except BlockingIOError:
                pass
            except OSError:
                break
            if received or time.monotonic() - started > give_up:
                break
        sock.setblocking(True)
        while b"\r\n" not in received and time.monotonic() - started < give_up:
            piece = sock.recv(65536)
            if not piece:
                break
            received += piece
    status = int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/") else 0
    return status, time.monotonic() - started


def test_a_request_body_dripped_byte_by_byte_is_cut_at_the_body_deadline_on_both_servers(tmp_path):
    service = EnvService(LAKE)
    env_server = Running(create_app(service, body_timeout=1.0))
    with ChatServer(lambda request: Reply(content="ok")) as upstream:
        proxy = Running(create_proxy_app(Upstream(upstream.url), tmp_path / "run", body_timeout=1.0))
        try:
            for url, path in ((env_server.url, "/v1/sessions"), (proxy.url, "/v1/chat/completions")):
                body = json.dumps({"seed": 0, "model": "scripted", "messages": [], "pad": "x" * 300}).encode()
                status, took = _drip_request(url, path, body, 0.02, give_up=8.0)
                assert status == 408 and took < 3.0, (url, status, took)
        finally:
            proxy.stop()
            env_server.stop()


def test_an_idle_session_is_closed_at_its_timeout_with_no_other_request_to_notice(in_process):
    recorder = Counting()
    server, service = in_process(idle_timeout=0.3, recorder=recorder)
    _, opened = call(f"{server.url}/v1/sessions", "POST", {"seed": 0})
    call(f"{server.url}/v1/sessions/{opened['session_id']}/step", "POST", {"action": 2})
    time.sleep(1.5)
    assert call(f"{server.url}/healthz")[1]["sessions"] == 0
    assert [(sid, error is not None and "idle" in error) for sid, _, error in recorder.episodes] == [(opened["session_id"], True)]


def test_a_caller_that_hangs_up_mid_stream_leaves_exactly_one_record(tmp_path, proxy_over):
    def slow(connection: socket.socket, request: dict[str, Any]) -> None:
        connection.sendall(STREAM_HEAD)
        for _ in range(30):
            connection.sendall(event(chunk("a")))
            time.sleep(0.05)
        connection.sendall(event(chunk(None, "stop")) + DONE)

    upstream = RawUpstream(slow)
    run = tmp_path / "run"
    try:
        url = proxy_over(upstream.url, run)
        with httpx.Client(timeout=30) as client, client.stream("POST", f"{url}/v1/chat/completions",
                                                               json={"model": "m", "messages": [], "stream": True}) as answer:  # fmt: skip
            next(answer.iter_bytes())  # the first event, then the caller goes away
        deadline = time.monotonic() + 10
        while not CallLog(run).read() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)  # the upstream's stream is over by now: nothing may record it a second time
    finally:
        upstream.close()
    (recorded,) = CallLog(run).read()
    assert recorded["envrigger.streamed"] and "caller closed" in recorded["envrigger.error"], recorded
