"""A streamed completion put back together: :func:`assemble` reads the chunks of one call.

The chat agent asks for ``stream: true`` (and ``stream_options.include_usage``) when its
harness says so; the chunks' text and tool-call pieces are joined in order, the last
chunk's ``usage`` is kept when the endpoint sends one, and the time to the first chunk that
carries output is recorded. The result reads like a non-streamed response, so the rest of
the agent does not know the difference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

MAX_CALLS = 64  # tool calls kept from one stream


def _field(value: Any, name: str, kind: type = str) -> Any:
    """``value``'s field ``name`` (an attribute, or a key of a dict) if it is a ``kind`` (not a bool), else None."""
    found = value.get(name) if isinstance(value, dict) else getattr(value, name, None) if value is not None else None
    return found if isinstance(found, kind) and not isinstance(found, bool) else None


class IncompleteStream(Exception):
    """The stream ended before a chunk said why the completion finished (a dropped connection): retried like one."""


@dataclass
class Function:
    name: str = ""
    arguments: str = ""


@dataclass
class ToolCall:
    id: str = ""
    function: Function = field(default_factory=Function)


@dataclass
class Message:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass
class Choice:
    message: Message
    finish_reason: str | None = None


@dataclass
class Completion:
    """The fields of a ``ChatCompletion`` the agent reads, from a stream; ``first_token_s`` is new."""

    id: str
    model: str
    choices: list[Choice]
    usage: Any = None
    first_token_s: float | None = None


def assemble(stream: Any, started: float) -> Completion:
    """Read ``stream`` (the chunks of one call) to its end; ``started`` is when the request was sent.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> def chunk(text, finish=None):
        ...     return NS(id="c1", model="m", usage=None, choices=[NS(delta=NS(content=text, tool_calls=None), finish_reason=finish)])
        >>> done = assemble([chunk("go "), chunk("east"), chunk(None, "stop")], started=0.0)
        >>> done.choices[0].message.content, done.first_token_s is not None
        ('go east', True)
    """
    text: list[str] = []
    calls: dict[int, ToolCall] = {}
    ident, model, finish, usage, first = "", "", None, None, None
    for chunk in stream:  # whatever a chunk holds, only text, tool-call pieces, usage and a finish reason are read from it
        ident, model = _field(chunk, "id") or ident, _field(chunk, "model") or model
        if getattr(chunk, "usage", None) is not None:
            usage = chunk.usage
        choices = getattr(chunk, "choices", None)
        for choice in choices if isinstance(choices, list) else []:
            delta = _field(choice, "delta", object)
            content = _field(delta, "content")
            if content:
                text.append(content)
                first = first if first is not None else time.perf_counter() - started
            pieces = _field(delta, "tool_calls", list)
            for piece in pieces or []:
                first = first if first is not None else time.perf_counter() - started
                index = _field(piece, "index", int)
                index = index if index is not None and 0 <= index < 10_000 else 0
                if index not in calls and len(calls) >= MAX_CALLS:
                    continue  # more calls than any reply can use: the agent refuses it by its count already
                call = calls.setdefault(index, ToolCall())
                call.id = _field(piece, "id") or call.id
                function = _field(piece, "function", object)
                call.function.name += _field(function, "name") or ""
                call.function.arguments += _field(function, "arguments") or ""
            reason = _field(choice, "finish_reason", object)
            if reason is not None:
                finish = reason if isinstance(reason, str) else "unknown"
    if finish is None:
        raise IncompleteStream("the stream ended before its finish reason")
    message = Message("".join(text), [calls[i] for i in sorted(calls)])
    return Completion(ident, model, [Choice(message, finish)], usage, first)
