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
    for chunk in stream:
        ident, model = getattr(chunk, "id", ident) or ident, getattr(chunk, "model", model) or model
        if getattr(chunk, "usage", None) is not None:
            usage = chunk.usage
        for choice in getattr(chunk, "choices", None) or []:
            delta = choice.delta
            if getattr(delta, "content", None):
                text.append(delta.content)
                first = first if first is not None else time.perf_counter() - started
            for piece in getattr(delta, "tool_calls", None) or []:
                first = first if first is not None else time.perf_counter() - started
                call = calls.setdefault(int(piece.index or 0), ToolCall())
                call.id = piece.id or call.id
                if piece.function is not None:
                    call.function.name += piece.function.name or ""
                    call.function.arguments += piece.function.arguments or ""
            finish = choice.finish_reason or finish
    if finish is None:
        raise IncompleteStream("the stream ended before its finish reason")
    message = Message("".join(text), [calls[i] for i in sorted(calls)])
    return Completion(ident, model, [Choice(message, finish)], usage, first)
