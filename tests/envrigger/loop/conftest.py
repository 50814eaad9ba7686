"""Fixtures of the loop's tests: a validator of candidates on the fixed lake (tests/envrigger/loop/loop_cases.py)."""

from __future__ import annotations

import pytest
from loop_cases import LAKE

from envrigger.loop.validate import ValidationConfig, Validator
from envrigger.policies import RandomPolicy


@pytest.fixture()
def validator(tmp_path):
    env = LAKE.build()
    return Validator(
        RandomPolicy(env.action_space, seed=0),
        LAKE,
        tmp_path / "validate",
        ValidationConfig(backend="serial", min_rollouts=30, max_rollouts=90),
    )
