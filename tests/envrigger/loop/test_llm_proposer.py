"""The LLM proposer against a real Chat Completions server: invalid answers rejected and counted, valid ones only through the gates."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from envharness import HarnessSpec
from envrigger.agents import Endpoint
from envrigger.agents.scripted import ChatServer, Reply, last_user
from envrigger.diagnose import Diagnosis, Finding
from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.library import Library
from envrigger.loop.llm_propose import llm_propose

pytest.importorskip("openai", reason='the LLM proposer needs the llm extra: pip install "envharness[llm]"')

LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})
HOLE = Finding(
    name="terminal_cause:hole", title="falls in a hole", episodes=6, total=10, rate=0.6, rate_ci=(0.3, 0.8), failures=6, severity=1.0
)
DIAGNOSIS = Diagnosis(
    run="r", episodes=10, steps=80, failures=6, success_rate=0.4, success_ci=(0.1, 0.7), spec_hashes=[], policies=[], findings=[HOLE]
)
VALID = {"finding": "terminal_cause:hole", "transforms": [{"name": "ActionSlip", "params": {"p": 0.1}}], "rationale": "slips near holes"}


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "local")


def ask(answer: str) -> tuple[list[Any], dict[str, int], list[dict[str, Any]]]:
    with ChatServer(lambda request: Reply(content=answer)) as server:
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted"))
        return candidates, rejected, server.bodies()


@pytest.mark.parametrize(
    ("kind", "proposal"),
    [
        ("unknown transform", {"finding": "terminal_cause:hole", "transforms": [{"name": "DeleteHoles", "params": {}}]}),
        ("out of bounds", {"finding": "terminal_cause:hole", "transforms": [{"name": "ActionSlip", "params": {"p": 7}}]}),
        ("ill-typed", {"finding": "terminal_cause:hole", "transforms": [{"name": "ActionSlip", "params": {"p": "__import__('os')"}}]}),
        (
            "unknown parameter",
            {"finding": "terminal_cause:hole", "transforms": [{"name": "ActionSlip", "params": {"p": 0.1, "code": "x"}}]},
        ),
        ("a link", {"finding": "terminal_cause:hole", "transforms": [{"name": "Chain", "params": {"env_id": "FrozenLake-v1"}}]}),
        ("unknown finding", {"finding": "flies", "transforms": [{"name": "ActionSlip", "params": {"p": 0.1}}]}),
        ("no transforms", {"finding": "terminal_cause:hole", "transforms": []}),
        ("not an object", ["ActionSlip"]),
    ],
)
def test_each_kind_of_invalid_proposal_is_rejected_and_counted(kind, proposal):
    candidates, rejected, _ = ask(json.dumps({"proposals": [proposal, VALID]}))
    assert rejected == {"invalid": 1}, kind
    assert [c.added[0].name for c in candidates] == ["ActionSlip"]  # the valid one beside it still counts


@pytest.mark.parametrize("answer", ["I would add some slipperiness.", '{"ideas": []}', "[1, 2]", "{" * 100000])
def test_an_answer_that_is_not_the_json_asked_for_is_one_rejection(answer):
    candidates, rejected, _ = ask(answer)
    assert candidates == [] and rejected == {"invalid": 1}


def test_a_valid_proposal_records_its_provenance_and_the_prompt_shows_the_schemas():
    candidates, rejected, bodies = ask("```json\n" + json.dumps({"proposals": [VALID]}) + "\n```")
    (candidate,) = candidates
    assert rejected == {} and candidate.origin == "llm" and candidate.finding == "terminal_cause:hole"
    prompt = bodies[0]["messages"][-1]["content"]
    digest = re.search(r"prompt ([0-9a-f]{16})", candidate.rationale).group(1)
    import hashlib

    assert hashlib.sha256(prompt.encode()).hexdigest()[:16] == digest and "proposed by scripted" in candidate.rationale
    assert "terminal_cause:hole: falls in a hole" in prompt and '"maximum": 1.0' in prompt  # ActionSlip's bound on p


def test_an_endpoint_error_is_counted_not_raised():
    with ChatServer(lambda request: Reply(status=500)) as server:
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted", attempts=1))
        assert len(server.bodies()) == 1  # a server error is the endpoint failing, not its refusal of the format: asked once
    assert candidates == [] and rejected == {"endpoint": 1}


def test_a_rate_limit_and_a_server_error_are_asked_again_in_the_same_form_and_counted():
    answers = iter([Reply(status=429, retry_after=0), Reply(status=503)])

    def model(request: dict[str, Any]) -> Reply:  # busy, then failing, then it answers
        return next(answers, Reply(content=json.dumps({"proposals": [VALID]})))

    with ChatServer(model) as server:
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted", attempts=4))
        asked = [form(b) for b in server.bodies()]
    assert asked == ["json_schema"] * 3 and rejected == {"retried": 2}
    assert [c.added[0].name for c in candidates] == ["ActionSlip"]


def test_an_endpoint_failing_every_time_is_asked_its_attempts_and_a_long_retry_after_never_outlasts_the_call():
    with ChatServer(lambda request: Reply(status=503, retry_after=0)) as server:
        assert llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted", attempts=3)) == ([], {"retried": 2, "endpoint": 1})
        assert len(server.bodies()) == 3
    with ChatServer(lambda request: Reply(status=429, retry_after=20)) as server:
        started = time.monotonic()
        assert llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted", timeout_s=3.0)) == ([], {"endpoint": 1})
        assert time.monotonic() - started < 3.0 and len(server.bodies()) == 1  # 20 s would not leave the call time to ask


def form(body: dict[str, Any]) -> str:
    return (body.get("response_format") or {}).get("type", "none")


def test_the_call_asks_for_the_answers_own_json_schema():
    candidates, rejected, bodies = ask(json.dumps({"proposals": [VALID]}))
    assert rejected == {} and [c.added[0].name for c in candidates] == ["ActionSlip"]
    (body,) = bodies
    assert form(body) == "json_schema"  # OpenAI's structured outputs form, which vLLM, Ollama and llama-server read
    schema = body["response_format"]["json_schema"]["schema"]
    proposal = schema["properties"]["proposals"]["items"]
    assert proposal["properties"]["finding"]["enum"] == ["terminal_cause:hole"]  # only a finding the diagnosis has
    offered = {t["properties"]["name"]["const"]: t["properties"]["params"] for t in proposal["properties"]["transforms"]["items"]["anyOf"]}
    assert "ActionSlip" in offered and "Chain" not in offered and "BlockTool" not in offered  # the prompt's transforms, no link
    assert offered["ActionSlip"]["properties"]["p"] == {"type": "number", "minimum": 0.0, "maximum": 1.0}
    assert offered["ActionSlip"]["additionalProperties"] is False


@pytest.mark.parametrize("status", [400, 422])
def test_an_endpoint_that_refuses_a_form_is_asked_in_the_next_and_the_refusals_are_counted(status):
    def model(request: dict[str, Any]) -> Reply:
        if form(request) in ("json_schema", "json_object"):  # a server that knows no response format
            return Reply(status=status)
        return Reply(content=json.dumps({"proposals": [VALID]}))

    with ChatServer(model) as server:
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted"))
        asked = [form(b) for b in server.bodies()]
    assert asked == ["json_schema", "json_object", "none"] and rejected == {"format_refused": 2}
    assert [c.added[0].name for c in candidates] == ["ActionSlip"]


def test_a_form_named_is_the_only_one_asked_and_text_asks_for_none():
    with ChatServer(
        lambda request: Reply(status=400) if form(request) != "json_object" else Reply(content=json.dumps({"proposals": [VALID]}))
    ) as server:
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted"), answer_format="json_object")
        assert [form(b) for b in server.bodies()] == ["json_object"] and server.bodies()[0]["response_format"]["schema"]
        assert len(candidates) == 1 and rejected == {}
        assert llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted"), answer_format="json_schema") == ([], {"endpoint": 1})
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted"), answer_format="text")
        assert form(server.bodies()[-1]) == "none" and rejected == {"endpoint": 1}  # this server refuses an answer with no format


def test_a_schema_allows_as_many_proposals_as_the_parser_keeps_so_every_form_yields_alike():
    many = [{**VALID, "transforms": [{"name": "ActionSlip", "params": {"p": round(0.05 * k, 2)}}]} for k in range(1, 13)]
    yielded = {}
    for form in ("json_schema", "text"):
        with ChatServer(lambda request: Reply(content=json.dumps({"proposals": many}))) as server:
            candidates, _ = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted"), n=20, answer_format=form)
            schema = (server.bodies()[0].get("response_format") or {}).get("json_schema", {}).get("schema", {})
        yielded[form] = len(candidates)
        if form == "json_schema":
            assert "maxItems" not in schema["properties"]["proposals"]  # 20 is the parser's cap; a grammar of 20 is not asked for
    assert yielded == {"json_schema": 12, "text": 12}
    with ChatServer(lambda request: Reply(content=json.dumps({"proposals": many}))) as server:
        candidates, _ = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "scripted"), n=3, answer_format="json_schema")
        assert server.bodies()[0]["response_format"]["json_schema"]["schema"]["properties"]["proposals"]["maxItems"] == 3
    assert len(candidates) == 3


def test_an_answer_in_the_schema_form_is_still_checked_as_any_answer():
    # The schema leaves out the large caps (a grammar of 1,024 items kills llama.cpp's server) and
    # a grammar may not enforce a number's bounds: the parser does, whatever form was asked for.
    wide = {"finding": "terminal_cause:hole", "transforms": [{"name": "ActionSlip", "params": {"p": 3.0}}], "rationale": "x"}
    candidates, rejected, bodies = ask(json.dumps({"proposals": [wide]}))
    assert form(bodies[0]) == "json_schema" and candidates == [] and rejected == {"invalid": 1}


def test_the_loop_validates_llm_proposals_through_the_gates(tmp_path):
    def model(request: dict[str, Any]) -> Reply:
        prompt = last_user(request)
        finding = re.search(r"^- ([^:\s]+(?::[^:\s]+)?): ", prompt, re.M).group(1)  # the most severe weakness listed
        good = {"finding": finding, "transforms": [{"name": "ActionSlip", "params": {"p": 0.05}}], "rationale": "a little noise"}
        bad = {"finding": finding, "transforms": [{"name": "ActionSlip", "params": {"p": 3}}]}
        return Reply(content=json.dumps({"proposals": [good, bad]}))

    with ChatServer(model) as server:
        config = LoopConfig(
            spec=LAKE, learner="qlearning", rounds=2, budget_steps=4000, collect_episodes=30, eval_episodes=30, val_episodes=20,
            candidates_per_round=2, backend="serial", min_rollouts=20, max_rollouts=40, allow_seen_levels=True, band=(0.05, 0.95),
            proposer="llm", proposer_base_url=server.url, proposer_model="scripted", proposer_max_tokens=300,
        )  # fmt: skip
        result = run_loop(tmp_path / "run", config)
        assert {body["max_tokens"] for body in server.bodies()} == {300}  # --proposer-max-tokens caps every answer asked for
    first = result["rounds"][0]
    assert first["rejected_by"].get("llm_invalid") == 1  # the out-of-bounds one never reached validation
    assert first["candidates"] == 1  # the valid one was validated, by the same gates as any
    library = Library(tmp_path / "run" / "library.db")
    for component in library.components():
        assert component.origin == "llm" and "proposed by scripted" in component.rationale
        assert {g["gate"] for g in component.gates} >= {
            "verifier_integrity",
            "solvability",
            "no_shortcut",
            "learnability",
            "targeting",
            "novelty",
        }
    assert len(library.components()) + sum(v for k, v in first["rejected_by"].items() if not k.startswith("llm_")) == 1


def test_the_loop_with_a_chat_agent_it_does_not_train_reshapes_and_evaluates_through_the_cli(tmp_path):
    import importlib.util
    import os
    import subprocess
    import sys
    from pathlib import Path

    if importlib.util.find_spec("textworld") is None:
        pytest.skip("needs the textworld extra")
    from envrigger.agents.scripted import listed_commands

    def agent(request: dict[str, Any]) -> Reply:
        if "You reshape a training environment" in last_user(request):  # the proposer's prompt
            finding = re.search(r"^- ([^:\s]+(?::[^:\s]+)?): ", last_user(request), re.M).group(1)
            answer = {
                "finding": finding,
                "transforms": [{"name": "TruncateText", "params": {"max_chars": 400}}],
                "rationale": "less to read",
            }
            return Reply(content=json.dumps({"proposals": [answer]}))
        commands = listed_commands(request)
        goes = [c for c in commands if c.startswith("go ")]  # a weak agent: always the first way out
        return Reply(content=(goes or commands or ["look"])[0])

    spec = tmp_path / "tw.json"
    spec.write_text(
        HarnessSpec(
            env_id="envharness/TextWorld-v0", env_kwargs={"levels": [3, 4], "games_per_level": 8, "max_episode_steps": 12}
        ).to_json()
    )
    with ChatServer(agent) as server:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "envrigger"), "run", str(spec), "--learner", "none", "--agent", "chat", "--base-url", server.url,
             "--model", "scripted", "--arms", "rigger", "--rounds", "2", "--budget-steps", "100", "--collect-episodes", "20",
             "--val-episodes", "10", "--eval-episodes", "12", "--candidates", "2", "--proposer", "both", "--proposer-base-url", server.url,
             "--proposer-model", "scripted", "--backend", "serial", "--allow-seen-levels", "-o", str(tmp_path / "run")],
            capture_output=True, text=True, timeout=900, env={**os.environ, "OPENAI_API_KEY": "local"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads((tmp_path / "run" / "final.json").read_text())
    assert final["arms"]["rigger"]["heldout"]["episodes"] == 12  # the original env's held-out levels, evaluated once
    spent = final["arms"]["rigger"]["interaction"]
    assert spent["train"] == 0 and spent["collect"] > 0 and spent["validate"] > 0  # played, reshaped for, never trained
    diagnosis = json.loads((tmp_path / "run" / "round-1" / "diagnosis.json").read_text())
    assert diagnosis["policies"][0].startswith("chat:scripted:")
    saved = json.loads((tmp_path / "run" / "rigger-round-1.agent.json").read_text())
    assert saved["api_key_env"] == "OPENAI_API_KEY" and "local" not in json.dumps(saved)  # the key's variable, never the key
