"""Asking a model for JSON under its schema, in whichever request form the endpoint takes.

Contains :func:`ask_json`, used by the LLM proposer and the skills learner's induction:
the call carries the answer's JSON Schema as its response format, so an endpoint that
decodes under a schema (vLLM, Ollama, llama.cpp's servers, hosted APIs) can only answer in
that form. Endpoints take it in different forms:

- ``json_schema``: OpenAI's structured outputs, ``{"type": "json_schema", "json_schema":
  {"name": ..., "schema": ...}}``; vLLM, Ollama and llama.cpp's ``llama-server`` read it too;
- ``json_object``: ``{"type": "json_object", "schema": ...}``, llama-cpp-python's server
  (which answers ``json_schema`` with a 500 naming ``response_format``);
- ``text``: no format, the JSON asked for in the prompt only.

``auto`` asks in that order, the next form only when the endpoint refuses the request (a
400 or 422, or a 500 naming ``response_format``); any other failure is the endpoint's.
A schema constrains the form, never the checks: callers parse the answer as they would
one in prose. :func:`grammar_ready` keeps what a decoding grammar needs and drops large
caps (llama.cpp's server dies building a grammar for a 1,024-item list), which the
callers' parsers still enforce.
"""

from __future__ import annotations

from typing import Any, Literal

ANSWER_FORMATS = ("auto", "json_schema", "json_object", "text")
AnswerFormat = Literal["auto", "json_schema", "json_object", "text"]
_GRAMMAR_KEYS = frozenset({"type", "enum", "const", "minimum", "maximum", "items", "minItems", "maxItems", "properties", "required",
                           "additionalProperties", "anyOf", "minLength", "maxLength", "minProperties", "maxProperties"})  # fmt: skip
SMALL_CAP = 8  # a larger maxItems, maxLength or maxProperties is left to the parser


def grammar_ready(schema: Any) -> Any:
    """``schema`` with only what a decoding grammar needs: no titles, descriptions or defaults, no cap above :data:`SMALL_CAP`.

    Example:
        >>> grammar_ready({"title": "P", "type": "array", "items": {}, "maxItems": 1024, "description": "ids"})
        {'type': 'array'}
        >>> grammar_ready({"type": "object", "properties": {"title": {"type": "string", "maxLength": 4}}})
        {'type': 'object', 'properties': {'title': {'type': 'string', 'maxLength': 4}}}
    """
    if isinstance(schema, list):
        return [grammar_ready(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: grammar_ready(sub) for name, sub in value.items()}  # property names are data, not keywords
        elif key in _GRAMMAR_KEYS:
            if key in ("maxItems", "maxLength", "maxProperties") and isinstance(value, int) and value > SMALL_CAP:
                continue
            kept = grammar_ready(value)
            if key == "items" and kept == {}:  # any item: the grammar's own default (an empty one breaks llama-cpp-python's)
                continue
            out[key] = kept
    return out


def response_format(form: str, schema: dict[str, Any], name: str = "answer") -> dict[str, Any]:
    """The request's keyword arguments that ask for ``schema`` in ``form`` (none for ``text``).

    Example:
        >>> response_format("json_object", {"type": "object"})
        {'response_format': {'type': 'json_object', 'schema': {'type': 'object'}}}
        >>> response_format("text", {"type": "object"})
        {}
    """
    if form == "json_schema":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}}
    if form == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    return {}


def refused_format(error: Exception) -> bool:
    """Whether an endpoint's error answer refuses the request's response format, rather than the call failing."""
    status = getattr(error, "status_code", None)
    return status in (400, 422) or (status == 500 and "response_format" in str(error))


class NoAnswer(Exception):
    """No form asked was answered: ``error`` is the last call's error, ``refused`` the forms refused before it."""

    def __init__(self, error: Exception, refused: int) -> None:
        super().__init__(f"no answer after {refused} response formats refused: {type(error).__name__}")
        self.error, self.refused = error, refused


def ask_json(
    endpoint: Any,
    messages: list[dict[str, Any]],
    schema: dict[str, Any],
    *,
    max_tokens: int,
    answer_format: AnswerFormat = "auto",
    name: str = "answer",
) -> tuple[Any, int]:
    """The endpoint's response to ``messages``, asked under ``schema``, and how many request forms it refused first.

    :class:`NoAnswer` when no form was answered, with the last call's error and the refusals
    before it (the callers count both).
    """
    forms = ("json_schema", "json_object", "text") if answer_format == "auto" else (answer_format,)
    refused = 0
    for form in forms:
        try:
            response = endpoint.client().chat.completions.create(
                model=endpoint.model,
                messages=messages,
                temperature=0.0,
                seed=0,
                max_tokens=max_tokens,
                **response_format(form, schema, name),
            )
        except Exception as error:
            if form != forms[-1] and refused_format(error):
                refused += 1
                continue
            raise NoAnswer(error, refused) from error
        return response, refused
    raise AssertionError("unreachable: the last form returns or raises")


__all__ = ["ANSWER_FORMATS", "SMALL_CAP", "AnswerFormat", "NoAnswer", "ask_json", "grammar_ready", "refused_format", "response_format"]
