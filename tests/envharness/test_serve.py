"""`envharness serve` as an agent in another language meets it: a real server process, clients that speak only HTTP.

The clients here use the standard library's ``urllib`` and, for the concurrency test, run
in a separate Python process that imports nothing of ours. The attacks are a hostile
client's: a forged ``info`` or verdict, stepping past the end, malformed JSON, unknown
sessions, oversized bodies, missing or wrong tokens, too many sessions.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import envharness
from envharness import HarnessSpec

pytest.importorskip("fastapi", reason='serving needs the serve extra: pip install "envharness[serve]"')
from envharness.remote import RemoteEnv  # noqa: E402
from envharness.wire import encode  # noqa: E402

TOKEN = "tok-7d1c-SECRET"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """`envharness serve` in its own process, on a free port, until stopped."""

    def __init__(self, spec: str, *extra: str, token: bool = False) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ}
        args = [sys.executable, "-m", "envharness.cli", "serve", spec, "--port", str(self.port), *extra]
        if token:
            env["SERVE_TOKEN"] = TOKEN
            args += ["--token-env", "SERVE_TOKEN"]
        self.process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=1).read()
                return
            except OSError:
                if self.process.poll() is not None:
                    raise AssertionError(self.process.stderr.read()) from None
                assert time.monotonic() < deadline, "the server never answered /healthz"
                time.sleep(0.05)

    def stop(self, sig: int = signal.SIGINT) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
        self.process.wait(timeout=30)


@pytest.fixture
def served(request):
    made: list[Served] = []

    def start(spec: str, *extra: str, token: bool = False) -> Served:
        made.append(Served(spec, *extra, token=token))
        return made[-1]

    yield start
    for server in made:
        server.stop(signal.SIGKILL)


def call(url: str, method: str = "GET", body: Any = None, token: str | None = None, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


# -- the client is a Gymnasium env ------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["CartPole-v1", "FrozenLake-v1", "MiniGrid-DoorKey-5x5-v0"])
def test_remote_env_passes_check_env_and_plays_what_the_local_env_plays(served, env_id):
    from gymnasium.utils.env_checker import check_env

    server = served(env_id)
    remote = RemoteEnv(server.url)
    check_env(remote, skip_render_check=True)
    local = envharness.wrap(env_id)
    rng = np.random.default_rng(0)
    for seed in (3, 4):
        (a, _), (b, _) = remote.reset(seed=seed), local.reset(seed=seed)
        assert encode(a) == encode(b)
        for _ in range(30):
            action = int(rng.integers(local.action_space.n))
            got, want = remote.step(action), local.step(action)
            assert encode(got[0]) == encode(want[0]) and remote.observation_space.contains(got[0])
            assert (got[1], got[2], got[3]) == (float(want[1]), want[2], want[3]) and got[4]["verdict"] == want[4]["verdict"]
            if got[2] or got[3]:
                break
    remote.close()


def test_sb3_trains_on_a_served_env(served):
    sb3 = pytest.importorskip("stable_baselines3", reason="needs the sb3 extra")
    server = served("CartPole-v1")
    model = sb3.PPO("MlpPolicy", RemoteEnv(server.url), n_steps=128, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256


# -- many sessions at once, a client that imports nothing of ours --------------------------------------------------
CLIENT = textwrap.dedent(
    """
    import json, sys, threading, urllib.request
    url, sessions = sys.argv[1], int(sys.argv[2])
    def post(path, body):
        req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req, timeout=60).read())
    out = {}
    def play(seed):
        opened = post("/v1/sessions", {"seed": seed})
        sid, steps, done = opened["session_id"], [], False
        while not done:
            action = [2, 2, 1, 1, 1, 2][len(steps) % 6]  # down, down, right... on FrozenLake 4x4 (deterministic)
            answer = post(f"/v1/sessions/{sid}/step", {"action": action})
            steps.append(action)
            done = answer["terminated"] or answer["truncated"]
        out[sid] = {"seed": seed, "steps": len(steps), "verdict": answer["info"]["verdict"]}
    threads = [threading.Thread(target=play, args=(seed,)) for seed in range(sessions)]
    [t.start() for t in threads]; [t.join() for t in threads]
    print(json.dumps(out))
    """
)


def test_sixteen_sessions_at_once_are_each_recorded_with_their_session_and_verdict(served, tmp_path):
    from envrigger.data import TrajectoryStore

    spec = tmp_path / "lake.json"
    spec.write_text(HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False}).to_json())
    run = tmp_path / "run"
    server = served(str(spec), "--record", str(run))
    client = subprocess.run([sys.executable, "-I", "-c", CLIENT, server.url, "16"], capture_output=True, text=True, timeout=300)
    assert client.returncode == 0, client.stderr
    played = json.loads(client.stdout)
    server.stop()
    episodes = {e.session_id: e for e in TrajectoryStore(run).iter_episodes()}
    assert set(episodes) == set(played) and len(played) == 16
    local = envharness.wrap("FrozenLake-v1", is_slippery=False)
    for session, result in played.items():
        stored = episodes[session]
        assert (stored.seed, stored.length, stored.reason) == (result["seed"], result["steps"], result["verdict"]["reason"])
        local.reset(seed=result["seed"])
        for t in range(result["steps"]):
            *_, info = local.step([2, 2, 1, 1, 1, 2][t % 6])
        assert info["verdict"].reason == stored.reason and stored.policy_id == "remote" and stored.level_id


# -- a hostile client -----------------------------------------------------------------------------------------------
def test_a_forged_info_or_verdict_is_refused_and_a_step_after_the_end_is_409(served):
    server = served("FrozenLake-v1", "--max-sessions", "4")
    status, opened = call(f"{server.url}/v1/sessions", "POST", {"seed": 0})
    sid = opened["session_id"]
    step = f"{server.url}/v1/sessions/{sid}/step"
    for forged in ({"action": 1, "info": {"verdict": {"success": True}}}, {"action": 1, "verdict": {"success": True}}):
        status, answer = call(step, "POST", forged)
        assert status == 400 and "unknown field" in answer["error"] and "\n" not in answer["error"]
    done = False
    while not done:
        status, answer = call(step, "POST", {"action": 1})
        assert status == 200
        done = answer["terminated"] or answer["truncated"]
    assert answer["info"]["verdict"]["success"] is False  # down the first column: a hole, whatever a client claims
    status, answer = call(step, "POST", {"action": 1})
    assert status == 409 and "ended" in answer["error"]


def test_bad_requests_get_their_status_and_one_line(served):
    server = served("CartPole-v1", "--max-sessions", "2", "--max-body", "1024")
    base = f"{server.url}/v1/sessions"
    _, opened = call(base, "POST", {"seed": 1})
    step = f"{base}/{opened['session_id']}/step"
    cases = [
        (call(step, "POST", raw=b"{not json"), 400, "not JSON"),
        (call(step, "POST", {"action": "left"}), 400, "not a whole number"),
        (call(step, "POST", {"action": 7}), 400, "action"),
        (call(step, "POST", {}), 400, '"action"'),
        (call(f"{base}/nope/step", "POST", {"action": 0}), 404, "no session"),
        (call(step, "POST", raw=json.dumps({"action": 0, "pad": "x" * 4000}).encode()), 413, "over 1024 bytes"),
        (call(base, "POST", {"seed": -3}), 400, "seed"),
    ]
    for (status, answer), expected, text in cases:
        assert status == expected and text in answer["error"] and "\n" not in answer["error"], (status, answer)
    call(base, "POST", {})
    status, answer = call(base, "POST", {})
    assert status == 429 and "close one" in answer["error"]
    assert call(step, "POST", {"action": 0})[0] == 200  # the refusals left the session playable


def test_a_token_is_required_when_set_and_never_echoed(served):
    server = served("CartPole-v1", token=True)
    for token in (None, "wrong"):
        status, answer = call(f"{server.url}/v1/spec", token=token)
        assert status == 401 and TOKEN not in json.dumps(answer)
    status, answer = call(f"{server.url}/v1/spec", token=TOKEN)
    assert status == 200 and answer["action_space"] == {"type": "Discrete", "n": 2, "start": 0}
    assert RemoteEnv(server.url, token=TOKEN).reset(seed=0)[0].shape == (4,)


def test_binding_beyond_loopback_without_a_token_is_refused(capsys):
    from envharness.cli import app, run_cli

    assert run_cli(app, ["serve", "CartPole-v1", "--host", "0.0.0.0"], "envharness") == 2
    assert "--token-env" in capsys.readouterr().err


def test_an_idle_session_is_closed_and_its_episode_recorded_as_cut_short(served, tmp_path):
    from envrigger.data import TrajectoryStore

    run = tmp_path / "run"
    server = served("CartPole-v1", "--idle-timeout", "0.3", "--record", str(run))
    _, opened = call(f"{server.url}/v1/sessions", "POST", {"seed": 2})
    step = f"{server.url}/v1/sessions/{opened['session_id']}/step"
    assert call(step, "POST", {"action": 0})[0] == 200
    time.sleep(1.5)
    status, answer = call(step, "POST", {"action": 0})
    assert status == 404
    server.stop()
    (episode,) = list(TrajectoryStore(run).iter_episodes())
    assert episode.length == 1 and "idle" in episode.error and not episode.success


def test_kill_9_of_the_server_keeps_every_finished_episode_and_a_restart_appends(served, tmp_path):
    from envrigger.data import TrajectoryStore

    run = tmp_path / "run"
    server = served("FrozenLake-v1", "--record", str(run))
    env = RemoteEnv(server.url)
    for seed in range(3):
        env.reset(seed=seed)
        while not any(env.step(1)[2:4]):
            pass
    env.reset(seed=9)
    env.step(1)  # an episode in play when the server dies
    server.stop(signal.SIGKILL)
    store = TrajectoryStore(run)
    assert store.verify() == [] and sorted(e.seed for e in store.iter_episodes()) == [0, 1, 2]
    again = served("FrozenLake-v1", "--record", str(run))
    env = RemoteEnv(again.url)
    env.reset(seed=5)
    while not any(env.step(1)[2:4]):
        pass
    again.stop()
    episodes = list(TrajectoryStore(run).iter_episodes())
    assert [e.seed for e in episodes] == [0, 1, 2, 5] and [e.episode_id for e in episodes] == [0, 1, 2, 3]


def test_a_box_action_is_coerced_and_refused_as_in_process(served):
    server = served("MountainCarContinuous-v0")
    remote, local = RemoteEnv(server.url), envharness.wrap("MountainCarContinuous-v0")
    remote.reset(seed=0), local.reset(seed=0)
    got, want = remote.step(np.array([0.5], dtype=np.float32)), local.step(np.array([0.5], dtype=np.float32))
    assert np.allclose(got[0], want[0]) and got[1] == pytest.approx(float(want[1]))
    with pytest.raises(envharness.errors.ActionError, match="shape"):
        remote.step([0.1, 0.2])
    assert isinstance(remote.observation_space, gym.spaces.Box) and remote.observation_space == local.observation_space
