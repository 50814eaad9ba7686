"""The LLM proposer against a real Chat Completions server: invalid answers rejected and counted, valid ones only through the gates."""

from __future__ import annotations

import json
import re
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
    assert candidates == [] and rejected == {"endpoint": 1}


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
            proposer="llm", proposer_base_url=server.url, proposer_model="scripted",
        )  # fmt: skip
        result = run_loop(tmp_path / "run", config)
    first = result["rounds"][0]
    assert first["rejected_by"].get("llm_invalid") == 1  # the out-of-bounds one never reached validation
    assert first["candidates"] == 1  # the valid one was validated, by the same gates as any
    library = Library(tmp_path / "run" / "library.db")
    for component in library.components():
        assert component.origin == "llm" and "proposed by scripted" in component.rationale
        assert {g["gate"] for g in component.gates} >= {"verifier_integrity", "solvability", "learnability", "targeting", "novelty"}
    assert len(library.components()) + sum(v for k, v in first["rejected_by"].items() if not k.startswith("llm_")) == 1
