"""The agent's own loop as data: prompts, context policy, output mode, parsing, retries, sampling.

Contains :class:`AgentHarness` (with :class:`Sampling`, :class:`ContextPolicy`,
:class:`ParseRules`), :func:`default_harness` (an env family's own harness, else a plain one) and
:func:`render` (templates rendered bounded and read-only in jinja2's immutable sandbox,
since harness files are data: see :mod:`envrigger.agents.template`).
An ``AgentHarness`` is to an LLM agent what a ``HarnessSpec`` is to an env: a JSON file,
hashed, so that every run records *which harness* produced it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from pydantic import ConfigDict, Field, ValidationError, field_validator

from envharness.adapters import family_of_id
from envharness.errors import SpecError
from envharness.reading import read_model
from envharness.validated import ValidatedModel
from envrigger.agents.template import compile_template, render
from envrigger.family_registry import family
from envrigger.skills.memory import MAX_SKILL_CHARS

MAX_LESSONS = 200  # lessons a harness may carry: a skill memory's max_skills at most


class Sampling(ValidatedModel):
    """What every model call asks the endpoint for (OpenAI Chat Completions' sampling fields)."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(0.0, ge=0.0, le=2.0, description="sampling temperature (0: greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    seed: int | None = Field(0, ge=0, le=2**31 - 1, description="the endpoint's sampling seed, where it takes one")
    max_tokens: int = Field(512, ge=1, le=131072, description="the longest completion")
    stop: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=4, description="stop sequences")
    stream: bool = Field(
        False, description="stream each completion (server-sent events), recording the time to its first token; usage from the last chunk"
    )


class ContextPolicy(ValidatedModel):
    """Which messages each call sends: the system message and the task always, then the latest turns."""

    model_config = ConfigDict(extra="forbid")

    keep_turns: int | None = Field(
        8, ge=1, le=10000, description="the most recent turns kept (a turn: the model's reply and what followed)"
    )
    token_budget: int | None = Field(
        None, ge=64, le=10_000_000, description="the most estimated tokens sent per call (4 characters a token); oldest turns go first"
    )


class ParseRules(ValidatedModel):
    """How a text reply becomes a command (``output: text``)."""

    model_config = ConfigDict(extra="forbid")

    strip_code_fences: bool = Field(True, description="read the inside of a ``` fenced block when the reply has one")
    first_line: bool = Field(False, description="take only the first non-empty line of the reply")
    strip: str = Field(" \t\r\n.`'\"", max_length=32, description="characters stripped from both ends of the command")
    case_sensitive: bool = Field(False, description="whether a command must match a listed one's case")


class AgentHarness(ValidatedModel):
    """An LLM agent's loop as data: a JSON round-trip, hashed like a ``HarnessSpec``.

    Templates are jinja2, rendered in an immutable sandbox with a budget per render, with
    ``observation`` (the env's text), ``commands`` (a copy of the listed commands, where the
    env lists them), ``step``, ``reward`` and ``error`` (why the last reply could not be
    used, on a retry). A template that is not valid, or that nests too deeply to read, is
    refused when the harness is read.

    Example:
        >>> harness = AgentHarness(system_prompt="You play a text game.")
        >>> AgentHarness.from_json(harness.to_json()) == harness, len(harness.hash())
        (True, 16)
        >>> render("Room: {{ observation }}", observation="a kitchen")
        'Room: a kitchen'
    """

    model_config = ConfigDict(extra="forbid")

    system_prompt: str = Field("You are an agent acting in an environment.", max_length=100_000)
    task_template: str = Field("{{ observation }}", max_length=100_000, description="the first user message of an episode")
    turn_template: str = Field("{{ observation }}", max_length=100_000, description="the user message after each step")
    retry_template: str = Field(
        "That reply could not be used: {{ error }}. Answer again.", max_length=10_000, description="sent back when a reply cannot be used"
    )
    output: Literal["text", "tools"] = Field("text", description="text: the reply is the command; tools: an OpenAI function call")
    parse: ParseRules = Field(default_factory=ParseRules)
    retries: int = Field(2, ge=0, le=20, description="replies that may be sent back per step before the step fails")
    max_calls: int = Field(200, ge=1, le=100_000, description="model calls per episode; the episode ends when they run out")
    episode_seconds: float | None = Field(
        None,
        gt=0,
        le=7 * 86_400,
        description="wall seconds an episode may take: no model call starts after them, and the episode is stored cut "
        "('wall limit') with every step and call it made; a limit of the machine, not the agent, so not in the hash "
        "(unset: `collect` derives it from --episode-timeout)",
    )
    sampling: Sampling = Field(default_factory=Sampling)
    context: ContextPolicy = Field(default_factory=ContextPolicy)
    skills: list[Annotated[str, Field(max_length=MAX_SKILL_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_LESSONS,
        description="lessons the agent may be reminded of (a skill memory): the best matches of each task are put before its first message",
    )
    skills_k: int = Field(3, ge=0, le=20, description="lessons retrieved per task (BM25 over the task's text)")
    skills_chars: int = Field(1200, ge=0, le=20_000, description="characters the lessons may add to a task's first message")

    @field_validator("skills", mode="before")
    @classmethod
    def _short_lessons(cls, lessons: Any) -> Any:
        for i, lesson in enumerate(lessons if isinstance(lessons, list) else []):
            if not isinstance(lesson, str):
                continue  # the type check names it
            if not lesson.strip() or len(lesson) > MAX_SKILL_CHARS:
                raise ValueError(f"skills[{i}]: give a lesson of 1 to {MAX_SKILL_CHARS} characters")
        return lessons

    @field_validator("system_prompt", "task_template", "turn_template", "retry_template")
    @classmethod
    def _compiles(cls, text: str) -> str:
        compile_template(text)  # a one-line ValueError, whatever goes wrong
        return text

    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str, source: str = "agent harness") -> AgentHarness:
        """Parse a harness file's text; a malformed one is a one-line :class:`~envharness.errors.SpecError`."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise SpecError(f"{source}: {where}: {first['msg']}; see `envrigger agent init` for a valid harness") from None

    @classmethod
    def from_file(cls, path: str | Path) -> AgentHarness:
        """Read a harness file; whatever is wrong with it (the file, its JSON, a field) is a one-line SpecError naming the file."""
        return read_model(cls, path, fix="see `envrigger agent init` for a valid harness", error=SpecError)

    def hash(self) -> str:
        """16 hex digits identifying this harness (its canonical JSON without the wall limit; a harness without skills hashes as before skills existed)."""
        data = self.model_dump(mode="json")
        data.pop("episode_seconds")  # how long this machine may take, not what the agent does
        if not data["skills"]:
            for name in ("skills", "skills_k", "skills_chars"):
                data.pop(name)
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def default_harness(env_id: str | None = None, output: str = "text") -> AgentHarness:
    """A good starting harness for ``env_id``: its family's own (see :mod:`envrigger.families`), else the plain one.

    An id Gymnasium does not know here (an env a user's module registers) gets the plain one too.

    Example:
        >>> default_harness("envharness/CodeRepair-v0").output
        'text'
        >>> "Commands" in default_harness("envharness/TextWorld-v0").turn_template
        True
        >>> default_harness("CartPole-v1") == AgentHarness() == default_harness("MyText-v0")
        True
    """
    if output not in ("text", "tools"):
        raise SpecError(f"output: got {output!r}; use text or tools")
    found = family(_family_of(env_id)) if env_id else None
    if found is not None and found.has("agent_harness"):
        return cast(AgentHarness, found.agent_harness(output))  # type: ignore[misc]
    return AgentHarness(output=output)  # type: ignore[arg-type]


def _family_of(env_id: str) -> str:
    """The family of ``env_id``; an id not registered here (a user's env, its module not imported) is generic."""
    try:
        return family_of_id(env_id)
    except SpecError:  # EnvNotFoundError among them
        return "generic"


__all__ = ["AgentHarness", "ContextPolicy", "ParseRules", "Sampling", "default_harness", "render"]
