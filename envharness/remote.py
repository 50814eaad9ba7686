"""A served env as a local Gymnasium env: :class:`RemoteEnv`, a thin client of `envharness serve`.

Standard library only (``http.client``, one kept-alive connection per env). The spaces come
from the server's ``GET /v1/spec``, observations and actions travel as JSON
(:mod:`envharness.wire`), and the verdict in ``info["verdict"]`` is the server's. A server
error is raised as :class:`RemoteError` with the server's one-line message.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from typing import Any

import gymnasium as gym

from envharness.errors import ActionError, EnvHarnessError, EpisodeEndedError
from envharness.httpguard import Deadline
from envharness.verifier import Verdict
from envharness.wire import decode, encode, space_from


class RemoteError(EnvHarnessError):
    """The server refused a request; ``status`` is its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RemoteEnv(gym.Env):
    """An env served by ``envharness serve``, played over HTTP.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1`` is fine).
        token: the bearer token, if the server wants one.
        timeout: seconds a whole request may take (connect, send, and the answer's every byte).

    Example:
        >>> from envharness import HarnessSpec
        >>> from envharness.serve import EnvService, background
        >>> server = background(EnvService(HarnessSpec(env_id="CartPole-v1")))
        >>> env = RemoteEnv(server.url)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, env.action_space
        ((4,), Discrete(2))
        >>> obs, reward, terminated, truncated, info = env.step(1)
        >>> info["verdict"].reason
        'in progress'
        >>> env.close(); server.stop()
    """

    metadata = {"render_modes": []}

    def __init__(self, url: str, token: str | None = None, timeout: float = 60.0) -> None:
        parsed = urllib.parse.urlsplit(url.rstrip("/").removesuffix("/v1"))
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise RemoteError(0, f"url: {url!r} is not an http(s) URL; give the server's address, e.g. http://127.0.0.1:8000")
        self._scheme, self._host, self._port = parsed.scheme, parsed.hostname, parsed.port
        self._prefix = parsed.path
        self._headers = {"Content-Type": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._timeout = timeout
        self._connection: http.client.HTTPConnection | None = None
        described = self._call("GET", "/v1/spec")
        self.served_spec = described["spec"]
        self.observation_space = space_from(described["observation_space"])
        self.action_space = space_from(described["action_space"])
        self.session_id: str | None = None

    # -- HTTP ------------------------------------------------------------------------------
    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            kind = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
            self._connection = kind(self._host, self._port, timeout=self._timeout)
            self._connection.connect()
            # Small requests, answered at once: without this, Nagle's algorithm and the peer's delayed ACK add ~40 ms a step.
            self._connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._connection

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        deadline = Deadline(self._timeout)  # the whole request, however the server paces its bytes
        try:
            for attempt in (1, 2):  # a kept-alive connection the server closed meanwhile is opened again, once
                try:
                    connection = self._connect()
                    deadline.arm(connection.sock)
                    connection.request(method, self._prefix + path, body=data, headers=self._headers)
                    response = connection.getresponse()
                    raw = response.read()
                    if deadline.passed():  # cut by the deadline: what was read is not the whole answer
                        raise TimeoutError
                    break
                except (
                    http.client.RemoteDisconnected,
                    ConnectionResetError,
                    BrokenPipeError,
                    http.client.IncompleteRead,
                    OSError,
                ) as error:
                    if self._connection is not None:
                        self._connection.close()
                    self._connection = None
                    if deadline.passed():
                        raise RemoteError(0, f"the server at {self._host}:{self._port} did not answer within {self._timeout:g} s") from None
                    if not isinstance(error, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
                        raise RemoteError(
                            0,
                            f"cannot reach the server at {self._host}:{self._port} ({getattr(error, 'strerror', None) or type(error).__name__})",
                        ) from None
                    if attempt == 2 or method == "POST" and path.endswith("/step"):  # a step may have happened: never resend it
                        raise RemoteError(0, f"the server at {self._host}:{self._port} closed the connection") from None
        finally:
            deadline.disarm()
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            raise RemoteError(response.status, f"the server answered {response.status} with no JSON") from None
        if response.status >= 400:
            message = answer.get("error", f"status {response.status}") if isinstance(answer, dict) else f"status {response.status}"
            if response.status == 409:
                raise EpisodeEndedError(message)
            if response.status == 400 and "action" in message:
                raise ActionError(message)
            raise RemoteError(response.status, message)
        return answer

    # -- gymnasium API -----------------------------------------------------------------------
    def _info(self, info: dict[str, Any]) -> dict[str, Any]:
        verdict = info.get("verdict")
        if isinstance(verdict, dict):
            info["verdict"] = Verdict(bool(verdict["success"]), float(verdict["score"]), str(verdict["reason"]))
        return info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._end_session()
        body: dict[str, Any] = {}
        if seed is not None:
            body["seed"] = int(seed)
        if options is not None:
            body["options"] = encode(options)
        answer = self._call("POST", "/v1/sessions", body)
        self.session_id = answer["session_id"]
        return decode(self.observation_space, answer["observation"], "observation"), self._info(answer["info"])

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.session_id is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        answer = self._call("POST", f"/v1/sessions/{self.session_id}/step", {"action": encode(action)})
        obs = decode(self.observation_space, answer["observation"], "observation")
        return obs, float(answer["reward"]), bool(answer["terminated"]), bool(answer["truncated"]), self._info(answer["info"])

    def _end_session(self) -> None:
        if self.session_id is not None:
            try:
                self._call("DELETE", f"/v1/sessions/{self.session_id}")
            except RemoteError as error:
                if error.status != 404:  # closed by the server already (idle): nothing to end
                    raise
            self.session_id = None

    def close(self) -> None:
        try:
            self._end_session()
        finally:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        super().close()
