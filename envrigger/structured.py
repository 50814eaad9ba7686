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
A rate limit, a server error, a timeout or a dropped connection is asked again in the same
form, as the chat agent does (``Endpoint.attempts`` in all, ``Retry-After`` honoured),
within the call's one deadline.
A schema constrains the form, never the checks: callers parse the answer as they would
one in prose. :func:`grammar_ready` keeps what a decoding grammar needs and drops large
caps (llama.cpp's server dies building a grammar for a 1,024-item list), which the
callers' parsers still enforce.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Literal, NamedTuple

ANSWER_FORMATS = ("auto", "json_schema", "json_object", "text")
AnswerFormat = Literal["auto", "json_schema", "json_object", "text"]
_GRAMMAR_KEYS = frozenset({"type", "minimum", "maximum", "items", "properties", "required", "additionalProperties", "anyOf"})
_SIZES = frozenset({"minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"})
SMALL_CAP = 8  # a larger size bound is left to the parser
RETRIED_STATUS = (408, 409, 429, 500, 502, 503, 504)  # statuses asked again: the endpoint is busy or failing, not refusing
MAX_DEPTH = 32  # nesting a decoding grammar is asked to follow


def grammar_ready(schema: Any, _depth: int = 0) -> Any:
    """``schema`` with only what a decoding grammar needs: no titles, descriptions or defaults, no size bound above :data:`SMALL_CAP`.

    A size bound (``maxItems``, ``minLength`` ...) that is not a small whole number is left
    out, however it is written (``1e9``, ``"1000"``): a large one makes a grammar too big to
    build. ``enum`` and ``const`` values are data and kept as they are; below
    :data:`MAX_DEPTH` levels anything goes.

    Example:
        >>> grammar_ready({"title": "P", "type": "array", "items": {}, "maxItems": 1024, "description": "ids"})
        {'type': 'array'}
        >>> grammar_ready({"type": "object", "properties": {"title": {"type": "string", "maxLength": 4}}})
        {'type': 'object', 'properties': {'title': {'type': 'string', 'maxLength': 4}}}
    """
    if _depth > MAX_DEPTH:
        return {}
    if isinstance(schema, list):
        return [grammar_ready(s, _depth + 1) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: grammar_ready(sub, _depth + 1) for name, sub in value.items()}  # property names are data, not keywords
        elif key in ("enum", "const"):
            out[key] = value  # values, not schemas
        elif key in _SIZES:
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= SMALL_CAP:
                out[key] = value
        elif key in _GRAMMAR_KEYS:
            kept = grammar_ready(value, _depth + 1)
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
    """Whether an endpoint's error answer refuses the request's response format, rather than the call failing.

    A 400 or 422 is the request refused; llama-cpp-python's server answers an unknown
    ``response_format`` type with a 500 that names it, in whatever body it sends.
    """
    status = getattr(error, "status_code", None)
    if status in (400, 422):
        return True
    if status != 500:
        return False
    response = getattr(error, "response", None)
    try:
        body = response.text[:20_000] if response is not None else ""
    except Exception:  # a body that cannot be read as text names nothing
        body = ""
    return "response_format" in str(error)[:20_000] or "response_format" in body


SECRET_MIN_CHARS = 8  # a shorter "key" (a local server's "local", "x") is no secret, and would mangle text


def reply_field(value: Any, name: str) -> Any:
    """A field of what the endpoint sent: a model object's attribute or a dict's key, else None."""
    if isinstance(value, dict):
        return value.get(name)
    if value is None or isinstance(value, (str, bytes, int, float, list, tuple)):
        return None
    return getattr(value, name, None)


def token_count(value: Any) -> int:
    """A token count as an endpoint reported it, if it is one (a whole number from 0 to 2**53), else 0.

    Example:
        >>> token_count(12), token_count("many"), token_count(-5), token_count(1e400), token_count(True)
        (12, 0, 0, 0, 0)
    """
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else 0


def retry_after(error: Any, default: float) -> float:
    """Seconds to wait before asking again: the response's ``Retry-After`` when it is a number (0 to 30), else ``default``.

    Example:
        >>> import httpx
        >>> class Limited(Exception): response = httpx.Response(429, headers={"Retry-After": "inf"})
        >>> retry_after(Limited(), 0.5), retry_after(Exception(), 0.5)
        (30.0, 0.5)
    """
    response = getattr(error, "response", None)
    header = response.headers.get("retry-after") if response is not None else None
    try:
        seconds = float(header) if header is not None else default
    except (ValueError, TypeError):
        return default
    return default if math.isnan(seconds) else min(max(seconds, 0.0), 30.0)  # "inf" asks for the longest wait, not none


class NoAnswer(Exception):
    """No form asked was answered: ``error`` names the last request's failure, ``refused`` the forms refused, ``requests`` all made.

    ``error`` is the failure's kind and status only (``RateLimitError (429)``): an endpoint's
    body can echo the key it was sent, so neither it nor the client's exception is kept.
    """

    def __init__(self, error: Exception | str, refused: int, requests: int | None = None) -> None:
        status = getattr(error, "status_code", None)
        self.error = error if isinstance(error, str) else type(error).__name__ + (f" ({status})" if isinstance(status, int) else "")
        super().__init__(f"no answer after {refused} response formats refused: {self.error}")
        self.refused = refused
        self.requests = refused + 1 if requests is None else requests


def costs(refused: int, requests: int) -> dict[str, int]:
    """What a call cost besides its answer, as callers count it beside their rejections: forms refused, requests asked again.

    Example:
        >>> costs(1, 4), costs(0, 1)
        ({'format_refused': 1, 'retried': 2}, {})
    """
    retried = requests - refused - 1
    return ({"format_refused": refused} if refused else {}) | ({"retried": retried} if retried > 0 else {})


class Asked(NamedTuple):
    """What :func:`ask_json` got: the endpoint's ``response``, the forms it ``refused`` first, the ``requests`` made in all."""

    response: Any
    refused: int
    requests: int

    @property
    def retried(self) -> int:
        """Requests asked again after a rate limit, a server error or a timeout."""
        return self.requests - self.refused - 1


def ask_json(
    endpoint: Any,
    messages: list[dict[str, Any]],
    schema: dict[str, Any],
    *,
    max_tokens: int,
    answer_format: AnswerFormat = "auto",
    name: str = "answer",
) -> Asked:
    """The endpoint's response to ``messages``, asked under ``schema``, with the forms it refused first and the requests made.

    ``endpoint.timeout_s`` bounds the whole call, every form and every retry included. A
    rate limit, a server error (one that does not name ``response_format``), a timeout or a
    dropped connection is asked again in the same form, ``endpoint.attempts`` requests at
    most, after ``Retry-After`` or a doubling wait, only while the deadline leaves time.
    Making the client (the key's variable not set) raises as :meth:`Endpoint.client` does,
    before any request; :class:`NoAnswer` when no form was answered, with the last
    request's error, the refusals and the requests made (the callers count them).
    """
    import openai

    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format: got {answer_format!r}; use one of {', '.join(ANSWER_FORMATS)}")
    forms = ("json_schema", "json_object", "text") if answer_format == "auto" else (answer_format,)
    client = endpoint.client()  # raises before any request is made
    deadline = time.monotonic() + endpoint.timeout_s
    refused = requests = failures = 0
    wait, place = 0.5, 0
    try:
        while True:
            form = forms[place]
            requests += 1
            try:
                response = client.chat.completions.create(
                    model=endpoint.model,
                    messages=messages,
                    temperature=0.0,
                    seed=0,
                    max_tokens=max_tokens,
                    **response_format(form, schema, name),
                )
            except Exception as error:
                left = deadline - time.monotonic()
                if place < len(forms) - 1 and refused_format(error) and left > 0.5:
                    refused, place = refused + 1, place + 1  # the next form gets what is left of the call's time
                elif _busy(error, openai) and failures + 1 < endpoint.attempts and left - retry_after(error, wait) > 0.5:
                    failures += 1
                    pause = retry_after(error, wait)
                    time.sleep(pause)
                    wait, left = min(wait * 2, 8.0), left - pause
                else:
                    raise NoAnswer(error, refused, requests) from None  # the client's error holds the body, which may echo the key
                client.close()
                client = replace(endpoint, timeout_s=left).client()
                continue
            return Asked(response, refused, requests)
    finally:
        client.close()  # its connections now, not whenever the garbage collector finds them


def _busy(error: Exception, openai: Any) -> bool:
    """The endpoint is busy or failing (asked again), not refusing the request: a retried status, a timeout, a lost connection."""
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRIED_STATUS and not refused_format(error)
    return isinstance(error, openai.APIConnectionError)  # APITimeoutError is one


__all__ = [
    "ANSWER_FORMATS",
    "MAX_DEPTH",
    "RETRIED_STATUS",
    "SECRET_MIN_CHARS",
    "SMALL_CAP",
    "AnswerFormat",
    "Asked",
    "NoAnswer",
    "ask_json",
    "costs",
    "grammar_ready",
    "refused_format",
    "reply_field",
    "response_format",
    "retry_after",
    "token_count",
]
