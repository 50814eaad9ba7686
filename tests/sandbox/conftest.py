"""Fixtures both sandbox suites share: each backend for real (Docker must run in CI)."""

from __future__ import annotations

import os

import pytest

from envharness.sandbox import DockerSandbox, SubprocessSandbox


@pytest.fixture
def docker_sandbox() -> DockerSandbox:
    if not DockerSandbox.available():
        if os.environ.get("CI"):
            pytest.fail("CI must provide a Docker engine (.ci/run installs docker.io and starts dockerd)")
        pytest.skip("no Docker engine on this machine (install docker.io and start dockerd)")
    return DockerSandbox()


@pytest.fixture(params=["subprocess", "docker"])
def sandbox(request):
    return SubprocessSandbox() if request.param == "subprocess" else request.getfixturevalue("docker_sandbox")
