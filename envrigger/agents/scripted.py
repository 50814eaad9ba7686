"""A scripted endpoint: a real HTTP server on 127.0.0.1 speaking OpenAI's Chat Completions protocol.

For testing a harness, a detector or a pipeline offline, with no model: ``ChatServer(model)`` serves ``GET /v1/models`` and ``POST /v1/chat/completions``
(non-streaming and streaming, tools, ``usage``) with the protocol's error bodies; a model
is any ``(request) -> Reply`` callable. Replies can plant errors (``Reply(status=429,
retry_after=0.1)``), or hang (``Reply(hang=True)``). Every request is kept
(``server.requests``, headers included) so tests can check what the client sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str | None = ""
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments JSON)
    status: int = 200
    retry_after: float | None = None
    hang: bool = False
    usage: bool = True
    finish_reason: str = "stop"
    cut: bool = False  # streamed: the connection drops halfway through the chunks


class _Listening(ThreadingHTTPServer):
    """A threading server whose listen queue holds dozens of connections at once (the default, 5, refuses some)."""

    request_queue_size = 128


Model = Callable[[dict[str, Any]], Reply]
ERRORS = {400: "invalid_request_error", 401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded", 500: "server_error"}


class ChatServer:
    """A Chat Completions endpoint on a free port of 127.0.0.1, in a thread (use as a context manager).

    ``delay_s`` makes every completion wait that long first, like a model behind a network.

    Example:
        >>> import openai
        >>> with ChatServer(lambda request: Reply(content="go east")) as server:
        ...     client = openai.OpenAI(base_url=server.url, api_key="any")
        ...     client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}]).choices[0].message.content
        'go east'
    """

    def __init__(self, model: Model, models: tuple[str, ...] = ("scripted",), key: str | None = None, delay_s: float = 0.0) -> None:
        self.model, self.models, self.key, self.delay_s = model, models, key, delay_s
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
                self._send(
                    status, {"error": {"message": message, "type": ERRORS.get(status, "error"), "code": ERRORS.get(status)}}, headers
                )

            def _authorized(self) -> bool:
                if server.key is None or self.headers.get("Authorization") == f"Bearer {server.key}":
                    return True
                self._error(401, "Incorrect API key provided.")
                return False

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                if self.path.rstrip("/") == "/v1/models":
                    data = [{"id": m, "object": "model", "created": 0, "owned_by": "tests"} for m in server.models]
                    self._send(200, {"object": "list", "data": data})
                else:
                    self._error(404, f"no route {self.path}")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if not self._authorized():
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._error(404, f"no route {self.path}")
                    return
                if body.get("model") not in server.models:
                    self._error(404, f"The model `{body.get('model')}` does not exist.")
                    return
                if server.delay_s:
                    time.sleep(server.delay_s)
                reply = server.model(body)
                if reply.hang:
                    server._stop.wait(60)
                    return
                if reply.status != 200:
                    headers = {"Retry-After": str(reply.retry_after)} if reply.retry_after is not None else None
                    self._error(reply.status, f"scripted error {reply.status}", headers)
                    return
                number = len(server.requests)
                message: dict[str, Any] = {"role": "assistant", "content": reply.content}
                if reply.tool_calls:
                    message["tool_calls"] = [
                        {"id": f"call_{number}_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                        for i, (n, a) in enumerate(reply.tool_calls)
                    ]
                prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 4 + 1
                completion = len(reply.content or "") // 4 + 1
                finish = "tool_calls" if reply.tool_calls else reply.finish_reason
                if body.get("stream"):
                    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
                    wants_usage = reply.usage and bool((body.get("stream_options") or {}).get("include_usage"))
                    self._stream(number, body["model"], message, finish, usage if wants_usage else None, reply.cut)
                    return
                answer: dict[str, Any] = {
                    "id": f"chatcmpl-{number}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                }
                if reply.usage:
                    answer["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
                if body.get("return_token_ids"):  # as vLLM does: the ids of the prompt and of the completion
                    answer["prompt_token_ids"] = list(range(prompt))
                    answer["choices"][0]["token_ids"] = list(range(1000, 1000 + completion))
                if body.get("logprobs"):
                    words = (reply.content or "").split() or [""]
                    answer["choices"][0]["logprobs"] = {"content": [{"token": w, "logprob": -0.25} for w in words]}
                self._send(200, answer)

            def _stream(
                self, number: int, model: str, message: dict[str, Any], finish: str, usage: dict[str, int] | None, cut: bool = False
            ) -> None:
                """The reply as server-sent chunks: the text a few characters at a time, each tool call's arguments in pieces."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                text = message.get("content") or ""
                deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
                deltas += [{"content": text[i : i + 7]} for i in range(0, len(text), 7)]
                for index, call in enumerate(message.get("tool_calls") or []):
                    arguments = call["function"]["arguments"]
                    head: dict[str, Any] = {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""},
                    }
                    deltas.append({"tool_calls": [head]})
                    deltas += [
                        {"tool_calls": [{"index": index, "function": {"arguments": arguments[i : i + 5]}}]}
                        for i in range(0, len(arguments), 5)
                    ]
                events: list[dict[str, Any]] = [{"index": 0, "delta": delta, "finish_reason": None} for delta in deltas]
                events.append({"index": 0, "delta": {}, "finish_reason": finish})
                chunk: dict[str, Any] = {"id": f"chatcmpl-{number}", "object": "chat.completion.chunk", "created": 0, "model": model}
                for choice in events[: len(events) // 2] if cut else events:
                    self.wfile.write(f"data: {json.dumps({**chunk, 'choices': [choice]})}\n\n".encode())
                if cut:
                    self.close_connection = True
                    return
                if usage is not None:  # what stream_options.include_usage asks for: a last chunk with no choices
                    self.wfile.write(f"data: {json.dumps({**chunk, 'choices': [], 'usage': usage})}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        self.httpd = _Listening(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]


def last_user(request: dict[str, Any]) -> str:
    """The text of the last user or tool message of a request."""
    for message in reversed(request.get("messages", [])):
        if message.get("role") in ("user", "tool"):
            return str(message.get("content") or "")
    return ""


def listed_commands(request: dict[str, Any]) -> list[str]:
    """The commands a TextWorld turn lists (the default harness's "- command" lines)."""
    return [line[2:] for line in last_user(request).splitlines() if line.startswith("- ")]


# -- a code-repair agent with known strengths, for ledgers ---------------------------------------------------------
RETRY_PREFIX = "That reply could not be used"  # the default harness's retry message begins so


def repair_model(request: dict[str, Any]) -> Reply:
    """A scripted code-repair agent whose releases differ in known ways (the model name picks which one answers).

    ``strong`` knows the fix of every task; ``weak`` only of every other task (by its place
    in the task list) and submits at once on the rest. Both answer every turn first with
    prose, so a harness with no retries wastes every turn and one with a retry does not.
    Where the env offers ``ask_human`` (a reviewer), a model that does not know a fix asks
    first and then applies it. Text output mode; deterministic per conversation.
    """
    messages = request["messages"]
    if not str(messages[-1].get("content", "")).startswith(RETRY_PREFIX):
        return Reply(content="Let me think about what the bug could be before I act.")
    done = 0
    for message in messages:
        if message["role"] == "assistant":
            try:
                json.loads(message["content"])
                done += 1
            except (ValueError, TypeError):
                pass
    steps = _repair_plan(request["model"], str(messages[1]["content"]), [str(m.get("content") or "") for m in messages])
    return Reply(content=json.dumps(steps[min(done, len(steps) - 1)]))


def _shown_module(texts: list[str]) -> str | None:
    """The module as the last ``view`` in the conversation showed it (numbered lines), or None."""
    import re

    for text in reversed(texts):
        lines = re.findall(r"^ *\d+\| ?(.*)$", text, flags=re.MULTILINE)
        if lines:
            return "\n".join(lines) + "\n"
    return None


def _repair_plan(model: str, first: str, texts: list[str] | None = None) -> list[dict[str, Any]]:
    import re

    from envharness.envs.code_tasks import TASKS

    path = re.search(r'"path": "([^"]+)"', first)
    tasks: tuple[Any, ...] = TASKS
    if path is not None and path.group(1) == "solution.py":  # HumanEvalFix: which level shows once the module is viewed
        from envharness.envs.humaneval import task_set

        shown = _shown_module(texts or [])
        if shown is None:
            return [{"tool": "view", "path": "solution.py"}]
        from envharness.envs.code_repair import CHARSET

        def seen(text: str) -> str:  # as the env shows it: characters outside its charset become "?"
            return "".join(c if c in CHARSET else "?" for c in text).strip()

        tasks = tuple(t for t in task_set().tasks if seen(t.source) == shown.strip())
        if not tasks:
            return [{"tool": "view", "path": "solution.py"}, {"tool": "submit"}]
        index = task_set().tasks.index(tasks[0])
        task = tasks[0]
        fix = [{"tool": "replace", "path": task.path, "start": a, "end": b, "text": text} for a, b, text in sorted(task.fix, reverse=True)]
        if model == "strong" or index % 2 == 0:
            return [{"tool": "view", "path": task.path}, *fix, {"tool": "submit"}]
        return [{"tool": "view", "path": task.path}, {"tool": "submit"}]
    index, task = next((i, t) for i, t in enumerate(tasks) if path is not None and t.path == path.group(1))
    fix = [{"tool": "replace", "path": task.path, "start": a, "end": b, "text": text} for a, b, text in sorted(task.fix, reverse=True)]
    if model == "strong" or index % 2 == 0:
        return [{"tool": "view", "path": task.path}, *fix, {"tool": "submit"}]
    if "ask_human" in first:
        return [{"tool": "ask_human", "question": "Which lines are wrong, and what should they say?"}, *fix, {"tool": "submit"}]
    return [{"tool": "submit"}]
