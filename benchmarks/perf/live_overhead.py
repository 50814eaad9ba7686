"""What the live harness costs: a step through `envharness serve`, a model call through `envrigger proxy`, and many sessions at once.

Side by side in one run, on loopback (issue 32's targets in brackets):

1. A CartPole step in-process and through a served env (`RemoteEnv`, one kept-alive
   connection): the median per step of each, and the difference [<= 1 ms].
2. A chat completion sent to a scripted upstream directly and through the proxy (which
   records each call durably, with an fsync, before it answers): the median per call of
   each, and the difference [<= 2 ms].
3. An agent loop (one model call through the proxy to an upstream that answers after
   100 ms, then one step of the served env) with 1 session and with 16 sessions at once:
   steps per second of each, and the ratio [>= 8x].

Run: ``python benchmarks/perf/live_overhead.py`` (writes benchmarks/perf/results/live_overhead.json).
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import write_result  # noqa: E402

import envharness  # noqa: E402
from envharness import HarnessSpec  # noqa: E402
from envharness.remote import RemoteEnv  # noqa: E402
from envharness.serve import EnvService, background  # noqa: E402
from envrigger.agents.scripted import ChatServer, Reply  # noqa: E402
from envrigger.live.proxy import Upstream, create_proxy_app  # noqa: E402


class ProxyThread:
    """The proxy app on a free loopback port, in a thread."""

    def __init__(self, upstream: str, run: Path) -> None:
        import uvicorn

        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # so asyncio sets TCP_NODELAY
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(create_proxy_app(Upstream(upstream), run), log_level="error", access_log=False))
        threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True).start()
        while not self.server.started:
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True


def post(connection: http.client.HTTPConnection, path: str, body: dict) -> dict:
    if connection.sock is None:  # a client as a careful agent writes it: no Nagle delay on small requests
        connection.connect()
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return json.loads(connection.getresponse().read())


def step_costs(steps: int) -> dict[str, float]:
    local = envharness.wrap("CartPole-v1")
    server = background(EnvService(HarnessSpec(env_id="CartPole-v1")))
    remote = RemoteEnv(server.url)
    times: dict[str, list[float]] = {"in-process": [], "served": []}
    try:
        for env in (local, remote):
            env.reset(seed=0)
        for i in range(steps):  # taking turns, so drift on a shared machine hits both alike
            for env, name in ((local, "in-process"), (remote, "served")):
                started = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(i % 2)
                times[name].append(time.perf_counter() - started)
                if terminated or truncated:
                    env.reset(seed=i)
    finally:
        remote.close()
        server.stop()
    return {name: 1000 * statistics.median(values) for name, values in times.items()}


def call_costs(calls: int) -> dict[str, float]:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "Where is the coin?"}]}
    with ChatServer(lambda request: Reply(content="go east")) as upstream, tempfile.TemporaryDirectory() as run:
        proxy = ProxyThread(upstream.url, Path(run))
        port = int(upstream.url.rsplit(":", 1)[1].split("/")[0])
        direct, proxied = http.client.HTTPConnection("127.0.0.1", port), http.client.HTTPConnection("127.0.0.1", proxy.port)
        times: dict[str, list[float]] = {"direct": [], "proxied": []}
        for _ in range(calls):
            for connection, name, path in (
                (direct, "direct", "/v1/chat/completions"),
                (proxied, "proxied", "/sessions/s/v1/chat/completions"),
            ):
                started = time.perf_counter()
                post(connection, path, body)
                times[name].append(time.perf_counter() - started)
                if name == "direct":  # the scripted server closes each connection; open the next one
                    connection.close()
        proxy.stop()
    return {name: 1000 * statistics.median(values) for name, values in times.items()}


def sessions_throughput(sessions: int, steps_each: int) -> float:
    """Steps per second of ``sessions`` agent loops at once, each step one proxied model call (100 ms upstream) and one env step."""
    body = {"model": "scripted", "messages": [{"role": "user", "content": "push the cart"}]}
    with ChatServer(lambda request: Reply(content="1"), delay_s=0.1) as upstream, tempfile.TemporaryDirectory() as run:
        proxy = ProxyThread(upstream.url, Path(run))
        server = background(EnvService(HarnessSpec(env_id="CartPole-v1"), max_sessions=64))
        env_port = int(server.url.rsplit(":", 1)[1])

        def loop() -> None:
            model, env = http.client.HTTPConnection("127.0.0.1", proxy.port), http.client.HTTPConnection("127.0.0.1", env_port)
            session = post(env, "/v1/sessions", {"seed": 0})["session_id"]
            for _ in range(steps_each):
                action = int(post(model, f"/sessions/{session}/v1/chat/completions", body)["choices"][0]["message"]["content"])
                if post(env, f"/v1/sessions/{session}/step", {"action": action})["terminated"]:
                    session = post(env, "/v1/sessions", {"seed": 1})["session_id"]

        started = time.perf_counter()
        threads = [threading.Thread(target=loop) for _ in range(sessions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        proxy.stop()
        server.stop()
    return sessions * steps_each / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--loop-steps", type=int, default=20)
    args = parser.parse_args()
    steps = step_costs(args.steps)
    extra_step = steps["served"] - steps["in-process"]
    print(f"CartPole step median: in-process {steps['in-process']:.3f} ms, served {steps['served']:.3f} ms: +{extra_step:.3f} ms "
          f"({'within' if extra_step <= 1.0 else 'ABOVE'} the 1 ms target)")  # fmt: skip
    calls = call_costs(args.calls)
    extra_call = calls["proxied"] - calls["direct"]
    print(f"chat completion median: direct {calls['direct']:.3f} ms, through the proxy {calls['proxied']:.3f} ms: +{extra_call:.3f} ms "
          f"({'within' if extra_call <= 2.0 else 'ABOVE'} the 2 ms target)")  # fmt: skip
    one, many = sessions_throughput(1, args.loop_steps), sessions_throughput(16, args.loop_steps)
    print(f"agent loop, 100 ms upstream: 1 session {one:.1f} steps/s, 16 sessions {many:.1f} steps/s: {many / one:.1f}x "
          f"({'within' if many / one >= 8 else 'BELOW'} the 8x target)")  # fmt: skip
    write_result(
        Path(__file__).parent / "results" / "live_overhead.json",
        "live_overhead",
        vars(args),
        {"step_ms": steps, "step_extra_ms": extra_step, "call_ms": calls, "call_extra_ms": extra_call,
         "sessions_steps_per_s": {"1": one, "16": many}, "sessions_ratio": many / one},
    )  # fmt: skip


if __name__ == "__main__":
    main()
