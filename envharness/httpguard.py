"""What both servers of the live harness (`envharness serve`, `envrigger proxy`) put between a client and their routes.

- :class:`Gate`: an ASGI middleware in front of the whole app, so every route, the ones
  the framework adds by itself included, answers 401 without the token; only the paths
  it is told are open (``/healthz``) are not asked.
- :func:`read_body` and :func:`parse_json`: a request body read whole within a size and
  a total time (413, 408), then parsed as JSON no deeper than :data:`DEPTH` levels
  (400): client input is either a value the route can walk or a one-line refusal.
- :class:`Redactor`: every string a server records, logs or returns goes through one,
  which replaces each secret (a caller's key, a server's token) with ``[redacted]``.
- :class:`Deadline`: a total time for a whole call (the proxy's upstream call, a remote
  env's request), kept by one watchdog thread that shuts the call's socket when it passes,
  however the peer paces its bytes.

Standard library only; the ASGI types are plain dicts and callables.
"""

from __future__ import annotations

import asyncio
import heapq
import hmac
import itertools
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

DEPTH = 100  # levels of JSON nesting a request (or an upstream's answer) may have: far above any real one, far below the stack
REDACTED = "[redacted]"
MIN_SECRET = 8  # shorter keys ("EMPTY", what vLLM is given) are not searched for: they would match ordinary text

Render = Callable[[int, str], bytes]  # (status, one-line message) -> the JSON body of an error


class HTTPError(Exception):
    """A refusal: ``status`` and a one-line ``message`` naming the problem and the fix."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def first_line(text: Any, limit: int = 300) -> str:
    """``text`` as one line of at most ``limit`` characters (what an error message quotes)."""
    lines = str(text).strip().splitlines()
    line = " ".join(lines[0].split()) if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


class Gate:
    """ASGI middleware: every HTTP request except to ``open_paths`` must carry ``token`` in ``header``, else 401.

    The token is compared in constant time and never echoed. ``prefix`` is what precedes
    it in the header (``"Bearer "`` for ``Authorization``). With ``token=None`` the gate
    lets everything through. Because it wraps the app, not each route, a route added
    later (or by the framework) is behind it too.
    """

    def __init__(self, app: Any, token: str | None, render: Render, header: str = "Authorization", prefix: str = "Bearer ",
                 open_paths: Iterable[str] = ("/healthz",), challenge: bool = True) -> None:  # fmt: skip
        self.app, self.render = app, render
        self.expected = None if token is None else (prefix + token).encode()
        self.header, self.open_paths, self.challenge = header.lower().encode(), frozenset(open_paths), challenge
        self.what = f"{header}: {prefix}<token>" if prefix else f"{header}: <token>"

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        if self.expected is None or scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers") or ():
            if name == self.header:
                given = value
                break
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        body = self.render(401, f"missing or wrong token; send {self.what} (the server's token)")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if self.challenge:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def read_body(request: Any, max_body: int, timeout: float) -> bytes:
    """The whole body of a Starlette ``request``: 413 past ``max_body`` bytes (declared or sent), 408 past ``timeout`` seconds."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > max_body):
        raise HTTPError(413, f"the body is over {max_body} bytes; send a smaller one")
    pieces: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for piece in request.stream():
                size += len(piece)
                if size > max_body:
                    raise HTTPError(413, f"the body is over {max_body} bytes; send a smaller one")
                pieces.append(piece)
    except TimeoutError:
        raise HTTPError(408, f"the body did not arrive within {timeout:g} s; send it at once") from None
    except OSError:
        raise HTTPError(400, "the client went away before its body arrived") from None
    except Exception as error:  # starlette's ClientDisconnect, without importing starlette here
        if type(error).__name__ == "ClientDisconnect":
            raise HTTPError(400, "the client went away before its body arrived") from None
        raise
    return b"".join(pieces)


def too_deep(value: Any, limit: int = DEPTH) -> bool:
    """Whether ``value`` (decoded JSON) nests lists and objects deeper than ``limit`` levels (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def parse_json(raw: bytes, what: str = "the body", limit: int = DEPTH) -> Any:
    """``raw`` as JSON, or a one-line :class:`ValueError`: not JSON, not UTF-8, or nested deeper than ``limit`` levels."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ValueError(f"{what} nests deeper than {limit} levels") from None
    except ValueError as error:
        raise ValueError(f"{what} is not JSON ({first_line(error, 80)})") from None
    if too_deep(value, limit):
        raise ValueError(f"{what} nests deeper than {limit} levels")
    return value


class Redactor:
    """Replaces each secret in every string (and object key) of a value with ``[redacted]``.

    Secrets shorter than :data:`MIN_SECRET` characters are not searched for. Values are
    decoded JSON (nested at most :data:`DEPTH` levels, as :func:`parse_json` ensures), so
    a secret an upstream spelled with JSON escapes is found once decoded.

    Example:
        >>> scrub = Redactor(["sk-0123456789"])
        >>> scrub({"error": {"message": "bad key Bearer sk-0123456789"}})
        {'error': {'message': 'bad key Bearer [redacted]'}}
    """

    def __init__(self, secrets: Iterable[str | None]) -> None:
        self.secrets = tuple(sorted({s for s in secrets if s and len(s) >= MIN_SECRET}, key=len, reverse=True))
        # A secret without quotes, backslashes or control characters is spelled verbatim in json.dumps(..., ensure_ascii=False)
        # wherever a string holds it: one C-speed search decides whether a value needs the walk at all.
        self._plain = all('"' not in s and "\\" not in s and all(ord(c) >= 32 for c in s) for s in self.secrets)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def holds(self, value: Any) -> bool:
        """Whether any secret is in any string of ``value``."""
        if not self.secrets:
            return False
        if isinstance(value, str):
            return any(s in value for s in self.secrets)
        if self._plain:
            try:
                dumped = json.dumps(value, ensure_ascii=False)
            except (TypeError, ValueError, RecursionError):
                return True  # not plain JSON: let the walk decide
            return any(s in dumped for s in self.secrets)
        return True

    def __call__(self, value: Any) -> Any:
        """``value`` with every secret replaced (the same object when it holds none)."""
        if not self.holds(value):
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self._walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._walk(v) for v in value]
        return value


# -- the total deadline ------------------------------------------------------------------------------------------------
class _Watchdog:
    """One thread for the whole process: at each deadline, shuts the socket of the call that is still running."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Deadline]] = []
        self._count = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._ended = 0

    def watch(self, deadline: Deadline) -> None:
        with self._wake:
            heapq.heappush(self._heap, (deadline.at, next(self._count), deadline))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="envharness-deadlines")
                self._thread.start()
            elif self._heap[0][2] is deadline:
                self._wake.notify()

    def forget(self) -> None:
        """A watched call ended before its deadline: once most of the heap is such calls, drop them (the heap stays small)."""
        with self._wake:
            self._ended += 1
            if self._ended > 1024 and self._ended * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].over]
                heapq.heapify(self._heap)
                self._ended = 0

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._wake.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                _, _, due = heapq.heappop(self._heap)
            due.expire()


_WATCHDOG = _Watchdog()


class Deadline:
    """``seconds`` from now for a whole call (an upstream call, a remote env's request); :meth:`arm` hands it the connection to cut when it passes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self.over = False  # the call ended (disarm) or the deadline passed (expire): nothing more to cut
        self.expired = False
        self._watched = False

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def arm(self, sock: socket.socket) -> None:
        with self._lock:
            if self.over:
                return
            self._socket = sock
            watch, self._watched = not self._watched, True
        if watch:
            _WATCHDOG.watch(self)

    def disarm(self) -> None:
        with self._lock:
            if self.over:
                return
            self.over, self._socket = True, None
            watched = self._watched
        if watched:
            _WATCHDOG.forget()

    def expire(self) -> None:
        with self._lock:
            if self.over:
                return
            self.over, self.expired = True, True
            sock, self._socket = self._socket, None
        if sock is not None:
            try:  # the plain socket's shutdown (an SSL socket's own would unwrap it): any read blocked on it returns at once
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def passed(self) -> bool:
        return self.expired or self.remaining() <= 0
