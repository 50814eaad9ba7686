"""The chat agent against a real Chat Completions server on 127.0.0.1, through the official openai client.

Scripted models answer: a TextWorld walkthrough, a code-repair fix by tool calls, models
that answer garbage, call unknown tools, or keep failing; the server also plants the
protocol's errors (401, 404, 429 with Retry-After, 500, a request that never answers).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import envharness
from envharness import HarnessSpec, SpecError
from envrigger.agents import (
    AgentHarness,
    ChatAgent,
    ChatAgentFactory,
    ContextPolicy,
    Endpoint,
    check_endpoint,
    decompress,
    default_harness,
    render,
)
from envrigger.agents.scripted import ChatServer, Reply, last_user, listed_commands
from envrigger.data import TrajectoryStore
from envrigger.rollout import rollout

pytest.importorskip("openai", reason='the chat agent needs the llm extra: pip install "envharness[llm]"')
needs_textworld = pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="needs the textworld extra")

TW = HarnessSpec(env_id="envharness/TextWorld-v0", env_kwargs={"levels": [3], "games_per_level": 2})
CODE = HarnessSpec(env_id="envharness/CodeRepair-v0", env_kwargs={"task": "add"})
KEY = "sk-test-SECRET-4f9a1c"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def walkthrough(spec: HarnessSpec, seed: int) -> list[str]:
    env = spec.build()
    env.reset(seed=seed)
    return list(env.unwrapped.policy)


def first_message(harness: AgentHarness, seed: int) -> str:
    obs, _ = TW.build().reset(seed=seed)
    commands = [c for c in obs["commands"].split("\n") if c]
    return render(harness.task_template, observation=obs["text"], commands=commands, step=0, reward=0.0, error="")


def one_episode(store: TrajectoryStore) -> tuple[Any, list[Any]]:
    ((episode, steps),) = list(store.iter_episode_steps())
    return episode, steps


# -- the harness --------------------------------------------------------------------------------------------------
def test_a_harness_round_trips_and_its_hash_names_its_content():
    harness = default_harness("envharness/TextWorld-v0")
    again = AgentHarness.from_json(harness.to_json())
    assert again == harness and again.hash() == harness.hash()
    changed = harness.model_copy(update={"retries": harness.retries + 1})
    assert changed.hash() != harness.hash()


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"retries": -1}', "retries"),
        ('{"output": "speech"}', "output"),
        ('{"turn_template": "{{ observation "}', "turn_template"),
        ('{"sampling": {"temperature": 9}}', "sampling.temperature"),
        ('{"surprise": 1}', "surprise"),
        ("not json", "(top level)"),
    ],
)
def test_a_bad_harness_file_is_one_line_naming_the_field(text, where):
    with pytest.raises(SpecError) as refused:
        AgentHarness.from_json(text, source="h.json")
    assert "\n" not in str(refused.value) and str(refused.value).startswith(f"h.json: {where}")


def test_templates_render_in_a_sandbox():
    assert render("{{ commands | join(', ') }}", commands=["a", "b"]) == "a, b"
    with pytest.raises(SpecError, match="template failed to render"):
        render("{{ observation.__class__.__mro__[1].__subclasses__() }}", observation="x")


# -- a TextWorld episode through the endpoint ---------------------------------------------------------------------
@needs_textworld
def test_a_walkthrough_model_wins_and_every_call_is_recorded_with_its_step(tmp_path):
    plan = walkthrough(TW, 0)

    def model(request: dict[str, Any]) -> Reply:
        command = plan.pop(0)
        assert command in listed_commands(request)  # the turn lists the commands the game accepts
        return Reply(content=command)

    with ChatServer(model) as server:
        store = rollout(TW, ChatAgentFactory(default_harness(TW.env_id), Endpoint(server.url, "scripted")), seeds=[0], out=tmp_path / "run")
    episode, steps = one_episode(store)
    assert episode.success and episode.model_calls == len(steps) == episode.length
    assert episode.input_tokens > 0 and episode.tokens == episode.input_tokens + episode.output_tokens
    assert episode.policy_id == f"chat:scripted:{default_harness(TW.env_id).hash()}"
    call = json.loads(steps[0].calls)[0]
    assert call["gen_ai.request.model"] == "scripted" and call["gen_ai.response.id"].startswith("chatcmpl-")
    assert call["gen_ai.usage.input_tokens"] == steps[0].input_tokens and call["envrigger.usage.estimated"] is False
    sent = decompress(call["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["system", "user"] and "Commands:" in sent[1]["content"]
    assert decompress(call["gen_ai.output.messages"])[0]["content"] == walkthrough(TW, 0)[0]


@needs_textworld
def test_a_reply_that_names_no_command_goes_back_with_the_reason(tmp_path):
    plan, answers, seen = walkthrough(TW, 0), iter(["hmm, let me think", "dance"]), []

    def model(request: dict[str, Any]) -> Reply:
        seen.append(last_user(request))
        nxt = next(answers, None)
        return Reply(content=nxt if nxt is not None else f"```\n{plan.pop(0)}\n```")  # a fenced command is read inside the fence

    with ChatServer(model) as server:
        store = rollout(TW, ChatAgentFactory(default_harness(TW.env_id), Endpoint(server.url, "scripted")), seeds=[0])
    episode, steps = one_episode(store)
    assert episode.success and episode.parse_failures == 2 and steps[0].retries == 2 and steps[0].model_calls == 3
    assert "could not be used" in seen[1] and "is not one of the listed commands" in seen[2]
    errors = [c.get("envrigger.reply.error") for c in json.loads(steps[0].calls)]
    assert "is not one of the listed commands" in errors[0] and errors[2] is None


@needs_textworld
def test_a_model_that_never_answers_usably_wastes_the_turn_after_its_retries():
    harness = default_harness(TW.env_id).model_copy(update={"retries": 1, "max_calls": 6})
    with ChatServer(lambda request: Reply(content="no idea")) as server:
        store = rollout(TW, ChatAgentFactory(harness, Endpoint(server.url, "scripted")), seeds=[0])
    episode, steps = one_episode(store)
    # Two calls per step, three steps, then the call budget is used up: the episode is cut by that limit (not an error),
    # its steps and model calls kept, its reason naming the limit.
    assert [s.model_calls for s in steps] == [2, 2, 2] and all(json.loads(s.info).get("wasted") for s in steps)
    assert episode.error is None and episode.reason == episode.terminal_cause == "call budget" and not episode.success
    assert episode.model_calls == 6 and episode.parse_failures == 6


def test_the_context_keeps_the_system_message_and_the_task_then_the_latest_turns():
    seen: list[list[dict[str, Any]]] = []

    def model(request: dict[str, Any]) -> Reply:
        seen.append(request["messages"])
        return Reply(content='{"tool": "list"}')

    harness = default_harness(CODE.env_id).model_copy(update={"context": ContextPolicy(keep_turns=2), "max_calls": 100})
    with ChatServer(model) as server:
        store = rollout(CODE, ChatAgentFactory(harness, Endpoint(server.url, "scripted")), seeds=[0])
    _, steps = one_episode(store)
    assert len(steps) == 30  # the env's step limit: listing files never ends the episode
    last = seen[-1]
    assert last[0]["role"] == "system" and "Reply with exactly one JSON tool call" in last[1]["content"]
    assert len(last) == 2 + 2 * 2  # system and task, then two turns (a reply and the observation that answered it)
    assert not steps[1].context_truncated and steps[-1].context_truncated


# -- code repair with OpenAI function tools ----------------------------------------------------------------------
def test_code_repair_by_tool_calls_passes_and_an_unknown_tool_is_counted_invalid():
    script = iter(
        [
            [("view", json.dumps({"path": "calc.py"}))],
            [("rm_rf", "{}")],  # not a tool: sent back as the tool's answer, counted
            [("replace", json.dumps({"path": "calc.py", "start": 2, "end": 2, "text": "    return a + b"}))],
            [("run_tests", "{}")],
            [("submit", "{}")],
        ]
    )

    def model(request: dict[str, Any]) -> Reply:
        assert {t["function"]["name"] for t in request["tools"]} == {"list", "view", "replace", "run_tests", "submit"}
        return Reply(content=None, tool_calls=next(script))

    harness = default_harness(CODE.env_id, output="tools")
    with ChatServer(model) as server:
        store = rollout(CODE, ChatAgentFactory(harness, Endpoint(server.url, "scripted")), seeds=[0])
        roles = [m["role"] for m in server.bodies()[-1]["messages"]]
    episode, steps = one_episode(store)
    assert episode.success and episode.length == 4 and episode.tool_errors == 1 and steps[1].invalid_tool_calls == 1
    assert roles.count("tool") == 4  # every call was answered, the invalid one included


# -- streaming ---------------------------------------------------------------------------------------------------
CODE_SCRIPT = [
    [("view", json.dumps({"path": "calc.py"}))],
    [("replace", json.dumps({"path": "calc.py", "start": 2, "end": 2, "text": "    return a + b"}))],
    [("submit", "{}")],
]


@pytest.mark.parametrize("output", ["tools", "text"])
def test_a_streamed_episode_stores_what_a_plain_one_stores_and_the_time_to_first_token(tmp_path, output):
    def model(request: dict[str, Any]) -> Reply:
        step = sum(1 for m in request["messages"] if m["role"] == "assistant")
        ((name, arguments),) = CODE_SCRIPT[step]
        if output == "tools":
            return Reply(content=None, tool_calls=[(name, arguments)])
        return Reply(content=json.dumps({"tool": name, **json.loads(arguments)}))

    runs = {}
    for stream in (False, True):
        harness = default_harness(CODE.env_id, output=output)
        harness = harness.model_copy(update={"sampling": harness.sampling.model_copy(update={"stream": stream})})
        with ChatServer(model) as server:
            runs[stream] = one_episode(rollout(CODE, ChatAgentFactory(harness, Endpoint(server.url, "scripted")), seeds=[0]))
            assert all(bool(body.get("stream")) is stream for body in server.bodies())
    (plain, plain_steps), (streamed, streamed_steps) = runs[False], runs[True]
    assert streamed.success and [s.action for s in streamed_steps] == [s.action for s in plain_steps]
    assert (streamed.input_tokens, streamed.output_tokens) == (plain.input_tokens, plain.output_tokens)  # the last chunk's usage
    calls = [json.loads(s.calls)[0] for s in streamed_steps]
    assert all(
        c["envrigger.usage.estimated"] is False and 0 < c["envrigger.time_to_first_token_s"] <= c["envrigger.latency_s"] for c in calls
    )
    assert all(json.loads(s.calls)[0]["envrigger.time_to_first_token_s"] is None for s in plain_steps)


def test_a_stream_cut_halfway_is_retried_and_never_read_as_a_shorter_reply():
    replies = iter([Reply(content='{"tool": "submit"}', cut=True)])

    def model(request: dict[str, Any]) -> Reply:
        return next(replies, None) or Reply(content='{"tool": "submit"}')

    harness = default_harness(CODE.env_id)
    harness = harness.model_copy(update={"sampling": harness.sampling.model_copy(update={"stream": True})})
    with ChatServer(model) as server:
        episode, steps = one_episode(rollout(CODE, ChatAgentFactory(harness, Endpoint(server.url, "scripted")), seeds=[0]))
    assert episode.error is None and json.loads(steps[0].calls)[0]["envrigger.endpoint.attempts"] == 2
    assert steps[0].action == json.dumps('{"tool": "submit"}') and episode.parse_failures == 0


# -- endpoint errors ----------------------------------------------------------------------------------------------
def test_a_429_with_retry_after_and_a_500_are_retried_and_the_attempts_recorded():
    replies = iter([Reply(status=429, retry_after=0.05), Reply(status=500)])

    def model(request: dict[str, Any]) -> Reply:
        return next(replies, None) or Reply(content='{"tool": "submit"}')

    with ChatServer(model) as server:
        store = rollout(CODE, ChatAgentFactory(default_harness(CODE.env_id), Endpoint(server.url, "scripted")), seeds=[0])
    episode, steps = one_episode(store)
    assert episode.error is None and json.loads(steps[0].calls)[0]["envrigger.endpoint.attempts"] == 3


def test_an_endpoint_that_keeps_failing_or_never_answers_fails_the_episode_not_the_run():
    calls = iter(range(10**6))

    def model(request: dict[str, Any]) -> Reply:
        return Reply(status=500) if next(calls) % 2 == 0 else Reply(hang=True)

    endpoint = Endpoint("", "scripted", timeout_s=0.3, attempts=2)
    with ChatServer(model) as server:
        endpoint.base_url = server.url
        store = rollout(CODE, ChatAgentFactory(default_harness(CODE.env_id), endpoint), seeds=[0, 1])
    errors = [e.error for e in store.iter_episodes()]
    assert len(errors) == 2 and all(e is not None and "failed 2 times" in e for e in errors)
    assert all(KEY not in e for e in errors)


def test_a_401_is_one_line_without_the_key():
    with ChatServer(lambda request: Reply(content="x"), key="another-key") as server:
        with pytest.raises(SpecError, match=r"refused the API key in \$OPENAI_API_KEY \(401\)") as refused:
            check_endpoint(Endpoint(server.url, "scripted"))
    assert KEY not in str(refused.value)


def test_an_unknown_model_lists_the_models_offered():
    with ChatServer(lambda request: Reply(content="x"), models=("qwen-7b", "llama-3")) as server:
        with pytest.raises(SpecError, match=r"model 'gpt-9' is not offered at .*; it offers: llama-3, qwen-7b"):
            check_endpoint(Endpoint(server.url, "gpt-9"))


def test_an_env_without_text_observations_is_refused():
    with pytest.raises(SpecError, match=r"CartPole-v1: its observations \(Box\) .* cannot be made text"):
        ChatAgent(envharness.wrap("CartPole-v1"), AgentHarness(), Endpoint("http://127.0.0.1:9/v1", "m"))


# -- the CLI --------------------------------------------------------------------------------------------------------
def envrigger(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [str(Path(sys.executable).parent / "envrigger"), *args], capture_output=True, text=True, timeout=300,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


@needs_textworld
def test_collect_with_a_chat_agent_records_a_run_and_never_the_key(tmp_path):
    spec = tmp_path / "tw.json"
    spec.write_text(TW.to_json())
    harness = default_harness(TW.env_id)
    plans = {first_message(harness, seed): walkthrough(TW, seed) for seed in (0, 1)}

    def model(request: dict[str, Any]) -> Reply:
        # The episode's first message tells the episodes apart; its own replies so far say how far it is.
        plan = plans[request["messages"][1]["content"]]
        return Reply(content=plan[sum(1 for m in request["messages"] if m["role"] == "assistant")])

    with ChatServer(model, key=KEY) as server:
        done = envrigger("collect", str(spec), "--agent", "chat", "--base-url", server.url, "--model", "scripted", "-n", "2",
                         "--backend", "serial", "-o", str(tmp_path / "run"))  # fmt: skip
        sent = json.dumps(server.requests)
    assert done.returncode == 0, done.stderr[-2000:]
    store = TrajectoryStore(tmp_path / "run")
    assert [e.success for e in store.iter_episodes()] == [True, True]
    assert f"Bearer {KEY}" in sent  # the key went to the endpoint, and nowhere else:
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("unreachable", "cannot reach an endpoint at http://127.0.0.1:9/v1"),
        ("unknown model", "model 'nope' is not offered"),
        ("wrong key", "(401)"),
        ("no key variable", "the API key variable NO_SUCH_KEY_VAR is not set"),
        ("bad harness", "retries"),
        ("not text", "cannot be made text"),
        ("no model", "needs --base-url URL and --model NAME"),
    ],
)
def test_collect_with_a_chat_agent_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path, case, expected):
    bad = tmp_path / "bad.json"
    bad.write_text('{"retries": 99}')
    with ChatServer(lambda request: Reply(content='{"tool": "submit"}'), key=KEY) as server:
        args = {
            "unreachable": ["envharness/CodeRepair-v0", "--base-url", "http://127.0.0.1:9/v1", "--model", "scripted"],
            "unknown model": ["envharness/CodeRepair-v0", "--base-url", server.url, "--model", "nope"],
            "wrong key": ["envharness/CodeRepair-v0", "--base-url", server.url, "--model", "scripted"],
            "no key variable": [
                "envharness/CodeRepair-v0",
                "--base-url",
                server.url,
                "--model",
                "scripted",
                "--api-key-env",
                "NO_SUCH_KEY_VAR",
            ],
            "bad harness": ["envharness/CodeRepair-v0", "--base-url", server.url, "--model", "scripted", "--harness", str(bad)],
            "not text": ["CartPole-v1", "--base-url", server.url, "--model", "scripted"],
            "no model": ["envharness/CodeRepair-v0", "--base-url", server.url],
        }[case]
        done = envrigger("collect", *args, "--agent", "chat", "-o", str(tmp_path / "run"),
                         env={"OPENAI_API_KEY": "wrong" if case == "wrong key" else KEY})  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], done.stderr
    assert KEY not in done.stderr and not (tmp_path / "run").exists()


def test_a_loopback_endpoint_needs_no_key_variable_and_a_hosted_one_still_does(tmp_path):
    # vLLM, llama.cpp and Ollama on this machine take any key: OPENAI_API_KEY unset is fine there, not for a remote host.
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    with ChatServer(lambda request: Reply(content='{"tool": "submit"}')) as server:
        done = subprocess.run([sys.executable, "-m", "envrigger.cli", "collect", "envharness/CodeRepair-v0", "--agent", "chat",
                               "--base-url", server.url, "--model", "scripted", "-n", "1", "-o", str(tmp_path / "local")],
                              capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert {k.lower(): v for k, v in server.requests[-1]["headers"].items()}["authorization"] == "Bearer no-key"
    remote = subprocess.run([sys.executable, "-m", "envrigger.cli", "collect", "envharness/CodeRepair-v0", "--agent", "chat",
                             "--base-url", "http://203.0.113.7:8000/v1", "--model", "m", "-o", str(tmp_path / "remote")],
                            capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert remote.returncode == 2 and "the API key variable OPENAI_API_KEY is not set" in remote.stderr
    assert not (tmp_path / "remote").exists()


def test_agent_init_prints_a_harness_that_validates():
    for env_id in ("envharness/TextWorld-v0", "envharness/CodeRepair-v0", "MyText-v0"):
        done = envrigger("agent", "init", "--env", env_id)
        assert done.returncode == 0, done.stderr
        AgentHarness.from_json(done.stdout)


def test_process_workers_store_what_serial_stores(tmp_path):
    def model(request: dict[str, Any]) -> Reply:
        # A deterministic model: the answer depends only on what it is shown.
        turns = sum(1 for m in request["messages"] if m["role"] == "assistant")
        return Reply(content='{"tool": "submit"}' if turns >= 2 else '{"tool": "view", "path": "calc.py"}')

    factory = None
    with ChatServer(model) as server:
        factory = ChatAgentFactory(default_harness(CODE.env_id), Endpoint(server.url, "scripted"))
        serial = rollout(CODE, factory, seeds=range(4), out=tmp_path / "serial")
        parallel = rollout(CODE, factory, seeds=range(4), backend="process", workers=2, out=tmp_path / "parallel")

    def content(store: TrajectoryStore) -> list[Any]:
        out = []
        for episode, steps in store.iter_episode_steps():
            out.append((episode.seed, episode.success, episode.model_calls, episode.tokens,
                        [(s.action, s.reward, s.input_tokens, s.output_tokens) for s in steps]))  # fmt: skip
        return sorted(out)

    assert content(serial) == content(parallel) and len(content(serial)) == 4


def test_episodes_in_flight_in_threads_store_what_one_at_a_time_stores(tmp_path):
    def model(request: dict[str, Any]) -> Reply:
        turns = sum(1 for m in request["messages"] if m["role"] == "assistant")
        return Reply(content='{"tool": "submit"}' if turns >= 2 else '{"tool": "list"}')

    with ChatServer(model, delay_s=0.05) as server:
        factory = ChatAgentFactory(default_harness(CODE.env_id), Endpoint(server.url, "scripted"))
        one = rollout(CODE, factory, seeds=range(6), out=tmp_path / "one")
        many = rollout(CODE, factory, seeds=range(6), concurrency=4, out=tmp_path / "many")

    def content(store: TrajectoryStore) -> list[Any]:
        return [
            (e.episode_id, e.seed, e.success, e.model_calls, e.tokens, [(s.action, s.reward, s.input_tokens) for s in steps])
            for e, steps in store.iter_episode_steps()
        ]

    assert content(one) == content(many) and len(content(one)) == 6
    with pytest.raises(Exception, match="concurrency: got 2 with backend 'process'"):
        rollout(CODE, factory, seeds=[0], backend="process", concurrency=2)


def test_model_calls_survive_a_jsonl_round_trip_and_an_external_log_gets_them_summed(tmp_path):
    from envrigger.data.jsonl import export_jsonl, import_jsonl

    answers = iter(["no idea", '{"tool": "list"}', '{"tool": "submit"}'])
    with ChatServer(lambda request: Reply(content=next(answers))) as server:
        store = rollout(
            CODE, ChatAgentFactory(default_harness(CODE.env_id), Endpoint(server.url, "scripted")), seeds=[0], out=tmp_path / "run"
        )
    export_jsonl(store, tmp_path / "run.jsonl")
    line = json.loads((tmp_path / "run.jsonl").read_text().splitlines()[0])
    assert line["steps"][0]["calls"][0]["gen_ai.request.model"] == "scripted"
    back = import_jsonl(tmp_path / "run.jsonl", tmp_path / "back")
    (a, a_steps), (b, b_steps) = one_episode(store), one_episode(back)
    assert [s.calls for s in a_steps] == [s.calls for s in b_steps]
    for field in ("model_calls", "input_tokens", "output_tokens", "parse_failures", "retries", "tokens"):
        assert getattr(a, field) == getattr(b, field), field
    assert b.parse_failures == 1 and b.model_calls == 3


def test_a_dead_endpoint_spends_the_runs_error_budget_then_is_asked_no_more(tmp_path):
    with ChatServer(lambda request: Reply(status=503)) as server:
        endpoint = Endpoint(server.url, "scripted", attempts=1, error_budget=3)
        store = rollout(CODE, ChatAgentFactory(default_harness(CODE.env_id), endpoint), seeds=range(6), concurrency=1)
        asked = len(server.bodies())
    errors = [e.error for e in store.iter_episodes()]
    assert asked == 3 and len(errors) == 6 and all(e is not None for e in errors)
    assert all("calls in a row failed (the run's error budget)" in e for e in errors[3:])


def test_collect_prices_the_calls_from_a_price_table_and_refuses_a_bad_one(tmp_path):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"scripted": [2.0, 8.0]}))  # USD per 1M tokens in, out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"scripted": [2.0]}))
    with ChatServer(lambda request: Reply(content='{"tool": "submit"}')) as server:
        common = ["collect", "envharness/CodeRepair-v0", "--agent", "chat", "--base-url", server.url, "--model", "scripted", "-n", "1",
                  "--backend", "serial"]  # fmt: skip
        done = envrigger(*common, "--prices", str(prices), "-o", str(tmp_path / "run"))
        refused = envrigger(*common, "--prices", str(bad), "-o", str(tmp_path / "refused"))
    assert done.returncode == 0, done.stderr[-1500:]
    episode = next(TrajectoryStore(tmp_path / "run").iter_episodes())
    assert episode.cost_usd == pytest.approx((episode.input_tokens * 2.0 + episode.output_tokens * 8.0) / 1e6) and episode.cost_usd > 0
    assert refused.returncode == 2 and "--prices" in refused.stderr and not (tmp_path / "refused").exists()


def test_an_episode_past_its_wall_limit_is_cut_with_its_steps_and_calls_kept_also_with_episodes_in_flight(tmp_path):
    import time

    def slow(request: dict[str, Any]) -> Reply:  # a slow endpoint and a model that never fixes anything
        time.sleep(0.3)
        return Reply(content='{"tool": "list"}')

    harness = default_harness(CODE.env_id).model_copy(update={"episode_seconds": 1.0})
    assert harness.hash() == default_harness(CODE.env_id).hash()  # a limit of the machine: the same agent in the ledger
    path = tmp_path / "harness.json"
    path.write_text(harness.to_json())
    with ChatServer(slow) as server:
        chat = ("--agent", "chat", "--base-url", server.url, "--model", "scripted", "--episodes", "4", "--concurrency", "2")
        done = envrigger("collect", CODE.env_id, *chat, "--harness", str(path), "-o", str(tmp_path / "limit"))
        # No wall limit in the harness: the agent's is --episode-timeout less the request timeout, so the kill never comes.
        derived = envrigger(
            "collect", CODE.env_id, *chat, "--episode-timeout", "2", "--request-timeout", "1", "-o", str(tmp_path / "derived")
        )
    assert done.returncode == 0 and derived.returncode == 0, done.stderr + derived.stderr
    for run in ("limit", "derived"):
        episodes = list(TrajectoryStore(tmp_path / run).iter_episode_steps())
        assert len(episodes) == 4
        for episode, steps in episodes:
            assert episode.error is None and episode.reason == episode.terminal_cause == "wall limit" and not episode.success
            assert steps and episode.length == len(steps) and episode.model_calls >= len(steps)  # what it did is kept


@needs_textworld
def test_the_diagnosis_leads_with_the_models_own_failure_not_the_context_the_harness_cut(tmp_path):
    # A model that echoes its prompt never names a command: every turn is wasted, its
    # context is cut (keep_turns 1) and its call budget runs out. What it did wrong is its reply.
    from envrigger.diagnose import diagnose

    harness = default_harness(TW.env_id)
    harness = harness.model_copy(update={"context": harness.context.model_copy(update={"keep_turns": 1}), "max_calls": 8, "retries": 1})
    with ChatServer(lambda request: Reply(content=last_user(request)[:200])) as server:
        store = rollout(TW, ChatAgentFactory(harness, Endpoint(server.url, "scripted")), seeds=range(8), out=tmp_path / "run")
    lead = diagnose(store).findings[0]
    assert lead.name == "malformed_output" and lead.failures == 8
    assert {"context_truncated", "terminal_cause:call_budget"} <= set(lead.symptoms)
    assert lead.symptoms.index("context_truncated") < lead.symptoms.index("terminal_cause:call_budget")
