"""An OpenAI-compatible recording proxy: :func:`create_proxy_app` and :func:`run_proxy`.

It forwards ``POST /v1/chat/completions``, ``POST /v1/completions`` and ``GET /v1/models``
to the upstream unchanged (streamed or not) and records every call in the run's
:class:`~envrigger.live.calls.CallLog` before it answers: the request's messages, the
response (a stream's chunks put back together), usage, latency, status and errors, under
the OpenTelemetry GenAI keys the chat agent records (``gen_ai.usage.input_tokens``...).
A call belongs to an episode through its path, ``/sessions/{session_id}/v1/...`` (as Agent
Lightning routes rollout ids), or the header ``X-Envharness-Session``; the session id is
the one ``envharness serve`` hands out, which is how the served episode's steps get their
calls. The caller's ``Authorization`` goes upstream and is never stored. With
``token_ids``, each request also asks the upstream for token ids and log-probabilities
(vLLM's ``return_token_ids`` and ``logprobs``), recorded with the call.

(No ``from __future__ import annotations``: FastAPI reads the routes' annotations.)
"""

import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from envrigger.agents.chat import compress
from envrigger.live.calls import CallLog

SESSION_HEADER = "x-envharness-session"
FORWARDED = ("authorization", "content-type", "accept", "openai-organization", "openai-project")


class Upstream:
    """Where calls go: an OpenAI-compatible base URL (``http://host:port/v1``)."""

    def __init__(self, url: str, timeout: float = 600.0) -> None:
        parsed = urllib.parse.urlsplit(url.rstrip("/"))
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"--upstream: {url!r} is not an http(s) URL such as http://127.0.0.1:8000/v1")
        self.url, self.scheme, self.host, self.port = url.rstrip("/"), parsed.scheme, parsed.hostname, parsed.port
        self.base = parsed.path.removesuffix("/v1")
        self.timeout = timeout

    def open(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> http.client.HTTPResponse:
        kind = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        connection = kind(self.host, self.port, timeout=self.timeout)
        connection.connect()
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay on small calls
        connection.request(method, self.base + path, body=body, headers=headers)
        return connection.getresponse()


def _reassemble(chunks: list[dict[str, Any]]) -> tuple[dict[str, Any], Any, str | None, dict[str, Any]]:
    """(the message, usage, finish reason, the last chunk's id and model) from a chat stream's chunks."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage, finish = None, None
    head: dict[str, Any] = {}
    for chunk in chunks:
        head = {"id": chunk.get("id", head.get("id")), "model": chunk.get("model", head.get("model"))}
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text.append(delta["content"])
            for piece in delta.get("tool_calls") or []:
                call = calls.setdefault(
                    int(piece.get("index") or 0), {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] = piece.get("id") or call["id"]
                function = piece.get("function") or {}
                call["function"]["name"] += function.get("name") or ""
                call["function"]["arguments"] += function.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message, usage, finish, head


def _record(request: dict[str, Any], session: str | None, status: int, answer: dict[str, Any] | None, message: dict[str, Any] | None,
            usage: Any, finish: str | None, latency: float, streamed: bool, error: str | None, operation: str) -> dict[str, Any]:  # fmt: skip
    sent = request.get("messages") if operation == "chat" else [{"role": "user", "content": str(request.get("prompt", ""))}]
    estimated = not isinstance(usage, dict) or usage.get("prompt_tokens") is None
    text_in = sum(len(str(m.get("content") or "")) for m in sent or [])
    record: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.conversation.id": session,
        "gen_ai.request.model": str(request.get("model", "")),
        "gen_ai.response.model": str((answer or {}).get("model", "") or ""),
        "gen_ai.response.id": str((answer or {}).get("id", "") or ""),
        "gen_ai.usage.input_tokens": text_in // 4 + 1 if estimated else int(usage["prompt_tokens"]),
        "gen_ai.usage.output_tokens": (len(str((message or {}).get("content") or "")) // 4 + 1 if message else 0)
        if estimated
        else int(usage.get("completion_tokens") or 0),
        "gen_ai.response.finish_reasons": [str(finish or "")],
        "envrigger.usage.estimated": estimated,
        "envrigger.latency_s": round(latency, 6),
        "envrigger.cost_usd": 0.0,
        "envrigger.context.truncated": False,
        "envrigger.endpoint.attempts": 1,
        "envrigger.tool_call.invalid": False,
        "envrigger.http.status": status,
        "envrigger.streamed": streamed,
        "envrigger.time": time.time(),
        "gen_ai.input.messages": compress(list(sent or [])),
        "gen_ai.output.messages": compress([message] if message else []),
    }
    if error:
        record["envrigger.error"] = error
    if answer is not None:  # token ids and log-probabilities, where the upstream sent them (vLLM)
        choice = (answer.get("choices") or [{}])[0]
        for key, value in (("prompt_token_ids", answer.get("prompt_token_ids")), ("token_ids", choice.get("token_ids")),
                           ("logprobs", choice.get("logprobs"))):  # fmt: skip
            if value is not None:
                record[f"envrigger.{key}"] = value
    return record


def create_proxy_app(upstream: Upstream, run: str | Path, token_ids: bool = False) -> Any:
    """The proxy as a FastAPI app recording into ``run``'s call log."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from starlette.concurrency import run_in_threadpool

    log = CallLog(run)
    app = FastAPI(title="envrigger proxy", description=f"records every model call to {upstream.url}")

    def headers_of(request: Request) -> dict[str, str]:
        return {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "upstream": upstream.url}

    def models(request: Request) -> Any:
        try:
            response = upstream.open("GET", "/v1/models", None, headers_of(request))
            body = response.read()
        except OSError as error:
            return JSONResponse({"error": {"message": f"cannot reach the upstream {upstream.url} ({type(error).__name__})"}}, 502)
        return Response(body, status_code=response.status, media_type=response.getheader("content-type", "application/json"))

    async def completion(request: Request, operation: str, session: str | None) -> Any:
        session = session or request.headers.get(SESSION_HEADER)
        raw = await request.body()
        try:
            body = json.loads(raw)
            assert isinstance(body, dict)
        except (ValueError, AssertionError):
            return JSONResponse({"error": {"message": "the body is not a JSON object", "type": "invalid_request_error"}}, 400)
        sent = dict(body)
        if token_ids:
            sent.setdefault("return_token_ids", True)
            sent.setdefault("logprobs", True)
        path = "/v1/chat/completions" if operation == "chat" else "/v1/completions"
        headers = headers_of(request)
        started = time.perf_counter()

        def forward() -> tuple[Any, bytes | None]:
            """The upstream's answer and, unless it streams, its body, recorded (one thread hop for the whole call)."""
            response = upstream.open("POST", path, json.dumps(sent).encode(), headers)
            if "text/event-stream" in (response.getheader("content-type") or ""):
                return response, None
            payload = response.read()
            latency = time.perf_counter() - started
            try:
                answer = json.loads(payload)
            except ValueError:
                answer = None
            ok = response.status < 400 and isinstance(answer, dict)
            choice = (answer.get("choices") or [{}])[0] if ok else {}
            message = choice.get("message") if operation == "chat" else {"role": "assistant", "content": choice.get("text", "")}
            failure = None if ok else f"upstream {response.status}: {str((answer or {}).get('error', payload[:200]))[:300]}"
            log.append(_record(body, session, response.status, answer if ok else None, message if ok else None,
                               (answer or {}).get("usage") if ok else None, choice.get("finish_reason"), latency, False, failure, operation))  # fmt: skip
            return response, payload

        try:
            response, payload = await run_in_threadpool(forward)
        except OSError as unreachable:
            reason = f"cannot reach the upstream {upstream.url} ({type(unreachable).__name__})"
            log.append(_record(body, session, 502, None, None, None, None, time.perf_counter() - started, False, reason, operation))
            return JSONResponse({"error": {"message": reason, "type": "upstream_error"}}, 502)
        if payload is not None:
            return Response(payload, status_code=response.status, media_type=response.getheader("content-type", "application/json"))

        def relay() -> Iterator[bytes]:
            chunks: list[dict[str, Any]] = []
            recorded = False

            def record() -> None:
                message, usage, finish, head = _reassemble(chunks)
                broke = None if finish is not None else "the stream ended before its finish reason"
                log.append(_record(body, session, response.status, head, message, usage, finish, time.perf_counter() - started, True, broke,
                                   operation))  # fmt: skip

            try:
                while True:
                    line = response.readline()
                    if not line:
                        break
                    text = line.decode("utf-8", "replace").strip()
                    if text.startswith("data:"):
                        data = text[5:].strip()
                        if data == "[DONE]":  # on disk before the caller learns the call is over
                            record()
                            recorded = True
                        elif data:
                            try:
                                chunks.append(json.loads(data))
                            except ValueError:
                                pass
                    yield line
            finally:
                if not recorded:
                    record()

        return StreamingResponse(relay(), status_code=response.status, media_type="text/event-stream")

    for prefix in ("", "/sessions/{session_id}"):
        app.add_api_route(prefix + "/v1/models", models, methods=["GET"])

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await completion(request, "chat", None)

    @app.post("/v1/completions")
    async def text(request: Request) -> Any:
        return await completion(request, "text_completion", None)

    @app.post("/sessions/{session_id}/v1/chat/completions")
    async def session_chat(session_id: str, request: Request) -> Any:
        return await completion(request, "chat", session_id)

    @app.post("/sessions/{session_id}/v1/completions")
    async def session_text(session_id: str, request: Request) -> Any:
        return await completion(request, "text_completion", session_id)

    return app


def run_proxy(upstream: str, run: str | Path, host: str = "127.0.0.1", port: int = 8100, token_ids: bool = False) -> None:
    import uvicorn

    app = create_proxy_app(Upstream(upstream), run, token_ids)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
