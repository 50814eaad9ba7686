"""Helpers for tests of wrapped envs: a trajectory's digest, fixed action lists, a harness without the audit.

They live here, not in ``conftest.py``: every ``conftest.py`` of the suite is imported as the
module ``conftest``, so ``from conftest import ...`` reads whichever one pytest loaded last.
"""

from __future__ import annotations

import hashlib
import pickle

import numpy as np


def trajectory_digest(env, seed: int, actions) -> str:
    """Reset with ``seed``, take ``actions`` (restarting on episode end), hash everything seen."""
    h = hashlib.sha256()
    obs, info = env.reset(seed=seed)
    h.update(pickle.dumps((obs, info["level"])))
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        h.update(pickle.dumps((obs, float(reward), terminated, truncated, info["verdict"].to_dict())))
        if terminated or truncated:
            obs, info = env.reset()
            h.update(pickle.dumps((obs, info["level"])))
    return h.hexdigest()


def fixed_actions(n_actions: int, length: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(n_actions, size=length).tolist()


def unaudited(env, transforms, monkeypatch):
    """A harness that trusts these custom transforms as if they were the catalog's: no audit.

    For tests of the verifier's own defences (snapshots, pristine references), which must
    hold even where no audit watches.
    """
    import envharness.harness

    monkeypatch.setattr(envharness.harness, "CATALOG", envharness.harness.CATALOG | {type(t) for t in transforms})
    return envharness.harness.Harness(env, transforms)
