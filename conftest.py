"""Doctests that need a Docker engine, or the ``textworld`` extra, skip without it, except in CI, where they must run.

Also: the suite behaves the same in one process and under ``pytest-xdist``.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

# The doctests that play TextWorld games.
TEXTWORLD_DOCTESTS = ("textworld_games.TextWorldEnv", "adapters.textworld.TextWorldAdapter", "reference.TextWorldSolver")


def pytest_configure(config):
    # xdist's workers start with COLUMNS=80 in their environment; the CLIs' consoles read it at
    # import, so output would wrap where a one-process run does not. The same width everywhere:
    # what a non-terminal gets without COLUMNS (see envharness.cli.console).
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("COLUMNS") == "80":
        del os.environ["COLUMNS"]


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("CI") and importlib.util.find_spec("textworld") is None:
        skip = pytest.mark.skip(reason='needs the textworld extra: pip install "envharness[textworld]"')
        for item in items:
            if item.nodeid.endswith(TEXTWORLD_DOCTESTS):
                item.add_marker(skip)
    needs_docker = [item for item in items if "docker_backend" in item.nodeid and item.nodeid.startswith("envharness/")]
    if not needs_docker or os.environ.get("CI"):
        return
    from envharness.sandbox import DockerSandbox

    if not DockerSandbox.available():
        skip = pytest.mark.skip(reason="no Docker engine on this machine (install docker.io and start dockerd)")
        for item in needs_docker:
            item.add_marker(skip)
