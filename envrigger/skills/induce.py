"""Induction of skills from trajectories: a deterministic extractor, and a model answering in validated JSON.

Contains :class:`Trace` and :func:`traces` (an episode as induction reads it: its task, its
commands, its rewards), :func:`extract_skills` (lessons read off the traces by fixed rules:
what won, what scored, what repeating gained nothing) and :func:`induce_skills` (the model
is shown successes and failures and answers ``{"skills": [{"text", "when"}]}``; any reply
that is not exactly that is counted, never raised).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envrigger.skills.memory import MAX_SKILL_CHARS, MAX_WHEN_CHARS, Skill

_SENTENCE = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True)
class Trace:
    """One episode as induction reads it: the task text the agent was given, the commands, the rewards, the outcome."""

    episode_id: int
    task: str
    commands: tuple[str, ...]
    rewards: tuple[float, ...]
    success: bool
    level_id: str | None = None


def _text(obs: Any) -> str:
    if isinstance(obs, dict) and isinstance(obs.get("text"), str):
        return obs["text"]
    return obs if isinstance(obs, str) else ""


def traces(store: Any, limit: int | None = None) -> list[Trace]:
    """The episodes of a run as traces; each task text is the reset observation, rebuilt from the episode's spec and seed.

    An episode whose env cannot be built here, or without a seed, gets an empty task.
    """
    from envharness.spec import HarnessSpec

    envs: dict[str, Any] = {}
    out: list[Trace] = []
    try:
        for episode, steps in store.iter_episode_steps():
            if limit is not None and len(out) >= limit:
                break
            task = ""
            if episode.seed is not None and episode.spec_json:
                try:
                    env = envs.get(episode.spec_json) or envs.setdefault(
                        episode.spec_json, HarnessSpec.from_json(episode.spec_json).build()
                    )
                    task = _text(env.reset(seed=int(episode.seed))[0])
                except Exception:  # an env this machine cannot build or reset: the trace has no task text
                    task = ""
            commands = []
            for step in steps:
                info = json.loads(step.info or "{}")
                commands.append(str(info.get("command", step.action)))
            out.append(
                Trace(episode.episode_id, task, tuple(commands), tuple(s.reward for s in steps), bool(episode.success), episode.level_id)
            )
    finally:
        for env in envs.values():
            env.close()
    return out


def _gist(task: str) -> str:
    """The task's first sentences, cut to fit a skill's ``when``."""
    words = " ".join(task.split())
    first = " ".join(_SENTENCE.split(words)[:3])
    return first[: MAX_WHEN_CHARS - 3] + "..." if len(first) > MAX_WHEN_CHARS else first


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SKILL_CHARS else text[: MAX_SKILL_CHARS - 3] + "..."


def extract_skills(found: list[Trace], model: str | None = None, max_skills: int = 20) -> list[Skill]:
    """Lessons read off ``found`` by fixed rules, deterministic (for tests, and as a floor under a model's induction).

    - a won episode: its winning commands in order, for tasks like its own;
    - a command that earned reward: do it when the task names it and it is listed;
    - a command repeated three times or more in a lost episode without reward: it gained nothing.

    Example:
        >>> won = Trace(0, "Go east. Then take the coin.", ("go east", "take coin"), (0.0, 1.0), True)
        >>> lost = Trace(1, "Go west. Then take the coin.", ("look", "look", "look"), (0.0, 0.0, 0.0), False)
        >>> for skill in extract_skills([won, lost]):
        ...     print(skill.text)
        A winning order of commands for a task like this one: go east > take coin.
        'take coin' earned reward: when the task asks for it and it is listed, do it.
        Repeating 'look' gained nothing in a lost episode; pick a listed command not tried yet.
    """
    skills: list[Skill] = []
    seen: set[str] = set()

    def keep(text: str, when: str, episode: int) -> None:
        skill = Skill(text=_cut(text), when=when, source="extractor" if model is None else "model", model=model, episodes=[episode])
        if skill.key not in seen and len(skills) < max_skills:
            seen.add(skill.key)
            skills.append(skill)

    for trace in found:
        when = _gist(trace.task)
        if trace.success and trace.commands:
            keep(f"A winning order of commands for a task like this one: {' > '.join(trace.commands[:8])}.", when, trace.episode_id)
        for command, reward in zip(trace.commands, trace.rewards, strict=False):
            if reward > 0:
                keep(f"'{command}' earned reward: when the task asks for it and it is listed, do it.", "", trace.episode_id)
        if not trace.success:
            for command in dict.fromkeys(trace.commands):
                unrewarded = sum(1 for c, r in zip(trace.commands, trace.rewards, strict=False) if c == command and r <= 0)
                if unrewarded >= 3:
                    keep(
                        f"Repeating '{command}' gained nothing in a lost episode; pick a listed command not tried yet.",
                        "",
                        trace.episode_id,
                    )
    return skills


class _Lesson(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    text: str = Field(min_length=1, max_length=MAX_SKILL_CHARS)
    when: str = Field("", max_length=MAX_WHEN_CHARS)


class _Answer(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    skills: list[_Lesson] = Field(max_length=20)


ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "skills": {
            "type": "array",
            "maxItems": 8,
            "items": {
                "type": "object",
                "properties": {"text": {"type": "string", "minLength": 1}, "when": {"type": "string"}},
                "required": ["text", "when"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["skills"],
    "additionalProperties": False,
}
"""The answer's form, asked for as the response format; its lengths are checked by :func:`parse_skills`, not by the schema."""


def induction_prompt(found: list[Trace], max_traces: int = 8, max_commands: int = 20) -> str:
    """The prompt :func:`induce_skills` sends: successes first, then failures, each task with its commands and outcome."""
    chosen = [t for t in found if t.success][: max_traces // 2]
    chosen += [t for t in found if not t.success][: max_traces - len(chosen)]
    parts = [
        "Below are episodes of an agent playing text tasks: the task, the commands it chose, and whether it won.",
        "Write short, reusable lessons that would help it win similar tasks it has not seen.",
        'Answer with JSON only: {"skills": [{"text": "one or two sentences", "when": "the kind of task it applies to"}]},',
        f"at most 8 skills, each text at most {MAX_SKILL_CHARS} characters, each when at most {MAX_WHEN_CHARS}.",
    ]
    for trace in chosen:
        shown = " > ".join(trace.commands[:max_commands]) + (" > ..." if len(trace.commands) > max_commands else "")
        parts.append(
            f"\nTask: {_gist(trace.task) or '(unknown)'}\nCommands: {shown or '(none)'}\nOutcome: {'won' if trace.success else 'lost'}"
        )
    return "\n".join(parts)


PLACEHOLDERS = ("one or two sentences", "the kind of task it applies to")  # the answer's form as the prompt shows it


def _echo(text: str) -> bool:
    """A lesson that teaches nothing: the prompt's placeholder given back, or under three words (a small model's "two sentences")."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    return len(words) < 3 or " ".join(words) in PLACEHOLDERS


def parse_skills(content: Any, model: str, episodes: list[int]) -> tuple[list[Skill], dict[str, int]]:
    """A model's answer as skills, or none and the reason counted (``not_json``, ``invalid``); never raises.

    A lesson that gives the prompt's placeholder back or has fewer than three words is dropped
    and counted (``echo``): a small model under the answer's schema fills the form with them.

    Example:
        >>> parse_skills('{"skills": [{"text": "Read the task twice.", "when": "any task"}]}', "m", [3])[0][0].text
        'Read the task twice.'
        >>> parse_skills('{"skills": [{"text": 5}]}', "m", [3])
        ([], {'invalid': 1})
        >>> parse_skills(None, "m", [3])
        ([], {'not_json': 1})
        >>> parse_skills('{"skills": [{"text": "one or two sentences", "when": ""}, {"text": "Two sentences.", "when": ""}]}', "m", [3])
        ([], {'echo': 2})
    """
    if not isinstance(content, str):
        return [], {"not_json": 1}
    text = content.strip()
    if text.startswith("```"):  # a fenced answer: the JSON inside
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return [], {"not_json": 1}
    try:
        answer = _Answer.model_validate(data)
    except (ValidationError, RecursionError):
        return [], {"invalid": 1}
    kept = [s for s in answer.skills if not _echo(s.text)]
    skills = [Skill(text=s.text, when=s.when, source="model", model=model, episodes=episodes[:50]) for s in kept]
    return skills, ({"echo": len(answer.skills) - len(kept)} if len(kept) < len(answer.skills) else {})


def induce_skills(endpoint: Any, found: list[Trace], usage: dict[str, int] | None = None) -> tuple[list[Skill], dict[str, int]]:
    """Ask the model at ``endpoint`` (an :class:`~envrigger.agents.Endpoint`) for skills from ``found``; refusals counted, never raised.

    ``usage``, if given, gets what the call cost: ``model_calls`` and the tokens the endpoint reported.
    """
    if not found:
        return [], {}
    import openai  # the llm extra; an endpoint is only given where it is installed

    from envharness.errors import EnvHarnessError  # what Endpoint.client() raises (a key variable not set, an agent error)
    from envrigger.agents.structured import NoAnswer, ask_json

    messages = [{"role": "system", "content": "You answer with JSON only."}, {"role": "user", "content": induction_prompt(found)}]
    calls = 0
    try:
        response, refused = ask_json(endpoint, messages, ANSWER_SCHEMA, max_tokens=1500, name="skills")
        calls = refused + 1
        tokens = getattr(response, "usage", None)
        if usage is not None:
            usage["input_tokens"] = usage.get("input_tokens", 0) + int(getattr(tokens, "prompt_tokens", 0) or 0)
            usage["output_tokens"] = usage.get("output_tokens", 0) + int(getattr(tokens, "completion_tokens", 0) or 0)
        content = response.choices[0].message.content if response.choices else None
    except NoAnswer as failed:
        calls = failed.refused + 1
        if isinstance(failed.error, (AttributeError, TypeError, IndexError)):  # a reply the client parsed into the wrong shape
            return [], {"invalid": 1}
        if not isinstance(failed.error, (openai.APIError, EnvHarnessError)):
            raise failed.error from None
        return [], {"endpoint": 1}
    except (AttributeError, TypeError, IndexError):  # a reply the client parsed into the wrong shape
        return [], {"invalid": 1}
    finally:
        if usage is not None and calls:
            usage["model_calls"] = usage.get("model_calls", 0) + calls  # every request made, a refused form too
    return parse_skills(content, endpoint.model, [t.episode_id for t in found])
