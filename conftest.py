"""Doctests that need a Docker engine skip without one, except in CI, where they must run."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config, items):
    needs_docker = [item for item in items if "docker_backend" in item.nodeid and item.nodeid.startswith("envharness/")]
    if not needs_docker or os.environ.get("CI"):
        return
    from envharness.sandbox import DockerSandbox

    if not DockerSandbox.available():
        skip = pytest.mark.skip(reason="no Docker engine on this machine (install docker.io and start dockerd)")
        for item in needs_docker:
            item.add_marker(skip)
