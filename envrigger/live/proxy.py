"""An OpenAI-compatible recording proxy: :func:`create_proxy_app` and :func:`run_proxy`.

It forwards ``POST /v1/chat/completions``, ``POST /v1/completions`` and ``GET /v1/models``
to the upstream unchanged (streamed or not) and records every call in the run's
:class:`~envrigger.live.calls.CallLog` before it answers: the request's messages, the
response (a stream's chunks put back together), usage, latency, status and errors, under
the OpenTelemetry GenAI keys the chat agent records (``gen_ai.usage.input_tokens``...).
A call belongs to an episode through its path, ``/sessions/{session_id}/v1/...`` (as Agent
Lightning routes rollout ids) or Agent Lightning 1.0's ``/proxy/rollout/{rollout_id}/attempt/{attempt_id}/v1/...``
(the rollout's id is the session), or the header ``X-Envharness-Session``; the session id is
the one ``envharness serve`` hands out, which is how the served episode's steps get their
calls. The caller's ``Authorization`` goes upstream and is never stored. With
``token_ids``, each request also asks the upstream for token ids and log-probabilities
(vLLM's ``return_token_ids`` and ``logprobs``), recorded with the call.

What it promises, whatever the caller or the upstream sends:

- a request that is not a JSON object (nested at most 100 levels, ``messages`` a list of
  objects), is over ``max_body`` bytes or does not arrive within ``body_timeout`` seconds
  is refused (400, 413, 408) before anything is forwarded, and not recorded;
- every forwarded call is recorded exactly once (:class:`Call`): an answer that is not
  HTTP, not JSON, or not the OpenAI API's shape is a 502, a call past the ``timeout`` of
  its :class:`~envrigger.live.upstream.Upstream` (the whole call, however the upstream
  paces its bytes) a 504, each with a one-line message. A stream that breaks after its
  first event ends with an ``error`` event (OpenAI's clients raise it as an ``APIError``),
  never a cut connection; ``data: [DONE]`` ends it, and nothing after it is read;
- the caller's credentials (``Authorization``, ``api-key``, ``x-api-key``) and the proxy's
  own token are replaced by ``[redacted]`` in everything recorded and everything returned,
  wherever they appear (an upstream's error body quoting the header, a completion, the
  caller's own messages), once decoded from JSON;
- with a ``token``, every route but ``/healthz`` needs the header ``X-Envrigger-Token``
  (401 otherwise); the framework's own routes (OpenAPI, docs) are off.

(No ``from __future__ import annotations``: FastAPI reads the routes' annotations.)
"""

import itertools
import json
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

from envharness.httpguard import DEPTH, Gate, HTTPError, Redactor, first_line, parse_json, read_body
from envrigger.agents.chat import compress
from envrigger.live.calls import CallLog
from envrigger.live.upstream import (
    DONE,
    Deadline,
    EventStream,
    Reply,
    Upstream,
    UpstreamError,
    check_answer,
    error_event,
    error_message,
    read_answer,
)

__all__ = ["MAX_BODY", "SESSION_HEADER", "TOKEN_HEADER", "Call", "Upstream", "create_proxy_app", "run_proxy"]

SESSION_HEADER = "x-envharness-session"
TOKEN_HEADER = "X-Envrigger-Token"
FORWARDED = ("authorization", "content-type", "accept", "openai-organization", "openai-project")
CREDENTIALS = ("authorization", "api-key", "x-api-key", TOKEN_HEADER.lower())  # never stored, never returned
MAX_BODY = 32 << 20  # bytes of a request: room for long contexts and images sent inline


AGL_ROUTE = "/proxy/rollout/{rollout_id}/attempt/{attempt_id}"  # Agent Lightning 1.0's path form of a rollout's model calls


def credentials_of(headers: Any) -> list[str]:
    """The secrets a request carries: each credential header's value, and its credential without the scheme (``Bearer``)."""
    out = []
    for name in CREDENTIALS:
        value = (headers.get(name) or "").strip()
        if value:
            out.append(value)
            credential = value.partition(" ")[2].strip()
            if credential:
                out.append(credential)
    return out


def _record(request: dict[str, Any], session: str | None, status: int, reply: Reply | None, latency: float, streamed: bool,
            error: str | None, operation: str, scrub: Redactor) -> dict[str, Any]:  # fmt: skip
    sent = request.get("messages") if operation == "chat" else [{"role": "user", "content": str(request.get("prompt", ""))}]
    message, usage, finish = (reply.message, reply.usage, reply.finish) if reply is not None else (None, None, None)
    head = reply.head if reply is not None else {}
    estimated = not isinstance(usage, dict) or usage.get("prompt_tokens") is None
    text_in = sum(len(str(m.get("content") or "")) for m in sent or [] if isinstance(m, dict))
    record: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.conversation.id": session,
        "gen_ai.request.model": str(request.get("model", "")),
        "gen_ai.response.model": str(head.get("model") or ""),
        "gen_ai.response.id": str(head.get("id") or ""),
        "gen_ai.usage.input_tokens": text_in // 4 + 1 if estimated else int(usage["prompt_tokens"]),  # type: ignore[index]
        "gen_ai.usage.output_tokens": (len(str((message or {}).get("content") or "")) // 4 + 1 if message else 0)
        if estimated
        else int(usage.get("completion_tokens") or 0),  # type: ignore[union-attr]
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
        "gen_ai.input.messages": list(sent or []),
        "gen_ai.output.messages": [message] if message else [],
    }
    if error:
        record["envrigger.error"] = first_line(error, 500)
    for key, value in (reply.extras if reply is not None else {}).items():  # token ids and log-probabilities (vLLM)
        record[f"envrigger.{key}"] = value
    record = scrub(record)  # every string, before the messages are compressed out of sight
    record["gen_ai.input.messages"] = compress(record["gen_ai.input.messages"])
    record["gen_ai.output.messages"] = compress(record["gen_ai.output.messages"])
    return record


class Call:
    """One forwarded model call, recorded exactly once: the first :meth:`finish` writes it, later ones do nothing."""

    def __init__(self, log: CallLog, request: dict[str, Any], session: str | None, operation: str, scrub: Redactor) -> None:
        self.log, self.request, self.session, self.operation, self.scrub = log, request, session, operation, scrub
        self.started = time.perf_counter()
        self.streamed = False
        self._lock = threading.Lock()
        self._written = False

    def finish(self, status: int, reply: Reply | None = None, error: str | None = None) -> None:
        with self._lock:
            if self._written:
                return
            self._written = True
        latency = time.perf_counter() - self.started
        try:
            record = _record(self.request, self.session, status, reply, latency, self.streamed, error, self.operation, self.scrub)
        except Exception as failure:  # noqa: BLE001 - never lose the call: keep what is certain about it
            reason = f"{error}; " if error else ""
            record = _record(self.request, self.session, status, None, latency, self.streamed,
                             f"{reason}the answer could not be recorded ({type(failure).__name__})", self.operation, self.scrub)  # fmt: skip
        self.log.append(record)


def create_proxy_app(upstream: Upstream, run: str | Path, token_ids: bool = False, token: str | None = None, max_body: int = MAX_BODY,
                     body_timeout: float = 60.0) -> Any:  # fmt: skip
    """The proxy as a FastAPI app recording into ``run``'s call log (see the module's docstring for what it promises)."""
    import anyio
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    log = CallLog(run)
    live: weakref.WeakSet[Deadline] = weakref.WeakSet()  # the upstream calls in flight, to cut when the proxy stops
    stopping = threading.Event()
    app = FastAPI(title="envrigger proxy", description=f"records every model call to {upstream.url}", openapi_url=None, docs_url=None,
                  redoc_url=None)  # fmt: skip
    own = Redactor([token])

    def openai_error(status: int, message: str, kind: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "code": status}}

    def render(status: int, message: str) -> bytes:
        return json.dumps(openai_error(status, message, "authentication_error")).encode()

    app.add_middleware(Gate, token=token, render=render, header=TOKEN_HEADER, prefix="", challenge=False)

    def refuse(status: int, message: str, scrub: Redactor = own, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse(openai_error(status, scrub.text(own.text(first_line(message, 500))), kind), status)

    @app.exception_handler(HTTPError)
    async def refused(request: Request, exc: HTTPError) -> JSONResponse:
        return refuse(exc.status, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def routed(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return refuse(404, f"no route {request.method} {request.url.path[:80]}; the proxy serves /v1/chat/completions, "
                               "/v1/completions and /v1/models (also under /sessions/SESSION_ID and /proxy/rollout/ID/attempt/ID)")  # fmt: skip
        if exc.status_code == 405:
            return refuse(405, f"{request.method} is not allowed on {request.url.path[:80]}")
        return refuse(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        return refuse(500, f"the proxy failed: {type(exc).__name__}", kind="server_error")

    def deadline_of_call() -> Deadline:
        made = Deadline(upstream.timeout)
        live.add(made)
        return made

    def cut_in_flight() -> None:
        """The proxy is stopping and its grace is nearly over: cut every upstream call still open (each is answered and recorded)."""
        stopping.set()
        for pending in list(live):
            pending.expire()

    app.state.cut_in_flight = cut_in_flight  # called by run_until_stopped (envharness.serve) on a stop

    def failed(error: BaseException, deadline: Deadline) -> UpstreamError:
        if stopping.is_set() and deadline.expired:
            return UpstreamError(503, "the proxy was stopped before the upstream answered; send the call again to a running proxy")
        return upstream.failure(error, deadline)

    def headers_of(request: Request) -> dict[str, str]:
        return {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}

    def redactor(request: Request) -> Redactor:
        return Redactor([*credentials_of(request.headers), token])

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "upstream": upstream.url}

    def models(request: Request) -> Any:
        scrub = redactor(request)
        deadline = Deadline(upstream.timeout)  # not a call to record: nothing to cut on a stop
        try:
            response = upstream.open("GET", "/v1/models", None, headers_of(request), deadline)
            payload = read_answer(response)
            answer = parse_json(payload, "the models list")
            if not isinstance(answer, dict):
                raise UpstreamError(502, "the upstream's models list is not a JSON object; check the upstream")
            if not 200 <= response.status < 300 and response.status < 400:
                raise UpstreamError(502, f"the upstream answered {response.status} for its models; point --upstream at the API itself")
        except Exception as error:  # noqa: BLE001 - every failure is one line to the caller
            failure = upstream.failure(error, deadline)
            return refuse(failure.status, failure.message, scrub, "upstream_error")
        finally:
            deadline.disarm()
        return JSONResponse(scrub(answer), response.status)

    for prefix in ("", "/sessions/{session_id}", AGL_ROUTE):
        app.add_api_route(prefix + "/v1/models", models, methods=["GET"])

    async def completion(request: Request, operation: str, session: str | None) -> Any:
        session = session or request.headers.get(SESSION_HEADER)
        raw = await read_body(request, max_body, body_timeout)
        try:
            body = parse_json(raw, "the body", DEPTH)
        except ValueError as problem:
            raise HTTPError(400, f"{problem}; send a JSON object") from None
        if not isinstance(body, dict):
            raise HTTPError(400, 'the body must be a JSON object, such as {"model": ..., "messages": [...]}')
        messages = body.get("messages")
        if operation == "chat" and messages is not None and not (isinstance(messages, list) and all(isinstance(m, dict) for m in messages)):
            raise HTTPError(400, 'messages: give a list of message objects, such as [{"role": "user", "content": "hi"}]')
        sent = dict(body)
        if token_ids:
            sent.setdefault("return_token_ids", True)
            sent.setdefault("logprobs", True)
        path = "/v1/chat/completions" if operation == "chat" else "/v1/completions"
        headers = headers_of(request)
        scrub = redactor(request)
        call = Call(log, body, session, operation, scrub)
        outcome = await run_in_threadpool(forward, call, path, json.dumps(sent).encode(), headers, scrub)
        if not isinstance(outcome, tuple):
            return outcome
        status, stream, events, deadline, response = outcome

        def hung_up() -> None:  # for a caller gone before the first byte was sent: the generator never ran its own ending
            deadline.disarm()
            response.close()
            call.finish(status, stream.reply(), "the caller closed the connection before the stream ended")

        return Relayed(relay(call, stream, events, deadline, response, status, scrub), hung_up, status_code=status,
                       media_type="text/event-stream")  # fmt: skip

    class Relayed(StreamingResponse):
        """A relayed stream whose generator is closed when the response ends, however it ends: a caller that hangs up
        mid-stream still gets its call recorded, then and once (not whenever the generator is garbage-collected)."""

        def __init__(self, relay: Generator[bytes, None, None], hung_up: Callable[[], None], **options: Any) -> None:
            super().__init__(relay, **options)
            self.relay, self.hung_up = relay, hung_up

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            try:
                await super().__call__(scope, receive, send)
            finally:
                with anyio.CancelScope(shield=True):
                    await run_in_threadpool(self.close_relay)

        def close_relay(self) -> None:
            try:
                self.relay.close()
            except ValueError:  # still running in a worker thread: it ends, and records, by itself
                return
            self.hung_up()  # does nothing more when the generator ran: its call is recorded, its connection closed

    def forward(call: Call, path: str, data: bytes, headers: dict[str, str], scrub: Redactor) -> Any:
        """The upstream's answer, checked and recorded (one thread hop for the whole call); for a stream, its first event read."""
        deadline = deadline_of_call()
        response = None
        streaming = False
        try:
            response = upstream.open("POST", path, data, headers, deadline)
            if 200 <= response.status < 300 and "text/event-stream" in (response.getheader("content-type") or ""):
                call.streamed = True
                stream = EventStream(response, call.operation)
                events = stream.events()
                first: list[tuple[bytes, Any]] = []
                for raw, chunk in events:  # the status is decided by the first event: until then, a failure is still a 502
                    first.append((raw, chunk))
                    if chunk is not None:
                        break
                streaming = True
                return response.status, stream, itertools.chain(first, events), deadline, response
            payload = read_answer(response)
            return answered(call, response.status, payload, response.getheader("content-type") or "application/json", scrub)
        except Exception as error:  # noqa: BLE001 - whatever failed, the call is recorded once and answered in one line
            failure = failed(error, deadline)
            call.finish(failure.status, error=failure.message)
            kind = {502: "upstream_error", 503: "server_error"}.get(failure.status, "timeout")
            return refuse(failure.status, failure.message, scrub, kind)
        finally:
            if not streaming:
                deadline.disarm()
                if response is not None:
                    response.close()

    def answered(call: Call, status: int, payload: bytes, content_type: str, scrub: Redactor) -> Any:
        if status >= 400:  # the upstream's own refusal: relayed (redacted) when it is JSON, a 502 when it is not
            try:
                answer = parse_json(payload, "the upstream's error")
            except ValueError:
                answer = None
            if not isinstance(answer, dict):
                said = first_line(payload.decode("utf-8", "replace"), 120) or "nothing"
                raise UpstreamError(502, f"the upstream answered {status} with a body that is not a JSON object: {said}")
            call.finish(status, error=error_message(answer, f"upstream {status}"))
            return JSONResponse(scrub(answer), status)
        if not 200 <= status < 300:
            raise UpstreamError(502, f"the upstream answered {status}, not a completion; point --upstream at the API itself")
        answer = parse_json(payload, "the upstream's answer")
        reply = check_answer(answer, call.operation)
        call.finish(status, reply)
        cleaned = scrub(answer)
        if cleaned is answer:  # the bytes as the upstream sent them
            return Response(payload, status_code=status, media_type=content_type)
        return JSONResponse(cleaned, status)

    def relay(call: Call, stream: EventStream, events: Iterator[tuple[bytes, Any]], deadline: Deadline, response: Any, status: int,
              scrub: Redactor) -> Generator[bytes, None, None]:  # fmt: skip
        """The stream's events as they come; recorded once, before ``[DONE]`` reaches the caller or in place of it."""
        try:
            for raw, chunk in events:
                if chunk is DONE:  # on disk before the caller learns the call is over
                    broke = None if stream.finish is not None else "the stream ended before its finish reason"
                    call.finish(status, stream.reply(), broke)
                    yield raw
                    return
                if chunk is not None and scrub.holds(chunk):
                    raw = b"data: " + json.dumps(scrub(chunk)).encode() + b"\n\n"
                elif chunk is None and scrub:
                    raw = scrub.text(raw.decode("utf-8", "replace")).encode()
                yield raw
        except GeneratorExit:
            call.finish(status, stream.reply(), "the caller closed the connection before the stream ended")
            raise
        except Exception as error:  # noqa: BLE001 - a broken stream ends with an error event, recorded once
            failure = failed(error, deadline)
            message = scrub.text(own.text(failure.message))
            call.finish(failure.status, stream.reply(), message)
            yield error_event(failure.status, message)
        finally:
            deadline.disarm()
            response.close()
            call.finish(status, stream.reply(), "the stream ended without data: [DONE]")  # only if nothing above recorded it

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

    # Agent Lightning 1.0's gateway form: the rollout is the session (each attempt of it records under the rollout's id).
    @app.post(AGL_ROUTE + "/v1/chat/completions")
    async def rollout_chat(rollout_id: str, attempt_id: str, request: Request) -> Any:
        return await completion(request, "chat", rollout_id)

    @app.post(AGL_ROUTE + "/v1/completions")
    async def rollout_text(rollout_id: str, attempt_id: str, request: Request) -> Any:
        return await completion(request, "text_completion", rollout_id)

    return app


def run_proxy(upstream: str, run: str | Path, host: str = "127.0.0.1", port: int = 8100, token_ids: bool = False, token: str | None = None,
              timeout: float = 600.0, max_body: int = MAX_BODY, body_timeout: float = 60.0) -> None:  # fmt: skip
    """Serve :func:`create_proxy_app` with uvicorn until stopped; ``timeout``: seconds a whole upstream call may take (504 past it).

    On Ctrl-C, SIGTERM or SIGHUP the calls in flight get a few seconds to be answered and
    recorded (:func:`~envharness.serve.run_until_stopped`), then the stop goes on to the caller.
    """
    from envharness.serve import run_until_stopped

    app = create_proxy_app(Upstream(upstream, timeout), run, token_ids, token=token, max_body=max_body, body_timeout=body_timeout)
    run_until_stopped(app, host, port)
