"""Fixtures for the whole suite. Helpers a test imports live in modules of their own (tests/harness_helpers.py...)."""

from __future__ import annotations

import warnings

import pytest


@pytest.fixture(autouse=True)
def _quiet_gymnasium_checker():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is different from the unwrapped version.*")
        warnings.filterwarnings("ignore", message=".*Box observation space (minimum|maximum) value.*")
        yield
