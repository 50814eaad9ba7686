"""The LLM proposer: a model reads the diagnosis and the catalog's schemas and answers with reshapings, as JSON.

Contains :func:`proposer_prompt` (the diagnosis and the JSON schema of every catalog
transform that can reshape the env, rendered in jinja2's sandbox) and :func:`llm_propose`,
which asks an OpenAI-compatible endpoint once and turns its answer into
:class:`~envrigger.loop.propose.Candidate` s. The answer is data, never code: it is parsed
as JSON and every transform is built by the catalog's own pydantic models, so an unknown
transform, a parameter out of its bounds or of the wrong type, a link transform, an
unknown finding or an answer that is not JSON is rejected and counted (``invalid``), and a
valid proposal that does not build on the env is ``incompatible``. What passes goes
through exactly the gates catalog proposals do; its provenance names the model and the
prompt's hash.

The call asks for the answer's own JSON Schema (:func:`answer_schema`: the findings as an
enum, each transform's name and parameters) as the response format, in the form the
endpoint takes (:mod:`envrigger.structured`; each form refused is counted as
``format_refused``). The schema constrains the form, never the checks: the answer is
parsed exactly as without it.

Every path from the model's answer is total: whatever the endpoint sends (no choices, no
message, content that is not text, a body that is not JSON, an answer too long, NaN or
Infinity, numbers too large, nesting too deep, parameters of the wrong type), the result
is a count of refusals, never an exception out of :func:`llm_propose`. Parameters are read
strictly, as JSON types: ``"0.1"`` is not a number and ``1.0`` not a whole one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from envharness.errors import EnvHarnessError
from envharness.spec import HarnessSpec, TransformSpec
from envharness.transforms import CATALOG, TRANSFORMS, transform_from_spec
from envrigger.agents.chat import SECRET_MIN_CHARS, Endpoint, reply_field, scrub
from envrigger.agents.harness import render
from envrigger.diagnose import Diagnosis
from envrigger.loop.propose import Candidate, offerable
from envrigger.structured import ANSWER_FORMATS, SMALL_CAP, AnswerFormat, NoAnswer, ask_json, costs, grammar_ready

PROMPT = """You reshape a training environment so that an agent practises what it fails at.
The environment is {{ env_id }}{% if kwargs %} with arguments {{ kwargs }}{% endif %}.
A diagnosis of the agent's episodes found these weaknesses (most severe first):
{% for f in findings %}- {{ f.name }}: {{ f.title }} (severity {{ "%.2f"|format(f.severity) }}, in {{ f.episodes }} of {{ f.total }} episodes{% if f.condition %}, when {{ f.condition }}{% endif %})
{% endfor %}
These transforms can reshape it; each one's parameters follow its JSON Schema (respect the bounds):
{% for name, schema in schemas %}- {{ name }}: {{ schema }}
{% endfor %}
Answer with JSON only, no prose, in this form, with at most {{ n }} proposals:
{"proposals": [{"finding": "<a weakness name above>", "transforms": [{"name": "<a transform above>", "params": {...}}], "rationale": "<one sentence>"}]}
"""
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
MAX_ANSWER_CHARS = 200_000  # asked for at most 2000 tokens, a model answers far less: a longer answer is refused unread


# Catalog transforms that read or write text (tool calls, verbs, text observations): offered only on text envs.
TEXT_ONLY = frozenset({"BlockTool", "ToolCost", "TextHint", "TruncateText", "BlockVerb", "OpenFile", "WalkthroughStart"})


def _schemas(base: HarnessSpec) -> list[tuple[str, str]]:
    """The catalog transforms (no links) that can reshape the env, with their parameters' JSON Schema."""
    import gymnasium as gym

    env = base.build()
    try:
        text = isinstance(env.action_space, gym.spaces.Text) or isinstance(env.observation_space, (gym.spaces.Text, gym.spaces.Dict))
        usable = []
        for name, cls in sorted(TRANSFORMS.items()):
            if cls not in CATALOG or cls.kind == "link" or (name in TEXT_ONLY and not text):
                continue
            try:
                if cls.capability is not None:
                    env.adapter.require(cls.capability, name)
            except EnvHarnessError:
                continue
            usable.append((name, cls))
    finally:
        env.close()
    out = []
    for name, cls in usable:
        try:
            default = cls()
        except (EnvHarnessError, ValueError):
            default = None  # required parameters: the gates decide on what the model gives
        if default is not None and not offerable(base.extended(default)):
            continue
        schema = cls.model_json_schema()
        out.append((name, json.dumps({"properties": schema.get("properties", {}), "required": schema.get("required", [])}, sort_keys=True)))
    return out


def proposer_prompt(diagnosis: Diagnosis, base: HarnessSpec, n: int = 4) -> str:
    """The prompt the LLM proposer sends: the findings, the transforms with their schemas, the answer's form.

    Example:
        >>> from envrigger.diagnose import Diagnosis, Finding
        >>> d = Diagnosis(run="r", episodes=10, steps=50, failures=6, success_rate=0.4, success_ci=(0.1, 0.7), spec_hashes=[],
        ...               policies=[], findings=[Finding(name="terminal_cause:hole", title="falls in a hole", episodes=6, total=10,
        ...               rate=0.6, rate_ci=(0.3, 0.8), failures=6, severity=1.0)])
        >>> prompt = proposer_prompt(d, HarnessSpec(env_id="FrozenLake-v1"))
        >>> "terminal_cause:hole: falls in a hole" in prompt and "ActionSlip" in prompt and "Chain" not in prompt and "BlockTool" not in prompt
        True
    """
    findings = [
        {
            "name": f.name,
            "title": f.title,
            "severity": f.severity,
            "episodes": f.episodes,
            "total": f.total,
            "condition": (f.stats.get("condition") or {}).get("rule"),
        }
        for f in diagnosis.findings[:8]
    ]
    return render(PROMPT, env_id=base.env_id, kwargs=json.dumps(base.env_kwargs) if base.env_kwargs else "", findings=findings,
                  schemas=_schemas(base), n=n)  # fmt: skip


def _at_most(n: int) -> dict[str, int]:
    """The proposals' ``maxItems``: ``n`` when a grammar holds it cheaply, else none (the parser keeps the first ``n``)."""
    return {"maxItems": max(1, n)} if n <= SMALL_CAP else {}


def answer_schema(diagnosis: Diagnosis, base: HarnessSpec, n: int = 4) -> dict[str, Any]:
    """The JSON Schema of an answer the parser can accept: the prompt's findings, the catalog transforms it lists.

    Sent as the call's response format, so an endpoint that decodes under a schema answers
    in this form; bounds it leaves out (large caps) the parser still enforces.

    Example:
        >>> from envrigger.diagnose import Diagnosis, Finding
        >>> d = Diagnosis(run="r", episodes=10, steps=50, failures=6, success_rate=0.4, success_ci=(0.1, 0.7), spec_hashes=[],
        ...               policies=[], findings=[Finding(name="terminal_cause:hole", title="falls in a hole", episodes=6, total=10,
        ...               rate=0.6, rate_ci=(0.3, 0.8), failures=6, severity=1.0)])
        >>> proposal = answer_schema(d, HarnessSpec(env_id="FrozenLake-v1"))["properties"]["proposals"]["items"]
        >>> proposal["properties"]["finding"]["enum"]
        ['terminal_cause:hole']
        >>> slip = [t for t in proposal["properties"]["transforms"]["items"]["anyOf"] if t["properties"]["name"]["const"] == "ActionSlip"]
        >>> slip[0]["properties"]["params"]["properties"]["p"] == {"type": "number", "minimum": 0.0, "maximum": 1.0}
        True
    """
    transforms = []
    for name, text in _schemas(base):
        params = grammar_ready(json.loads(text))
        transforms.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": name},
                    "params": {
                        "type": "object",
                        "properties": params["properties"],
                        "required": params["required"],
                        "additionalProperties": False,
                    },
                },
                "required": ["name", "params"],
                "additionalProperties": False,
            }
        )
    names = [f.name for f in diagnosis.findings[:8]]
    proposal = {
        "type": "object",
        "properties": {
            "finding": {"enum": names},
            "transforms": {"type": "array", "minItems": 1, "maxItems": 4, "items": {"anyOf": transforms}},
            "rationale": {"type": "string"},
        },
        "required": ["finding", "transforms", "rationale"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"proposals": {"type": "array", "minItems": 1, **_at_most(n), "items": proposal}},
        "required": ["proposals"],
        "additionalProperties": False,
    }


def parse_proposals(
    answer: Any, diagnosis: Diagnosis, base: HarnessSpec, model: str, prompt_hash: str, n: int = 4, secret: str | None = None
) -> tuple[list[Candidate], dict[str, int]]:
    """The candidates in a model's answer, and how many proposals were rejected, by why; ``secret`` never in a rationale.

    Example:
        >>> from envrigger.diagnose import Diagnosis, Finding
        >>> d = Diagnosis(run="r", episodes=10, steps=50, failures=6, success_rate=0.4, success_ci=(0.1, 0.7), spec_hashes=[],
        ...               policies=[], findings=[Finding(name="terminal_cause:hole", title="falls in a hole", episodes=6, total=10,
        ...               rate=0.6, rate_ci=(0.3, 0.8), failures=6, severity=1.0)])
        >>> base = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False})
        >>> answer = '{"proposals": [{"finding": "terminal_cause:hole", "transforms": [{"name": "ActionSlip", "params": {"p": 0.1}}]},'
        >>> answer += ' {"finding": "terminal_cause:hole", "transforms": [{"name": "ActionSlip", "params": {"p": 7}}]}]}'
        >>> candidates, rejected = parse_proposals(answer, d, base, "m", "abc")
        >>> [c.origin for c in candidates], rejected
        (['llm'], {'invalid': 1})
    """
    rejected: dict[str, int] = {}

    def reject(why: str) -> None:
        rejected[why] = rejected.get(why, 0) + 1

    text = answer if isinstance(answer, str) else ""
    if len(text) > MAX_ANSWER_CHARS:
        reject("invalid")
        return [], rejected
    if fenced := _FENCE.search(text):
        text = fenced.group(1)
    try:
        data = json.loads(text, parse_constant=_not_a_number)
    except (ValueError, RecursionError):
        reject("invalid")
        return [], rejected
    proposals = data.get("proposals") if isinstance(data, dict) else None
    if not isinstance(proposals, list):
        reject("invalid")
        return [], rejected
    names = {f.name: f for f in diagnosis.findings}
    out: list[Candidate] = []
    seen = {base.hash()}
    for proposal in proposals[: 2 * max(n, 0)]:
        if _holds(proposal.get("transforms") if isinstance(proposal, dict) else None, secret):  # a spec cannot be scrubbed
            reject("invalid")
            continue
        try:
            finding, built, why = _read(proposal, names)
            candidate_spec = base.extended(*built)
            spec_hash = candidate_spec.hash()
        except Exception:  # whatever the proposal's data does (EnvHarnessError, ValueError, RecursionError...): one refusal
            reject("invalid")
            continue
        if spec_hash in seen:
            reject("duplicate")
            continue
        try:
            compatible = offerable(candidate_spec)
        except Exception:  # a reshaping that breaks building the env is one the env cannot take
            compatible = False
        if not compatible:
            reject("incompatible")
            continue
        seen.add(spec_hash)
        out.append(
            Candidate(
                spec=candidate_spec,
                added=[TransformSpec(**t.to_spec()) for t in built],
                finding=finding.name,
                finding_stats=finding.stats,
                rationale=scrub(f"{finding.name}: proposed by {model} (prompt {prompt_hash}): {why}", secret),
                origin="llm",
            )
        )
        if len(out) == n:
            break
    return out, rejected


def _holds(proposal: Any, secret: str | None) -> bool:
    """Whether ``proposal`` holds ``secret`` anywhere (a key of 8 characters or more; a shorter one is no secret).

    The endpoint knows the key it was sent; a transform's parameters holding it would write it
    to the run with the spec (a rationale is scrubbed instead).
    """
    if not secret or len(secret) < SECRET_MIN_CHARS:
        return False
    try:
        return secret in json.dumps(proposal, ensure_ascii=False) or secret in json.dumps(proposal)
    except (TypeError, ValueError, RecursionError):
        return False  # not JSON data: _read refuses it


def _not_a_number(word: str) -> Any:
    raise ValueError(f"{word} is not a number JSON has")


def _read(proposal: Any, names: dict[str, Any]) -> tuple[Any, list[Any], str]:
    """(the finding, the transforms, the rationale) of one proposal; ValueError (or a SpecError) if it is not one."""
    if not isinstance(proposal, dict) or not isinstance(proposal.get("finding"), str) or proposal["finding"] not in names:
        raise ValueError("no finding of the diagnosis")
    specs = proposal.get("transforms")
    if not isinstance(specs, list) or not specs or len(specs) > 4:
        raise ValueError("transforms must be a list of 1 to 4")
    built = []
    for spec in specs:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not isinstance(spec.get("params", {}), dict):
            raise ValueError("a transform is {name, params}")
        cls = TRANSFORMS.get(spec["name"])
        if cls is None or cls not in CATALOG or cls.kind == "link":
            raise ValueError(f"{spec['name'][:60]!r} is not a catalog transform a proposer may use")
        params = spec.get("params", {})
        _strict(cls).model_validate_json(json.dumps(params, allow_nan=False))  # JSON types as sent: "0.1" is no number
        built.append(transform_from_spec({"name": spec["name"], "params": params}))
    rationale = proposal.get("rationale", "")
    if not isinstance(rationale, str):
        raise ValueError("the rationale is one sentence of text")
    return names[proposal["finding"]], built, rationale[:300].replace("\n", " ")


@cache
def _strict(cls: type[BaseModel]) -> type[BaseModel]:
    """``cls``'s parameters as a strict model: no value coerced from another JSON type, no unknown field."""
    fields: dict[str, Any] = {name: (field.annotation, field) for name, field in cls.model_fields.items()}
    return create_model(f"{cls.__name__}Strict", __config__=ConfigDict(strict=True, extra="forbid"), **fields)


def llm_propose(
    diagnosis: Diagnosis,
    base: HarnessSpec,
    endpoint: Endpoint,
    n: int = 4,
    max_tokens: int = 2000,
    answer_format: AnswerFormat = "auto",
) -> tuple[list[Candidate], dict[str, int]]:
    """Ask the model once; its valid proposals as candidates, and the rejections counted (an endpoint error: ``endpoint``).

    ``max_tokens`` caps the answer: one cut short is not the JSON asked for, so it counts as ``invalid``.
    ``answer_format`` is the response format asked for (module docstring): ``auto`` tries the
    schema forms before none, each refusal counted as ``format_refused``; ``text`` asks for none.

    Nothing the endpoint sends makes this raise: a call that fails is ``endpoint``, an
    answer that is not the JSON asked for (whatever its shape) ``invalid``, and so is a
    proposal holding the API key. With no finding (or ``n`` below 1) nothing is asked.
    """
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format: got {answer_format!r}; use one of {', '.join(ANSWER_FORMATS)}")
    if n < 1 or not diagnosis.findings:  # no proposal could be kept: nothing is asked
        return [], {}
    prompt = proposer_prompt(diagnosis, base, n)
    prompt_hash = hashlib.sha256(prompt.encode()).hexdigest()[:16]
    messages = [{"role": "system", "content": "You answer with JSON only."}, {"role": "user", "content": prompt}]
    schema = answer_schema(diagnosis, base, n) if answer_format != "text" else {}
    try:
        asked = ask_json(endpoint, messages, schema, max_tokens=max_tokens, answer_format=answer_format, name="reshapings")
    except NoAnswer as failed:  # refused, unreachable, or a body the client cannot read (not JSON): the call failed
        return [], costs(failed.refused, failed.requests) | {"endpoint": 1}
    except Exception:  # the key's variable not set, or whatever else making the client raises: the call failed
        return [], {"endpoint": 1}
    counts, response = costs(asked.refused, asked.requests), asked.response
    choices = reply_field(response, "choices")
    content = reply_field(reply_field(choices[0], "message"), "content") if isinstance(choices, list) and choices else None
    try:
        candidates, rejected = parse_proposals(
            content, diagnosis, base, endpoint.model, prompt_hash, n, secret=os.environ.get(endpoint.api_key_env)
        )
    except Exception:  # parse_proposals refuses what it reads; this is the last guard of a run against an answer
        candidates, rejected = [], {"invalid": 1}
    return candidates, counts | rejected


__all__ = ["answer_schema", "llm_propose", "parse_proposals", "proposer_prompt"]
