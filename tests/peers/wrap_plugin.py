"""A pytest plugin that wraps every env a peer's test suite makes with :func:`envharness.wrap`.

Loaded with ``-p wrap_plugin`` when a peer's own tests (MiniGrid's, Gymnasium's checker)
run under ``tests/peers/test_peer_suites.py``: ``gymnasium.make`` and ``EnvSpec.make``
return ``envharness.wrap(env)`` around the env they would have returned, so the peer's
assertions run against the wrapped env a user of envharness gets.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import gymnasium.envs.registration as registration

import envharness

_make = registration.make


def _wrapped_make(env_id: Any, *args: Any, **kwargs: Any) -> gymnasium.Env:
    return envharness.wrap(_make(env_id, *args, **kwargs))


def pytest_configure(config: Any) -> None:
    registration.make = _wrapped_make
    gymnasium.make = _wrapped_make
