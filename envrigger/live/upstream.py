"""The proxy's side of a model call: :class:`Upstream` (a total deadline per call) and the total decoding of its answers.

Whatever an upstream sends, the proxy gets one of two things from here: a decoded answer
whose every field it reads has the type the OpenAI API gives it, or an
:class:`UpstreamError` (502, or 504 past the deadline) with a one-line message. So the
proxy never fails with an exception of its own on an upstream's answer, and records each
call exactly once.

- :class:`Deadline`: the whole call (connect, status line, headers, every byte of the
  body or stream) within ``timeout`` seconds. A watchdog thread shuts the connection's
  socket at the deadline, so an upstream dripping its answer a byte at a time, each byte
  within any per-read timeout, is cut there too.
- :func:`read_answer` and :func:`check_answer`: a non-streamed answer, read whole (at
  most :data:`MAX_ANSWER` bytes) and checked.
- :class:`EventStream`: a stream's server-sent events, one at a time, each checked and
  put back together into the reply; ``data: [DONE]`` ends it, and anything after it is
  not read.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from envharness.httpguard import DEPTH, Deadline, first_line, parse_json

MAX_ANSWER = 64 << 20  # bytes of a non-streamed answer (or of one stream line) the proxy reads before refusing it
DONE: Any = object()  # what EventStream.events gives as the chunk of the ``data: [DONE]`` event


class UpstreamError(Exception):
    """The upstream's answer cannot be used: ``status`` (502, or 504 past the deadline) and a one-line ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Malformed(ValueError):
    """An answer that is HTTP and JSON but not the OpenAI API's shape (the message names the field)."""


class Upstream:
    """Where calls go: an OpenAI-compatible base URL (``http://host:port/v1``); ``timeout``: seconds a whole call may take."""

    def __init__(self, url: str, timeout: float = 600.0) -> None:
        parsed = urllib.parse.urlsplit(url.rstrip("/"))
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"--upstream: {url!r} is not an http(s) URL such as http://127.0.0.1:8000/v1")
        if not timeout > 0:
            raise ValueError(f"timeout: got {timeout}; give the seconds a whole call may take, above 0")
        self.url, self.scheme, self.host, self.port = url.rstrip("/"), parsed.scheme, parsed.hostname, parsed.port
        self.base = parsed.path.removesuffix("/v1")
        self.timeout = timeout

    def open(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], deadline: Deadline | None = None
    ) -> http.client.HTTPResponse:
        """Send the request, read the status line and headers, all before ``deadline`` (default: ``timeout`` from now)."""
        deadline = deadline or Deadline(self.timeout)
        kind = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        connection = kind(self.host, self.port, timeout=max(deadline.remaining(), 0.001))
        connection.connect()
        assert connection.sock is not None
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay on small calls
        deadline.arm(connection.sock)
        connection.request(method, self.base + path, body=body, headers=headers)
        return connection.getresponse()

    def failure(self, error: BaseException, deadline: Deadline) -> UpstreamError:
        """What went wrong with a call, as the proxy says it: 504 past the deadline, else 502, in one line."""
        if deadline.passed() or isinstance(error, TimeoutError):
            return UpstreamError(504, f"the upstream {self.url} did not finish within {deadline.seconds:g} s (the proxy's deadline for a whole call)")  # fmt: skip
        if isinstance(error, UpstreamError):
            return error
        if isinstance(error, ValueError):  # Malformed, and JSON that does not parse
            return UpstreamError(502, f"the upstream's answer is malformed: {error}; check that {self.url} speaks the OpenAI API")
        if isinstance(error, http.client.HTTPException):
            return UpstreamError(502, f"the upstream {self.url} sent a broken HTTP answer ({type(error).__name__}); check the upstream")
        if isinstance(error, OSError):
            return UpstreamError(502, f"cannot reach the upstream {self.url} ({type(error).__name__}); check that it is running")
        return UpstreamError(502, f"the upstream's answer could not be read ({type(error).__name__}: {first_line(error, 120)})")


# -- answers -------------------------------------------------------------------------------------------------------------
def read_answer(response: http.client.HTTPResponse, limit: int = MAX_ANSWER) -> bytes:
    """The whole body, at most ``limit`` bytes (502 beyond)."""
    payload = response.read(limit + 1)
    if len(payload) > limit:
        raise UpstreamError(502, f"the upstream's answer is over {limit} bytes; ask for a shorter reply")
    return payload


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _object(value: Any, where: str, optional: bool = False) -> dict[str, Any]:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{where} is {_kind(value)}, not an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{where} is {_kind(value)}, not a list")
    return value


def _text(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise Malformed(f"{where} is {_kind(value)}, not a string")
    return value


def _count(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Malformed(f"{where} is {_kind(value) if not isinstance(value, (int, float)) else repr(value)}, not a whole number")
    return value


def check_usage(value: Any, where: str = "usage") -> dict[str, Any] | None:
    if value is None:
        return None
    usage = _object(value, where)
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        _count(usage.get(key), f"{where}.{key}")
    return usage


def _content(value: Any, where: str) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        for i, part in enumerate(value):
            if not isinstance(part, (str, dict)):
                raise Malformed(f"{where}[{i}] is {_kind(part)}, not a content part")
        return value
    raise Malformed(f"{where} is {_kind(value)}, not a string")


def _tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    calls = _list(value, where)
    for i, call in enumerate(calls):
        call = _object(call, f"{where}[{i}]")
        _count(call.get("index"), f"{where}[{i}].index")
        _text(call.get("id"), f"{where}[{i}].id")
        function = _object(call.get("function"), f"{where}[{i}].function", optional=True)
        _text(function.get("name"), f"{where}[{i}].function.name")
        _text(function.get("arguments"), f"{where}[{i}].function.arguments")
    return calls


@dataclass
class Reply:
    """A checked answer, as recorded: the message, usage, finish reason, the answer's head (id, model) and extras (token ids)."""

    message: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    finish: str | None = None
    head: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)


def check_answer(answer: Any, operation: str) -> Reply:
    """A non-streamed completion (``operation`` "chat" or "text_completion"), checked field by field; :class:`Malformed` if not."""
    answer = _object(answer, "the answer")
    choices = _list(answer.get("choices"), "choices")
    choice = _object(choices[0], "choices[0]") if choices else {}
    if operation == "chat":
        message = _object(choice.get("message"), "choices[0].message", optional=True)
        _content(message.get("content"), "choices[0].message.content")
        _tool_calls(message.get("tool_calls"), "choices[0].message.tool_calls")
        reply_message: dict[str, Any] | None = message if choices else None
    else:
        reply_message = {"role": "assistant", "content": _text(choice.get("text"), "choices[0].text") or ""}
    finish = _text(choice.get("finish_reason"), "choices[0].finish_reason")
    extras = {key: value for key, value in (("prompt_token_ids", answer.get("prompt_token_ids")), ("token_ids", choice.get("token_ids")),
                                            ("logprobs", choice.get("logprobs"))) if value is not None}  # fmt: skip
    head = {"id": answer.get("id"), "model": answer.get("model")}
    return Reply(reply_message, check_usage(answer.get("usage")), finish, head, extras)


def error_message(answer: Any, prefix: str) -> str:
    """``prefix: `` and the one line an upstream's error body says (OpenAI's ``{"error": {"message": ...}}``, or whatever it is)."""
    said = answer.get("error", answer) if isinstance(answer, dict) else answer
    if isinstance(said, dict):
        said = said.get("message", said)
    return f"{prefix}: {first_line(said, 300)}"


# -- streams -------------------------------------------------------------------------------------------------------------
class EventStream:
    """A stream's events, each checked, put back together as they come (:meth:`reply`).

    :meth:`events` yields ``(raw, chunk)`` per event: the bytes to relay (a whole event,
    blank line included) and the decoded chunk (:data:`DONE` for ``[DONE]``, ``None`` for
    a comment).
    It ends after ``[DONE]``, and raises :class:`Malformed` for an event that is not
    JSON or not a chunk, a stream that ends without ``[DONE]`` or inside an event, and
    a line over :data:`MAX_ANSWER` bytes; and :class:`UpstreamError` for a chunk that
    carries an ``error``.
    """

    def __init__(self, response: http.client.HTTPResponse, operation: str) -> None:
        self.response, self.operation = response, operation
        self.done = False
        self.events_seen = 0
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.finish: str | None = None
        self.head: dict[str, Any] = {}

    def events(self) -> Iterator[tuple[bytes, Any]]:
        lines: list[bytes] = []
        data: list[bytes] = []
        while not self.done:
            line = self.response.readline(MAX_ANSWER + 1)
            if len(line) > MAX_ANSWER:
                raise Malformed(f"a stream line is over {MAX_ANSWER} bytes")
            ended = not line.endswith(b"\n")  # the connection closed: what is pending is the last event, if it is whole
            stripped = line.rstrip(b"\r\n")
            if stripped:
                lines.append(stripped + b"\n")
                if stripped.startswith(b"data:"):
                    data.append(stripped[5:].removeprefix(b" "))
                if not ended:
                    continue
            if lines:  # a blank line (or the end) closes the event
                raw, joined = b"".join(lines) + b"\n", b"\n".join(data)
                lines, data = [], []
                if not joined:
                    yield raw, None  # a comment (keep-alive) or an event without data: relayed as it is
                elif joined.strip() == b"[DONE]":
                    self.done = True
                    yield raw, DONE
                    return
                else:
                    try:
                        chunk = self._take(joined)
                    except Malformed:
                        if ended:
                            raise Malformed("the stream was cut inside an event") from None
                        raise
                    yield raw, chunk
            if ended:
                raise Malformed("the stream ended without data: [DONE]")

    def _take(self, joined: bytes) -> dict[str, Any]:
        where = f"stream event {self.events_seen + 1}"
        try:
            chunk = parse_json(joined, where, DEPTH)
        except ValueError as error:
            raise Malformed(str(error)) from None
        chunk = _object(chunk, where)
        if chunk.get("error") is not None:  # the upstream failed mid-stream and said so
            raise UpstreamError(502, error_message(chunk, "the upstream failed mid-stream"))
        self.events_seen += 1
        self.head = {"id": chunk.get("id", self.head.get("id")), "model": chunk.get("model", self.head.get("model"))}
        self.usage = check_usage(chunk.get("usage"), f"{where}: usage") or self.usage
        for i, choice in enumerate(_list(chunk.get("choices"), f"{where}: choices")):
            choice = _object(choice, f"{where}: choices[{i}]")
            if self.operation == "chat":
                delta = _object(choice.get("delta"), f"{where}: choices[{i}].delta", optional=True)
                content = _text(delta.get("content"), f"{where}: choices[{i}].delta.content")
                for piece in _tool_calls(delta.get("tool_calls"), f"{where}: choices[{i}].delta.tool_calls"):
                    call = self._calls.setdefault(
                        piece.get("index") or 0, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    call["id"] = piece.get("id") or call["id"]
                    function = piece.get("function") or {}
                    call["function"]["name"] += function.get("name") or ""
                    call["function"]["arguments"] += function.get("arguments") or ""
            else:
                content = _text(choice.get("text"), f"{where}: choices[{i}].text")
            if content:
                self._text.append(content)
            self.finish = _text(choice.get("finish_reason"), f"{where}: choices[{i}].finish_reason") or self.finish
        return chunk

    def reply(self) -> Reply:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text)}
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        return Reply(message, self.usage, self.finish, self.head)


def error_event(status: int, message: str) -> bytes:
    """An error as a server-sent event (what OpenAI's clients raise as an ``APIError`` mid-stream)."""
    body = {"error": {"message": message, "type": "upstream_error" if status != 504 else "timeout", "code": status}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"
