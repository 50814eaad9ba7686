"""``--learner skills``: an LLM agent that learns through a skill memory, not its weights (EnvHarness's mechanism).

Contains :class:`SkillsLearner`. Its ``train`` plays the chat agent (with the lessons it has
so far) on the arm's envs for the round's env steps, reads each episode as a
:class:`~envrigger.skills.Trace` (the task's text, the commands, the rewards, the outcome),
induces lessons from them — by the deterministic extractor, or by the model answering in
validated JSON (``induce: "model"``) — and merges them into its memory (duplicates merged,
at most ``max_skills``). Its policy is the chat agent with those lessons in its harness
(``AgentHarness.skills``), so each task's first message carries the lessons that best match
it, the harness's hash names the memory, and a ledger's harness factor covers skill changes.
It saves the agent's description (never the key), the lessons with their provenance, and
what its training cost the endpoint (``spent``: model calls and tokens, playing and inducing).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from envharness.files import write_text_atomically
from envrigger.agents.harness import MAX_LESSONS
from envrigger.skills import Skill, Trace, extract_skills
from envrigger.skills.induce import induce_skills
from envrigger.structured import ANSWER_FORMATS, AnswerFormat

INDUCERS = ("extractor", "model")
SPENT = ("model_calls", "input_tokens", "output_tokens", "induce_calls")  # induce_calls: included in model_calls


class SkillsLearner:
    """A chat agent whose harness carries the lessons induced from its own episodes, round after round.

    Args:
        env: the env (its spaces are checked by the agent's text view).
        seed: unused (the agent's sampling seed is its harness's).
        agent: ``{"base_url", "model", "harness", "api_key_env", "timeout_s"}``, as ``--learner none`` takes.
        induce: ``extractor`` (deterministic rules) or ``model`` (the agent's own model, in JSON).
        max_skills: the memory's bound (1 to 200, what a harness may carry); the first lessons stay, later duplicates add their evidence.
        induce_format: with ``induce="model"``, how the answer is asked for (:mod:`envrigger.structured`):
            ``auto`` (its JSON Schema, in the form the server takes; echoed placeholders dropped) or
            ``text`` (the prompt only, every valid lesson kept: how a learner saved before 2026-12-06 resumes).

    Example:
        >>> import envharness
        >>> from envrigger.agents import default_harness
        >>> env = envharness.wrap("envharness/CodeRepair-v0", task="add")
        >>> agent = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "harness": default_harness().model_dump(), "api_key_env": "PATH"}
        >>> learner = SkillsLearner(env, agent=agent)
        >>> learner.skills, learner.policy_id.startswith("chat:m:")
        ([], True)
    """

    kind = "skills"

    def __init__(
        self,
        env: gym.Env,
        seed: int = 0,
        agent: dict[str, Any] | None = None,
        induce: str = "extractor",
        max_skills: int = 50,
        induce_format: AnswerFormat = "auto",
    ) -> None:
        from envrigger.agents import text_view

        if not agent or not agent.get("base_url") or not agent.get("model"):
            raise ValueError("--learner skills trains an LLM agent's skill memory: give --agent chat --base-url URL --model NAME")
        if induce not in INDUCERS:
            raise ValueError(f"skills: induce: got {induce!r}; use one of {', '.join(INDUCERS)}")
        if induce_format not in ANSWER_FORMATS:
            raise ValueError(f"skills: induce_format: got {induce_format!r}; use one of {', '.join(ANSWER_FORMATS)}")
        if type(max_skills) is not int or not 1 <= max_skills <= MAX_LESSONS:  # every lesson goes into the agent's harness
            raise ValueError(f"skills: max_skills: got {max_skills!r}; give 1 to {MAX_LESSONS}, the lessons a harness may carry")
        text_view(env)  # an env the agent can read, or a one-line refusal
        self.agent, self.induce, self.max_skills, self.induce_format = dict(agent), induce, int(max_skills), induce_format
        self.skills: list[Skill] = []
        self.rounds = 0
        self.refused: dict[str, int] = {}  # the model's answers that were not skills, counted
        # What training cost the endpoint, over every round (held-out and validation rollouts record their own calls).
        self.spent: dict[str, int] = dict.fromkeys(SPENT, 0)

    def _endpoint(self) -> Any:
        from envrigger.loop.learners.fixed import agent_endpoint

        return agent_endpoint(self.agent)

    def _factory(self) -> Any:
        from envrigger.agents import AgentHarness, ChatAgentFactory

        harness = AgentHarness.model_validate(self.agent.get("harness") or {})
        harness = harness.model_copy(update={"skills": [s.text for s in self.skills]})
        return ChatAgentFactory(harness, self._endpoint())

    @property
    def policy_id(self) -> str:
        return str(self._factory().policy_id)

    def train(self, make_env: Callable[[], gym.Env], steps: int, seed: int) -> int:
        """Play the agent for ``steps`` env steps on envs from ``make_env``, then induce lessons from those episodes."""
        from envrigger.agents import AgentError

        env = make_env()
        factory = self._factory()
        agent = factory(env)
        taken, episode, found = 0, 0, []
        try:
            while taken < steps:
                agent.reset(seed + episode)
                obs, info = env.reset(seed=seed + episode)
                task = obs.get("text", "") if isinstance(obs, dict) else str(obs)
                commands, rewards, success = [], [], False
                done = False
                while not done and taken < steps:
                    try:
                        action = agent.act(obs, info)
                    except AgentError:  # the call budget, or an endpoint that gave up: the episode ends here
                        self._count(agent.pop_calls())
                        break
                    obs, reward, terminated, truncated, info = env.step(action)
                    self._count(agent.pop_calls())
                    taken += 1
                    # What the env played, by name; a wasted turn (an empty command slot) played nothing a lesson could name.
                    named = info.get("command")
                    commands.append(str(named) if named is not None else "" if "wasted" in info else str(action))
                    rewards.append(float(reward))
                    done = terminated or truncated
                    verdict = info.get("verdict")
                    success = bool(getattr(verdict, "success", False)) if done else False
                found.append(Trace(episode, task, tuple(commands), tuple(rewards), success))
                episode += 1
                if not commands:  # nothing was played (an endpoint that answers nothing usable): no more episodes this round
                    taken = max(taken, steps)
        finally:
            env.close()
        self.rounds += 1
        key_env = self.agent.get("api_key_env")
        lessons = extract_skills(found, secret=os.environ.get(key_env) if isinstance(key_env, str) else None)
        if self.induce == "model":
            usage: dict[str, int] = {}
            induced, refused = induce_skills(self._endpoint(), found, usage=usage, answer_format=self.induce_format)
            self.spent["induce_calls"] += usage.get("model_calls", 0)
            self._count([], usage)
            lessons = induced + lessons  # the model's own lessons first, the extractor's as a floor
            for why, count in refused.items():
                self.refused[why] = self.refused.get(why, 0) + count
        self._merge([s.model_copy(update={"round": self.rounds}) for s in lessons])
        return taken

    def _count(self, calls: list[dict[str, Any]], usage: dict[str, int] | None = None) -> None:
        """Add model calls (the agent's records) or an induction's usage to :attr:`spent`."""
        self.spent["model_calls"] += len(calls) + (usage or {}).get("model_calls", 0)
        for key in ("input_tokens", "output_tokens"):
            self.spent[key] += sum(int(c.get(f"gen_ai.usage.{key}", 0) or 0) for c in calls) + (usage or {}).get(key, 0)

    def _merge(self, lessons: list[Skill]) -> None:
        from envrigger.skills.memory import same_lesson

        for lesson in lessons:
            twin = next((i for i, s in enumerate(self.skills) if same_lesson(s, lesson)), None)
            if twin is not None:
                old = self.skills[twin]
                self.skills[twin] = old.model_copy(update={"episodes": list(dict.fromkeys(old.episodes + lesson.episodes))[:50]})
            elif len(self.skills) < self.max_skills:
                self.skills.append(lesson)

    def policy(self) -> Any:
        return self._factory()

    def save(self, path: Path) -> Path:
        target = Path(str(path) + ".skills.json")
        target.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "agent": self.agent, "induce": self.induce, "max_skills": self.max_skills, "rounds": self.rounds,
            "induce_format": self.induce_format,
            "refused": self.refused, "skills": [s.model_dump(mode="json") for s in self.skills], "spent": self.spent,
        }  # fmt: skip
        write_text_atomically(target, json.dumps(state, indent=2, sort_keys=True))
        return target

    @classmethod
    def load(cls, path: Path, env: gym.Env) -> SkillsLearner:
        state = json.loads(Path(str(path) + ".skills.json").read_text())
        learner = cls(
            env,
            agent=state["agent"],
            induce=state["induce"],
            max_skills=state["max_skills"],
            induce_format=state.get("induce_format", "text"),  # saved before the schema: it goes on as it started
        )
        learner.rounds, learner.refused = int(state["rounds"]), dict(state["refused"])
        learner.skills = [Skill.model_validate(s) for s in state["skills"]]
        learner.spent.update({k: int(v) for k, v in state.get("spent", {}).items() if k in SPENT})  # older files: counted from here on
        return learner


__all__ = ["SkillsLearner"]
