"""A total deadline for a model call made with the openai client: :func:`deadline_client`.

httpx's timeouts bound each network operation (a connect, one read), so an endpoint that
drips its answer a byte at a time keeps a call going for ever. Here every read and write
of a request's connection gets at most the time left until the call's deadline, so the
whole call — connect, request, the answer's headers and every byte of its body or stream —
ends within ``total`` seconds, however the endpoint paces its bytes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpcore
import httpx

_NOW = threading.local()  # the deadline of the call this thread is making (a monotonic time)


def _left(timeout: float | None) -> float | None:
    at = getattr(_NOW, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the call's total deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return bytes(self._inner.read(max_bytes, _left(timeout)))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_tcp(host, port, _left(timeout), local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, _left(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Transport(httpx.HTTPTransport):
    """httpx's transport whose connections read and write within the call's deadline."""

    def __init__(self, total: float) -> None:
        super().__init__()
        self.total = total
        pool = self._pool
        backend = getattr(pool, "_network_backend", None)
        if backend is None:  # httpcore's pool keeps its backend here; a version without it cannot be bounded
            raise RuntimeError("httpcore's connection pool has no network backend to bound; pin httpcore 1.x")
        pool._network_backend = _Backend(backend)  # type: ignore[union-attr]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        _NOW.at = time.monotonic() + self.total  # the stream of the answer is read in this thread, under the same deadline
        return super().handle_request(request)


def deadline_client(total: float) -> httpx.Client:
    """An httpx client for ``openai.OpenAI(http_client=...)`` whose every call ends within ``total`` seconds.

    Example:
        >>> client = deadline_client(5.0)
        >>> client.close()
    """
    return httpx.Client(transport=_Transport(total), timeout=httpx.Timeout(total))
