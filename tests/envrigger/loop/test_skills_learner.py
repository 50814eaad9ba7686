"""--learner skills: lessons induced from an LLM agent's own episodes reach its prompt and change what it does.

A test of the plumbing, not a result: a scripted model that follows the walkthrough of
each game wins, so the extractor turns its episodes into "winning order" lessons; a scripted
*skill-following* model, which only knows what its prompt's lessons say, wins those games
with the lessons and loses them without. Then a whole loop with the skills learner.
"""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

import pytest

import envharness
from envharness import HarnessSpec
from envrigger.agents import default_harness
from envrigger.agents.scripted import ChatServer, Reply, listed_commands
from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.learners import make_learner
from envrigger.loop.learners.skills import SkillsLearner
from envrigger.rollout import rollout

pytestmark = pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="needs the textworld extra")
TW = HarnessSpec(env_id="envharness/TextWorld-v0", env_kwargs={"levels": [3], "games_per_level": 2})
HARNESS = default_harness(TW.env_id).model_copy(update={"context": {"keep_turns": None, "token_budget": None}})


def first_user(request: dict[str, Any]) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


def walkthroughs() -> dict[str, list[str]]:
    """Each game's opening text -> its own winning commands (what the walkthrough model knows)."""
    out = {}
    for seed in range(6):
        env = TW.build()
        obs, _ = env.reset(seed=seed)
        out[obs["text"][:200]] = list(env.unwrapped.policy)
    return out


def walker(known: dict[str, list[str]]) -> Any:
    def model(request: dict[str, Any]) -> Reply:
        task = next(plan for opening, plan in known.items() if opening in first_user(request))
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        return Reply(content=task[turn] if turn < len(task) else listed_commands(request)[0])

    return model


def follower(request: dict[str, Any]) -> Reply:
    """Knows nothing but its prompt: plays a lesson's winning order when it has one, else looks around."""
    found = re.search(r"winning order of commands for a task like this one: (.*?)\.(?: \(when|\n|$)", first_user(request))
    if found is None:
        return Reply(content="look")
    order = found.group(1).split(" > ")
    turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
    return Reply(content=order[turn] if turn < len(order) else "look")


def agent(url: str) -> dict[str, Any]:
    return {"base_url": url, "model": "scripted", "harness": HARNESS.model_dump(mode="json"), "api_key_env": "OPENAI_API_KEY"}


def wins(learner: SkillsLearner, seeds: range) -> float:
    store = rollout(TW, learner.policy(), seeds=seeds)
    return sum(e.success for e in store.iter_episodes()) / len(seeds)


def test_lessons_from_won_episodes_reach_the_prompt_and_a_skill_following_model_wins_with_them(tmp_path):
    with ChatServer(walker(walkthroughs())) as teacher:
        learner = SkillsLearner(TW.build(), agent=agent(teacher.url))
        taken = learner.train(lambda: envharness.wrap(TW.env_id, **TW.env_kwargs), 40, seed=0)
    assert taken >= 40 and any("winning order" in s.text for s in learner.skills)
    assert all(s.round == 1 and s.source == "extractor" and s.episodes for s in learner.skills)
    # What training cost the endpoint is counted: one call a step here (the walker always answers a listed command).
    assert learner.spent["model_calls"] == taken and learner.spent["input_tokens"] > 0 and learner.spent["induce_calls"] == 0
    with ChatServer(follower) as student:
        learner.agent = agent(student.url)
        before = SkillsLearner(TW.build(), agent=agent(student.url))
        assert wins(before, range(4)) == 0.0  # no lessons: it only looks around
        assert wins(learner, range(4)) == 1.0  # the lessons of its own earlier episodes win these games
        prompt = next(first_user(r["body"]) for r in student.requests if "Lessons from earlier episodes" in first_user(r["body"]))
        assert "winning order" in prompt
    # The memory names the harness: another set of lessons is another harness (the ledger's harness factor).
    assert learner.policy_id != before.policy_id
    saved = learner.save(tmp_path / "arm")
    again = SkillsLearner.load(tmp_path / "arm", TW.build())
    assert again.skills == learner.skills and again.policy_id == learner.policy_id and "sk-" not in saved.read_text()
    assert again.spent == learner.spent


def test_a_model_inducing_lessons_counts_its_call_and_tokens_with_the_training_cost():
    def teacher(request: dict[str, Any]) -> Reply:
        if request["messages"][0]["content"] == "You answer with JSON only.":  # the induction call
            return Reply(content=json.dumps({"skills": [{"text": "Take the coin once you see it.", "when": "coin games"}]}))
        return walker(walkthroughs())(request)

    with ChatServer(teacher) as server:
        learner = SkillsLearner(TW.build(), agent=agent(server.url), induce="model")
        taken = learner.train(lambda: envharness.wrap(TW.env_id, **TW.env_kwargs), 10, seed=0)
        played = sum(1 for r in server.bodies() if r["messages"][0]["content"] != "You answer with JSON only.")
    assert learner.skills[0].text == "Take the coin once you see it." and learner.skills[0].source == "model"
    assert learner.spent["induce_calls"] == 1 and learner.spent["model_calls"] == played + 1 == taken + 1
    assert learner.spent["output_tokens"] > 0


def test_a_learner_saved_before_the_schema_resumes_asking_as_it_started_and_a_new_one_asks_under_it(tmp_path):
    echo = {"text": "Two sentences.", "when": "the kind of task it applies to"}  # what a 135M model fills the form with

    def teacher(request: dict[str, Any]) -> Reply:
        if request["messages"][0]["content"] == "You answer with JSON only.":
            return Reply(content=json.dumps({"skills": [echo, {"text": "Take the coin once you see it.", "when": "coin games"}]}))
        return walker(walkthroughs())(request)

    def inductions(server: ChatServer) -> list[Any]:
        return [b.get("response_format") for b in server.bodies() if b["messages"][0]["content"] == "You answer with JSON only."]

    with ChatServer(teacher) as server:
        new = SkillsLearner(TW.build(), agent=agent(server.url), induce="model")
        new.train(lambda: envharness.wrap(TW.env_id, **TW.env_kwargs), 4, seed=0)
        saved = json.loads(new.save(tmp_path / "new").read_text())
        old = {k: v for k, v in saved.items() if k != "induce_format"} | {"rounds": 0, "skills": [], "refused": {}}
        (tmp_path / "old.skills.json").write_text(json.dumps(old))  # as a learner saved before 2026-12-06 is
        resumed = SkillsLearner.load(tmp_path / "old", TW.build())
        resumed.train(lambda: envharness.wrap(TW.env_id, **TW.env_kwargs), 4, seed=0)
        asked = inductions(server)
    assert saved["induce_format"] == "auto" and resumed.induce_format == "text"
    assert asked[0]["type"] == "json_schema" and asked[1] is None  # the old one asks in the prompt only, as it did
    assert [s.text for s in new.skills if s.source == "model"] == ["Take the coin once you see it."] and new.refused == {"echo": 1}
    assert "Two sentences." in [s.text for s in resumed.skills] and resumed.refused == {}  # and keeps what it kept
    assert SkillsLearner.load(tmp_path / "new", TW.build()).induce_format == "auto"


def test_a_loop_with_the_skills_learner_trains_evaluates_and_keeps_its_lessons(tmp_path):
    with ChatServer(walker(walkthroughs())) as server:
        config = LoopConfig(
            spec=TW, learner="skills", learner_params={"agent": agent(server.url)}, arms=["original", "rigger"], rounds=2,
            budget_steps=100, collect_episodes=5, eval_episodes=10, val_episodes=10, candidates_per_round=1, min_rollouts=5,
            max_rollouts=5, credit_chunks=0, allow_seen_levels=True,
        )  # fmt: skip
        result = run_loop(tmp_path / "run", config)
    saved = json.loads((tmp_path / "run" / "rigger-round-2.skills.json").read_text())
    assert saved["rounds"] == 2 and saved["skills"] and "OPENAI" not in json.dumps(saved["skills"])
    assert all(arm["heldout"] is not None for arm in result["final"]["arms"].values())


def test_the_skills_learner_needs_an_agent_and_a_known_inducer():
    env = TW.build()
    with pytest.raises(ValueError, match="give --agent chat --base-url URL --model NAME"):
        make_learner("skills", env)
    with pytest.raises(ValueError, match="induce: got 'magic'; use one of extractor, model"):
        make_learner("skills", env, agent=agent("http://127.0.0.1:9/v1"), induce="magic")
    with pytest.raises(ValueError, match="induce_format: got 'xml'; use one of auto, json_schema, json_object, text"):
        make_learner("skills", env, agent=agent("http://127.0.0.1:9/v1"), induce="model", induce_format="xml")


def test_run_with_the_skills_learner_and_no_agent_is_one_line(tmp_path, capsys):
    from envharness.cli import run_cli
    from envrigger.cli import app

    assert run_cli(app, ["run", "envharness/TextWorld-v0", "--learner", "skills", "-o", str(tmp_path / "run")], "envrigger") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "skills (its skill memory) and --agent chat go together" in err[0] and not (tmp_path / "run").exists()


def test_a_run_started_before_the_schema_builds_its_fresh_learners_asking_as_it_started():
    """Added master seeds and a run with no finished round build learners from loop.json, not from a checkpoint."""
    params = {"agent": agent("http://127.0.0.1:9/v1"), "induce": "model"}
    new = LoopConfig(spec=TW, learner="skills", learner_params=params)
    assert new.learner_params["induce_format"] == "auto"  # written into the run, so it resumes with it
    old = json.loads(new.model_dump_json())
    del old["learner_params"]["induce_format"]  # loop.json as a run saved before 2026-12-06 has it
    resumed = LoopConfig.saved(old)
    assert resumed.learner_params["induce_format"] == "text"
    assert make_learner("skills", TW.build(), **resumed.learner_params).induce_format == "text"
    assert LoopConfig.saved(json.loads(new.model_dump_json())).learner_params["induce_format"] == "auto"
    chosen = LoopConfig(spec=TW, learner="skills", learner_params={**params, "induce_format": "json_object"})
    assert LoopConfig.saved(json.loads(chosen.model_dump_json())).learner_params["induce_format"] == "json_object"
