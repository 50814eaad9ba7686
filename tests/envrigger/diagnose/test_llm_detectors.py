"""Diagnosis of LLM agents: scripted models with planted flaws, played through a real Chat Completions server.

In every run, half the episodes (chosen by seed) get the flaw and the others are played
flawlessly (the game's walkthrough), so each flaw comes with failure only where it is
planted: malformed replies, walking back and forth between two rooms, padded answers,
and, for the control, none at all.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

import pytest

from envharness import HarnessSpec
from envrigger.agents import ChatAgentFactory, Endpoint, default_harness, render
from envrigger.agents.scripted import ChatServer, Reply, listed_commands
from envrigger.diagnose import diagnose
from envrigger.rollout import rollout

pytest.importorskip("openai", reason='the chat agent needs the llm extra: pip install "envharness[llm]"')
pytestmark = pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="needs the textworld extra")

# A 15-step horizon (the registration gives 50): the games need at most 5 commands, flawed episodes end sooner.
TW = HarnessSpec(env_id="envharness/TextWorld-v0", env_kwargs={"levels": [3, 4], "games_per_level": 4, "max_episode_steps": 15})
SEEDS = range(16)
FLAWED = {s for s in SEEDS if s % 2}


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "local")


def _first_message(seed: int) -> str:
    obs, _ = TW.build().reset(seed=seed)
    commands = [c for c in obs["commands"].split("\n") if c]
    return render(default_harness(TW.env_id).task_template, observation=obs["text"], commands=commands, step=0, reward=0.0, error="")


def _plans() -> dict[str, tuple[int, list[str]]]:
    out = {}
    for seed in SEEDS:
        env = TW.build()
        env.reset(seed=seed)
        out[_first_message(seed)] = (seed, list(env.unwrapped.policy))
    return out


def run(flaw: str, tmp_path: Any) -> Any:
    plans = _plans()

    def model(request: dict[str, Any]) -> Reply:
        seed, plan = plans[request["messages"][1]["content"]]
        step = sum(1 for m in request["messages"] if m["role"] == "assistant")
        right = plan[step] if step < len(plan) else "look"
        if seed not in FLAWED or flaw == "none":
            return Reply(content=right)
        if flaw == "malformed":
            return Reply(content="Let me think about where the coin could be.")
        if flaw == "pacing":
            goes = [c for c in listed_commands(request) if c.startswith("go ")]
            return Reply(content=goes[step % len(goes)] if goes else "look")
        if flaw == "slow":
            time.sleep(1.2)  # a model that takes its time, and still answers right
            return Reply(content=right)
        if flaw == "padding":
            return Reply(content=f"```\n{right}\n```\n" + "I considered every exit carefully. " * 60)
        raise AssertionError(flaw)

    harness = default_harness(TW.env_id).model_copy(update={"retries": 1})
    with ChatServer(model) as server:
        factory = ChatAgentFactory(harness, Endpoint(server.url, "scripted"))
        return rollout(TW, factory, seeds=SEEDS, out=tmp_path / flaw, concurrency=8 if flaw == "slow" else 1)


def names(items: list[Any]) -> set[str]:
    return {f.name for f in items}


@pytest.fixture(scope="module")
def malformed(tmp_path_factory):
    import os

    os.environ.setdefault("OPENAI_API_KEY", "local")
    return run("malformed", tmp_path_factory.mktemp("malformed"))


def test_malformed_replies_are_found_where_they_come_with_failure(malformed):
    report = diagnose(malformed)
    finding = report.finding("malformed_output")
    assert finding is not None, [f.name for f in report.findings]
    assert finding.failures >= len(FLAWED) and finding.failures == finding.episodes  # it never comes with a success


def test_walking_between_two_rooms_is_found(tmp_path):
    report = diagnose(run("pacing", tmp_path))
    seen = names(report.findings) | {s for f in report.findings for s in f.symptoms}  # merged findings name their symptoms
    assert seen & {"loop", "revisit", "repeated_action"}, [(f.name, f.symptoms) for f in report.findings]


def test_padded_answers_are_a_note_when_they_do_not_cost_success(tmp_path):
    report = diagnose(run("padding", tmp_path))
    assert "verbose_output" in names(report.style_notes) and "verbose_output" not in names(report.findings)


def test_slow_calls_are_a_note_when_they_do_not_cost_success(tmp_path):
    report = diagnose(run("slow", tmp_path))
    note = next(f for f in report.style_notes if f.name == "slow_calls")
    assert note.episodes >= len(FLAWED) and "slow_calls" not in names(report.findings)  # (threads may slow a flawless call too)


def test_a_flawless_model_has_no_findings(tmp_path):
    report = diagnose(run("none", tmp_path))
    assert report.findings == []


def test_the_html_report_shows_the_evidence_as_a_transcript(malformed, tmp_path):
    from envrigger.report import render_html

    store = malformed
    page = render_html(diagnose(store), store)
    chat = page[page.index('id="malformed_output"') :]
    assert 'class="chat"' in chat and "in the model's own words" in chat
    assert chat.index("system · step 0") < chat.index("messages left out")  # the system message and the task stay on top
    assert "Let me think about where the coin could be." in chat  # the model's own reply
    assert "not used: " in chat and "is not one of the listed commands" in chat  # and why the harness sent it back
    assert "That reply could not be used" in chat  # what the model was answered
    (tmp_path / "report.html").write_text(page)
