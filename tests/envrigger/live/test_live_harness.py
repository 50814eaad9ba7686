"""An external agent in its own live harness: a plain HTTP script plays a served env through the recording proxy.

Three real servers on 127.0.0.1: the scripted Chat Completions endpoint (upstream, in this
process), `envrigger proxy` and `envharness serve --record` (subprocesses, recording into
one run directory). The agent is a separate Python process started with ``-I`` that
imports nothing of ours: it speaks HTTP with ``urllib`` only. Afterwards each stored step
holds the model calls made before it, so `envrigger diagnose` works on the agent's run as
on one `collect --agent chat` recorded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from servers import free_port, start

from envharness import HarnessSpec
from envrigger.agents.scripted import ChatServer, Reply
from envrigger.data import TrajectoryStore
from envrigger.live.calls import CallLog

pytest.importorskip("fastapi", reason='serving needs the serve extra: pip install "envharness[serve]"')
needs_textworld = pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="needs the textworld extra")
TW = HarnessSpec(env_id="envharness/TextWorld-v0", env_kwargs={"levels": [3, 4], "games_per_level": 4, "max_episode_steps": 15})


def stop(process: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    if process.poll() is None:
        os.killpg(process.pid, sig)
    process.wait(timeout=30)


@pytest.fixture
def servers(tmp_path):
    running: list[subprocess.Popen] = []

    def launch(kind: str, *args: str) -> str:
        port = free_port()
        if kind == "serve":
            cmd = ["-m", "envharness.cli", "serve", *args, "--port", str(port)]
        else:
            cmd = ["-m", "envrigger.cli", "proxy", *args, "--port", str(port)]
        running.append(start([sys.executable, *cmd], f"http://127.0.0.1:{port}/healthz"))
        return f"http://127.0.0.1:{port}"

    yield launch
    for process in running:
        stop(process, signal.SIGKILL)


AGENT = textwrap.dedent(
    """
    import json, sys, threading, urllib.request
    env_url, proxy_url, episodes, stream = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "stream"
    def post(url, body, headers=None):
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer sk-agent-SECRET", **(headers or {})})
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.read().decode()
    def ask(sid, messages):
        body = {"model": "scripted", "messages": messages, "stream": stream}
        raw = post(f"{proxy_url}/sessions/{sid}/v1/chat/completions", body)
        if not stream:
            return json.loads(raw)["choices"][0]["message"]["content"]
        text = ""
        for line in raw.splitlines():
            if line.startswith("data: ") and line[6:] != "[DONE]":
                for choice in json.loads(line[6:])["choices"]:
                    text += choice["delta"].get("content") or ""
        return text
    def play(seed):
        opened = json.loads(post(f"{env_url}/v1/sessions", {"seed": seed}))
        sid, obs, done = opened["session_id"], opened["observation"], False
        messages = [{"role": "system", "content": "Play the text game. Reply with one of the listed commands."}]
        while not done:
            commands = [c for c in obs["commands"].split("\\n") if c]
            messages.append({"role": "user", "content": obs["text"] + "\\nCommands:\\n" + "\\n".join("- " + c for c in commands)})
            reply = ask(sid, messages).strip()
            messages.append({"role": "assistant", "content": reply})
            action = commands.index(reply) if reply in commands else len(commands)
            answer = json.loads(post(f"{env_url}/v1/sessions/{sid}/step", {"action": action}))
            obs, done = answer["observation"], answer["terminated"] or answer["truncated"]
    failed = []
    def guarded(seed):
        try:
            play(seed)
        except Exception as error:
            failed.append(f"seed {seed}: {error!r}")
    threads = [threading.Thread(target=guarded, args=(seed,)) for seed in range(episodes)]
    [t.start() for t in threads]; [t.join() for t in threads]
    sys.exit("; ".join(failed)[:2000] if failed else 0)
    """
)


def games() -> tuple[dict[str, list[str]], set[str], dict[int, str]]:
    """Each game's opening text -> its walkthrough; the games played with the flaw (every other one); seed -> opening text."""
    plans, opening = {}, {}
    for seed in range(16):
        env = TW.build()
        obs, _ = env.reset(seed=seed)
        plans[obs["text"]], opening[seed] = list(env.unwrapped.policy), obs["text"]
    flawed = set(sorted(plans)[1::2])
    return plans, flawed, opening


def pacing_model(plans: dict[str, list[str]], flawed: set[str]) -> Any:
    """Wins the flawless games (their walkthrough); in the others walks back and forth between two rooms."""

    def model(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        first = messages[1]["content"].split("\nCommands:")[0]
        step = sum(1 for m in messages if m["role"] == "assistant")
        listed = [line[2:] for line in messages[-1]["content"].splitlines() if line.startswith("- ")]
        if first not in flawed:
            plan = plans[first]
            return Reply(content=plan[step] if step < len(plan) else "look")
        goes = [c for c in listed if c.startswith("go ")]
        return Reply(content=goes[step % len(goes)] if goes else "look")

    return model


@needs_textworld
def test_a_plain_http_agent_through_the_proxy_is_recorded_and_diagnosed_with_transcripts(servers, tmp_path):
    from envrigger.diagnose import diagnose
    from envrigger.report import render_html

    run = tmp_path / "run"
    spec = tmp_path / "tw.json"
    spec.write_text(TW.to_json())
    plans, flawed, opening = games()
    with ChatServer(pacing_model(plans, flawed)) as upstream:
        proxy = servers("proxy", "--upstream", upstream.url, "--run", str(run))
        env = servers("serve", str(spec), "--record", str(run))
        agent = subprocess.run([sys.executable, "-I", "-c", AGENT, env, proxy, "16", "plain"], capture_output=True, text=True, timeout=600)
        assert agent.returncode == 0, agent.stderr
        assert all(r["headers"].get("authorization") == "Bearer sk-agent-SECRET" for r in upstream.requests)  # forwarded upstream
    time.sleep(0.5)
    store = TrajectoryStore(run)
    episodes = list(store.iter_episodes())
    assert len(episodes) == 16 and all(e.success for e in episodes if opening[e.seed] not in flawed)
    paced = [e for e in episodes if opening[e.seed] in flawed]
    assert paced and sum(not e.success for e in paced) >= len(paced) / 2  # pacing mostly runs out of steps
    for episode, steps in store.iter_episode_steps():
        assert episode.model_calls == episode.length == len(steps) and all(s.model_calls == 1 for s in steps)
        sent = json.loads(steps[-1].calls)[0]
        assert sent["gen_ai.conversation.id"] == episode.session_id
    assert "sk-agent-SECRET" not in "".join(
        p.read_text(errors="replace") for p in run.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json")
    )
    report = diagnose(store)
    # A looping agent's behaviours may be merged into one finding (their episodes coincide); its symptoms name them.
    assert any(report.finding(name) is not None for name in ("loop", "revisit", "repeated_action")), [
        (f.name, f.symptoms) for f in report.findings
    ]
    page = render_html(report, store)
    assert 'class="chat"' in page and "Play the text game" in page  # the evidence is the agent's own conversation


def test_a_streamed_call_is_recorded_as_the_plain_call_is(servers, tmp_path):
    def model(request: dict[str, Any]) -> Reply:
        return Reply(content='{"tool": "submit"}' if len(request["messages"]) > 2 else "go east then look around")

    with ChatServer(model) as upstream:
        proxy = servers("proxy", "--upstream", upstream.url, "--run", str(tmp_path / "run"))
        for stream in (False, True):
            body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
            request = urllib.request.Request(f"{proxy}/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                             headers={"Content-Type": "application/json", "X-Envharness-Session": f"s-{stream}"})  # fmt: skip
            urllib.request.urlopen(request, timeout=30).read()
    plain, streamed = CallLog(tmp_path / "run").read()
    assert (plain["gen_ai.conversation.id"], streamed["gen_ai.conversation.id"]) == ("s-False", "s-True")
    assert streamed["envrigger.streamed"] and not plain["envrigger.streamed"]
    assert streamed["gen_ai.output.messages"] == plain["gen_ai.output.messages"]  # the chunks put back together
    assert streamed["gen_ai.response.finish_reasons"] == plain["gen_ai.response.finish_reasons"] == ["stop"]


def test_token_ids_and_logprobs_are_asked_for_and_recorded(servers, tmp_path):
    with ChatServer(lambda request: Reply(content="go east")) as upstream:
        proxy = servers("proxy", "--upstream", upstream.url, "--run", str(tmp_path / "run"), "--token-ids")
        body = {"model": "scripted", "messages": [{"role": "user", "content": "where now?"}]}
        request = urllib.request.Request(f"{proxy}/sessions/abc/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        urllib.request.urlopen(request, timeout=30).read()
        assert upstream.bodies()[-1]["return_token_ids"] is True
    (call,) = CallLog(tmp_path / "run").read("abc")
    assert call["envrigger.prompt_token_ids"] and call["envrigger.token_ids"] and call["envrigger.logprobs"]["content"][0]["token"] == "go"


def test_kill_9_of_the_proxy_loses_no_answered_call_and_a_restart_appends(servers, tmp_path):
    run = tmp_path / "run"
    with ChatServer(lambda request: Reply(content="look")) as upstream:
        first = free_port()
        proxy = start([sys.executable, "-m", "envrigger.cli", "proxy", "--upstream", upstream.url, "--run", str(run), "--port", str(first)],
                      f"http://127.0.0.1:{first}/healthz")  # fmt: skip
        body = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}).encode()
        for i in range(5):
            request = urllib.request.Request(f"http://127.0.0.1:{first}/sessions/s{i}/v1/chat/completions", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})  # fmt: skip
            urllib.request.urlopen(request, timeout=30).read()
        stop(proxy, signal.SIGKILL)
        with open(run / "calls.jsonl", "ab") as handle:
            handle.write(b'{"call": {"gen_ai.conversation.id": "torn"')  # what a kill mid-write leaves
        assert [c["gen_ai.conversation.id"] for c in CallLog(run).read()] == [f"s{i}" for i in range(5)]
        again = servers("proxy", "--upstream", upstream.url, "--run", str(run))
        request = urllib.request.Request(f"{again}/sessions/s5/v1/chat/completions", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        urllib.request.urlopen(request, timeout=30).read()
    log = CallLog(run)
    assert [c["gen_ai.conversation.id"] for c in log.read()] == [f"s{i}" for i in range(6)] and log.torn == 1


def test_an_altered_call_record_is_refused_naming_the_line(tmp_path):
    from envrigger.data import TrajectoryError

    log = CallLog(tmp_path)
    log.append({"gen_ai.conversation.id": "a", "gen_ai.usage.input_tokens": 10})
    log.append({"gen_ai.conversation.id": "b", "gen_ai.usage.input_tokens": 10})
    path = Path(tmp_path) / "calls.jsonl"
    path.write_text(path.read_text().replace('"gen_ai.usage.input_tokens":10}', '"gen_ai.usage.input_tokens":1}', 1))
    with pytest.raises(TrajectoryError, match="line 1 was altered"):
        log.read()


def test_the_proxy_flags_require_a_token_and_bound_a_whole_call(servers, tmp_path, monkeypatch):
    monkeypatch.setenv("PROXY_TOKEN", "tok-proxy-7Qw2x9Lm")
    body = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}).encode()

    def call(url: str, **headers: str) -> tuple[int, str]:
        request = urllib.request.Request(f"{url}/sessions/s1/v1/chat/completions", data=body, method="POST",
                                         headers={"Content-Type": "application/json", **headers})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()

    with ChatServer(lambda request: Reply(content="go east"), delay_s=3.0) as slow:
        run = tmp_path / "run"
        proxy = servers("proxy", "--upstream", slow.url, "--run", str(run), "--token-env", "PROXY_TOKEN", "--request-timeout", "1")
        assert call(proxy)[0] == 401  # no token: refused before anything goes upstream
        assert not slow.requests
        started = time.monotonic()
        status, text = call(proxy, **{"X-Envrigger-Token": "tok-proxy-7Qw2x9Lm"})
        assert status == 504 and time.monotonic() - started < 2.5, (status, text)
    (recorded,) = CallLog(run).read("s1")
    assert "tok-proxy-7Qw2x9Lm" not in (run / "calls.jsonl").read_text()
    assert "tok-proxy-7Qw2x9Lm" not in json.dumps(slow.requests, default=str)  # never forwarded upstream
    assert recorded["envrigger.http.status"] == 504 and "within 1 s" in recorded["envrigger.error"]
    monkeypatch.delenv("PROXY_TOKEN")
    done = subprocess.run([sys.executable, "-m", "envrigger.cli", "proxy", "--upstream", "http://127.0.0.1:9/v1", "--run", str(run),
                           "--token-env", "PROXY_TOKEN"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "PROXY_TOKEN is not set" in done.stderr


def test_agent_lightning_1_0_gateway_paths_record_under_the_rollout(servers, tmp_path):
    # Agent Lightning 1.0 points an agent at /proxy/rollout/{rollout}/attempt/{attempt}/v1: the rollout is the session.
    import openai

    with ChatServer(lambda request: Reply(content="go east")) as upstream:
        proxy = servers("proxy", "--upstream", upstream.url, "--run", str(tmp_path / "run"))
        client = openai.OpenAI(base_url=f"{proxy}/proxy/rollout/ro-7/attempt/at-2/v1", api_key="sk-agent-SECRET", max_retries=0)
        assert [m.id for m in client.models.list()] == ["scripted"]
        answer = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "where now?"}])
        assert answer.choices[0].message.content == "go east"
    (call,) = CallLog(tmp_path / "run").read("ro-7")
    assert call["gen_ai.conversation.id"] == "ro-7" and "sk-agent-SECRET" not in (tmp_path / "run" / "calls.jsonl").read_text()
