"""The skill memory: induction from real TextWorld trajectories, the versioned library, retrieval, and a model's JSON."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from typing import Any

import pytest

from envharness import HarnessSpec
from envrigger.agents import Endpoint
from envrigger.agents.scripted import ChatServer, Reply
from envrigger.rollout import rollout
from envrigger.skills import Skill, SkillLibrary, extract_skills, render_skills, traces
from envrigger.skills.induce import induce_skills
from envrigger.skills.memory import SkillLibraryError

needs_textworld = pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="needs the textworld extra")
TW = HarnessSpec(env_id="envharness/TextWorld-v0", env_kwargs={"levels": [3], "games_per_level": 4})


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Four won episodes (the reference solver) and four random ones, on real TextWorld games."""
    if importlib.util.find_spec("textworld") is None:
        pytest.skip("needs the textworld extra")
    root = tmp_path_factory.mktemp("skills")
    won = traces(rollout(TW, "reference", seeds=range(4), out=root / "won"))
    lost = traces(rollout(TW, "random", seeds=range(4, 8), out=root / "random", policy_seed=1))
    return won, lost


@needs_textworld
def test_traces_carry_the_task_the_agent_read_and_the_commands_it_chose(played):
    won, lost = played
    assert all(t.success for t in won) and all(t.task and t.commands for t in won + lost)
    assert all("TextWorld" in t.task or "-=" in t.task for t in won)  # the game's opening text, not the last feedback
    assert all(not c.isdigit() for t in won for c in t.commands)  # commands as the game takes them, not list slots


@needs_textworld
def test_skills_from_won_episodes_are_kept_merged_and_versioned_per_release(played, tmp_path):
    won, lost = played
    library = SkillLibrary(tmp_path / "skills.db")
    first = library.add(extract_skills(won + lost), release="tw-r1", round=1)
    again = library.add(extract_skills(won), release="tw-r1", round=2)  # the same lessons seen again: merged, not added
    assert (first, again) == (1, 2)
    history = library.history()
    assert history[1]["added"] == 0 and history[1]["merged"] > 0
    skills = library.skills("tw-r1")
    assert skills == library.skills("tw-r1", version=1)
    assert any("winning order" in s.text for s in skills) and all(s.release == "tw-r1" and s.round == 1 for s in skills)
    assert library.skills("another-release") == []
    # the lessons carry their evidence: a won episode's id
    assert {e for s in skills for e in s.episodes} & {t.episode_id for t in won}
    # retrieval for the first won task finds the lesson induced from it
    best = library.retrieve(won[0].task, release="tw-r1", k=1)
    assert best and won[0].commands[0] in best[0].text


def test_the_memory_is_bounded_and_a_prompt_block_is_cut_to_its_budget(tmp_path):
    library = SkillLibrary(tmp_path / "skills.db", max_skills=3)
    lessons = [Skill(text=f"Lesson number {word} about doors.", source="extractor") for word in "one two three four five".split()]
    library.add(lessons, release="r")
    assert [s.text for s in library.skills("r")] == [s.text for s in lessons[:3]]
    block = render_skills(lessons, max_chars=80)
    assert len(block) <= 80 and block.count("\n- ") == 1
    with pytest.raises(ValueError):
        Skill(text="x" * 301, source="model")


def test_a_file_that_is_not_a_skill_library_is_refused_and_left_as_it_was(tmp_path):
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE skills (key TEXT, release TEXT, version INTEGER, skill TEXT)")
    before = foreign.read_bytes()
    with pytest.raises(SkillLibraryError, match="not a skill library: "):
        SkillLibrary(foreign)
    assert foreign.read_bytes() == before and not list(tmp_path.glob("other.db-*"))
    text = tmp_path / "notes.db"
    text.write_text("hello")
    with pytest.raises(SkillLibraryError, match="not a skill library: "):
        SkillLibrary(text)
    assert text.read_text() == "hello"


GOOD = json.dumps({"skills": [{"text": "Take the coin as soon as it is listed.", "when": "tasks that end with a coin"}]})


@pytest.mark.parametrize(
    ("content", "counted"),
    [
        (GOOD, {}),
        ("```json\n" + GOOD + "\n```", {}),
        (None, {"not_json": 1}),
        ("I think you should go east.", {"not_json": 1}),
        ("[1, 2, 3]", {"invalid": 1}),
        (json.dumps({"skills": [{"text": 7}]}), {"invalid": 1}),
        (json.dumps({"skills": [{"text": "x" * 5000}]}), {"invalid": 1}),
        (json.dumps({"skills": [{"text": "ok", "when": "", "extra": 1}]}), {"invalid": 1}),
        (json.dumps({"skills": [{"text": "ok"}] * 500}), {"invalid": 1}),
        ("[" * 100_000 + "]" * 100_000, {"not_json": 1}),
        ('{"skills": [{"text": "big", "when": "' + "9" * 5000 + '"}]}', {"invalid": 1}),
        (json.dumps({"skills": [{"text": "One or two sentences.", "when": "the kind of task it applies to"}]}), {"echo": 1}),
    ],
)
def test_a_model_answers_skills_in_json_and_anything_else_is_counted_never_raised(monkeypatch, content, counted):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ChatServer(lambda request: Reply(content=content)) as server:
        skills, refused = induce_skills(Endpoint(server.url, "scripted", attempts=1), [_trace()])
        prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert refused == counted
    assert "Task: Go east" in prompt and "Outcome: won" in prompt
    if not counted:
        assert [(s.text, s.source, s.model, s.episodes) for s in skills] == [
            ("Take the coin as soon as it is listed.", "model", "scripted", [0])
        ]
    else:
        assert skills == []


def test_the_call_asks_for_the_answers_schema_in_the_form_the_endpoint_takes_and_counts_every_request(monkeypatch):
    from envrigger.skills.induce import ANSWER_SCHEMA

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")

    def model(request: dict[str, Any]) -> Reply:  # a server that knows only llama-cpp-python's form
        kind = (request.get("response_format") or {}).get("type")
        return Reply(content=GOOD) if kind == "json_object" else Reply(status=400)

    usage: dict[str, int] = {}
    with ChatServer(model) as server:
        skills, refused = induce_skills(Endpoint(server.url, "scripted", attempts=1), [_trace()], usage=usage)
        asked = [b.get("response_format") for b in server.bodies()]
    assert asked == [
        {"type": "json_schema", "json_schema": {"name": "skills", "schema": ANSWER_SCHEMA}},
        {"type": "json_object", "schema": ANSWER_SCHEMA},
    ]
    assert refused == {"format_refused": 1} and [s.text for s in skills] == ["Take the coin as soon as it is listed."]
    assert usage["model_calls"] == 2  # the refused request was made too


def test_a_request_asked_again_after_a_rate_limit_is_a_model_call_too(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    answers = iter([Reply(status=429, retry_after=0)])
    usage: dict[str, int] = {}
    with ChatServer(lambda request: next(answers, Reply(content=GOOD))) as server:
        skills, refused = induce_skills(Endpoint(server.url, "scripted", attempts=2), [_trace()], usage=usage)
        assert len(server.bodies()) == 2
    assert refused == {"retried": 1} and usage["model_calls"] == 2 and len(skills) == 1
    with ChatServer(lambda request: Reply(status=503, retry_after=0)) as server:
        usage = {}
        assert induce_skills(Endpoint(server.url, "scripted", attempts=2), [_trace()], usage=usage) == ([], {"retried": 1, "endpoint": 1})
    assert usage["model_calls"] == 2


def test_an_endpoint_that_fails_is_counted(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ChatServer(lambda request: Reply(status=500)) as server:
        assert induce_skills(Endpoint(server.url, "scripted", attempts=1), [_trace()]) == ([], {"endpoint": 1})


def _trace() -> Any:
    from envrigger.skills import Trace

    return Trace(0, "Go east. Then take the coin.", ("go east", "take coin"), (0.0, 1.0), True)
