"""The helpers MiniGrid's test modules import from ``tests.utils``, which its source release does not ship.

Written from how ``test_envs.py`` and ``test_wrappers.py`` use them: the registered
MiniGrid and BabyAI specs, and a recursive equality check with a message prefix.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

all_testing_env_specs = [
    spec for spec in gym.registry.values() if isinstance(spec.entry_point, str) and spec.entry_point.startswith("minigrid.envs")
]
minigrid_testing_env_specs = [spec for spec in all_testing_env_specs if not str(spec.entry_point).startswith("minigrid.envs.babyai")]


def assert_equals(a: Any, b: Any, prefix: str | None = None) -> None:
    """Assert ``a`` and ``b`` are equal, recursing into dicts, sequences and arrays."""
    prefix = prefix or ""
    assert type(a) is type(b), f"{prefix}types differ: {type(a)} and {type(b)}"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{prefix}keys differ: {a.keys()} and {b.keys()}"
        for key in a:
            assert_equals(a[key], b[key], f"{prefix}{key}: ")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{prefix}lengths differ: {len(a)} and {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_equals(x, y, f"{prefix}[{i}] ")
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=prefix)
    else:
        assert a == b, f"{prefix}{a!r} != {b!r}"
