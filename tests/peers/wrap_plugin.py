"""A pytest plugin that wraps every env a peer's test suite makes with :func:`envharness.wrap`.

Loaded with ``-p wrap_plugin`` when a peer's own tests (MiniGrid's, Gymnasium's checker)
run under ``tests/peers/test_peer_suites.py``: ``gymnasium.make`` and ``EnvSpec.make``
return ``envharness.wrap(env)`` around the env they would have returned, so the peer's
assertions run against the wrapped env a user of envharness gets.

Some of MiniGrid's tests reset an env without a seed, so each run draws other levels; on a
rare draw BabyAI's level generation places an object forever (``place_obj`` retries without
bound), which once held a CI run for the suite's whole 30-minute limit. An unseeded draw
here takes the next seed of a counter instead: every run of a peer's suite plays the same
levels, still a different one at each unseeded reset.
"""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium
import gymnasium.envs.registration as registration
import gymnasium.utils.seeding as seeding

import envharness

_make = registration.make
_np_random = seeding.np_random
_unseeded = itertools.count(1_000)


def _counted_np_random(seed: int | None = None) -> Any:
    return _np_random(next(_unseeded) if seed is None else seed)


def _wrapped_make(env_id: Any, *args: Any, **kwargs: Any) -> gymnasium.Env:
    return envharness.wrap(_make(env_id, *args, **kwargs))


def pytest_configure(config: Any) -> None:
    seeding.np_random = _counted_np_random
    registration.make = _wrapped_make
    gymnasium.make = _wrapped_make
