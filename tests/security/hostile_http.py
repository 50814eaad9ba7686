"""A hostile Chat Completions endpoint that sends raw bytes, and a safety net for attacks that could hang.

Shared by the attack suite (a test module imports no other test module).
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# status, body, content type[, headers]
Answer = tuple[int, str, str] | tuple[int, str, str, dict[str, str]]


class RawEndpoint:
    """A Chat Completions endpoint on 127.0.0.1 that sends whatever bytes ``answer(request_body)`` says.

    ``models`` is the raw body of ``GET /v1/models``. Every request body is kept. ``answer``
    may sleep; :attr:`stop` is set on exit, so an answer that waits on it ends then.
    """

    def __init__(self, answer: Callable[[dict[str, Any]], Answer], models: str | None = None) -> None:
        self.answer, self.requests, self.stop = answer, list[dict[str, Any]](), threading.Event()
        self.models = models or json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "t"}]})
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _out(self, status: int, body: str, ctype: str, headers: dict[str, str] | None = None) -> None:
                data = body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up first (its deadline)
                    pass

            def do_GET(self) -> None:
                self._out(200, server.models, "application/json", {})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                server.requests.append(body)
                self._out(*server.answer(body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def forms(self) -> list[str]:
        """The response format each request asked for (``none``: no format)."""
        return [(r.get("response_format") or {}).get("type", "none") for r in self.requests]

    def __enter__(self) -> RawEndpoint:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class Hung(Exception):
    pass


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`Hung` in the main thread after ``seconds`` (main thread only)."""

    def fire(*args: Any) -> None:
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def sockets_to(port: int) -> int:
    """This process's open sockets connected to ``port`` on 127.0.0.1 (a test's own server): other tests' sockets do not count."""
    import os

    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith("socket:["):
            mine.add(target[len("socket:[") : -1])
    count = 0
    with open("/proc/self/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if int(fields[2].split(":")[1], 16) == port and fields[9] in mine:
                count += 1
    return count
