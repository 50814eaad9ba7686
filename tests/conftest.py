"""Fixtures for the whole suite. Helpers a test imports live in modules of their own (tests/harness_helpers.py...)."""

from __future__ import annotations

import signal
import warnings

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Run as if started from a terminal, where Ctrl-C interrupts.

    A suite started in the background of a non-interactive shell (``nohup cmd &``, some CI
    runners) starts with SIGINT ignored, and every process it starts inherits that: the
    Ctrl-C tests' children then never see their Ctrl-C (found with a probe of every worker's
    signal state: ignored from the first test to the last, no test changing it).
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.fixture(autouse=True)
def _quiet_gymnasium_checker():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is different from the unwrapped version.*")
        warnings.filterwarnings("ignore", message=".*Box observation space (minimum|maximum) value.*")
        yield
