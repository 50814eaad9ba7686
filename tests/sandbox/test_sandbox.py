"""Both sandbox backends pass the same contract: run code, contain abuse, report limits, clean up."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

import pytest

from envharness.sandbox import DockerSandbox, Limits, SandboxError, SubprocessSandbox, get_sandbox
from envharness.sandbox.docker_backend import OWNER_LABEL


def _docker() -> DockerSandbox:
    if not DockerSandbox.available():
        if os.environ.get("CI"):
            pytest.fail("CI must provide a Docker engine (.ci/run installs docker.io and starts dockerd)")
        pytest.skip("no Docker engine on this machine (install docker.io and start dockerd)")
    return DockerSandbox()


@pytest.fixture(params=["subprocess", "docker"])
def sandbox(request):
    return SubprocessSandbox() if request.param == "subprocess" else _docker()


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def test_runs_python_with_files_in_and_out(sandbox):
    result = sandbox.run_python(
        "import helper\nopen('answer.txt', 'w').write(str(helper.VALUE * 2))\nprint('done')",
        files={"helper.py": "VALUE = 21\n"},
        collect=("answer.txt",),
    )
    assert result.ok and result.stdout.strip() == "done" and result.files == {"answer.txt": "42"}
    assert result.backend == sandbox.name and "network" in result.isolation


def test_exit_code_and_stderr_are_reported(sandbox):
    result = sandbox.run_python("import sys\nprint('bad', file=sys.stderr)\nsys.exit(3)")
    assert result.exit_code == 3 and result.stderr.strip() == "bad" and result.limit is None and not result.ok


def test_fork_bomb_is_contained(sandbox):
    started = time.monotonic()
    result = sandbox.run_python("import os\nwhile True:\n    os.fork()", limits=Limits(timeout_s=20, pids=32))
    assert result.limit == "pids" and not result.timed_out
    assert time.monotonic() - started < 15


def test_memory_hog_hits_the_memory_limit(sandbox):
    result = sandbox.run_python(
        "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 2**20))", limits=Limits(memory_mb=128, timeout_s=20)
    )
    assert result.limit == "memory" and not result.ok


def test_busy_loop_hits_the_cpu_limit(sandbox):
    result = sandbox.run_python("while True:\n    pass", limits=Limits(cpu_s=1, timeout_s=20))
    assert result.limit == "cpu" and result.duration_s < 10


def test_sleeper_hits_the_wall_clock_timeout(sandbox):
    result = sandbox.run_python("import time\nwhile True:\n    time.sleep(0.05)", limits=Limits(timeout_s=1.5))
    assert result.timed_out and result.limit == "timeout" and 1.4 < result.duration_s < 8


def test_network_is_unreachable(sandbox):
    result = sandbox.run_python("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=3)\nprint('connected')")
    assert "connected" not in result.stdout and result.exit_code != 0
    assert any(word in result.stderr for word in ("unreachable", "refused", "Cannot assign"))


def test_writing_outside_the_work_dir_fails_and_leaves_the_host_untouched(sandbox):
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)), "written-by-sandbox.txt")
    result = sandbox.run_python(f"open({target!r}, 'w').write('pwned')")
    assert result.exit_code != 0 and not os.path.exists(target)
    assert any(word in _last_line(result.stderr) for word in ("Read-only", "Permission denied", "No such file"))


def test_host_secrets_are_not_readable(sandbox):
    fd, secret = tempfile.mkstemp(dir="/var/tmp" if os.path.isdir("/var/tmp") else None, prefix="host-secret-")
    os.write(fd, b"top secret")
    os.close(fd)
    os.chmod(secret, 0o600)
    try:
        result = sandbox.run_python(f"print(open({secret!r}).read())")
    finally:
        os.unlink(secret)
    assert "top secret" not in result.stdout and result.exit_code != 0


def test_docker_cannot_see_the_host_filesystem():
    sandbox = _docker()
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = sandbox.run_python(f"import os\nprint(os.path.exists({project!r}), os.path.exists('/etc/debian_version'))")
    assert result.stdout.split() == ["False", "True"]


def test_output_flood_is_capped(sandbox):
    result = sandbox.run_python("import sys\nsys.stdout.write('x' * 5_000_000)", limits=Limits(output_bytes=10_000))
    assert len(result.stdout) == 10_000 and result.limit == "output"


def test_nothing_is_left_behind(sandbox):
    sleeper = f"300.{os.getpid()}"  # a sleep of this run's own, told apart from any test running beside it
    # A private root for this test's work directories, outside /tmp (the jail hides /tmp).
    root = tempfile.mkdtemp(dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None, prefix="sandbox-test-")
    sandbox.workdir_root = root
    try:
        sandbox.run_python(f"import subprocess\nsubprocess.Popen(['sleep', '{sleeper}'])\nprint('spawned')", limits=Limits(timeout_s=5))
        sandbox.run_python("import time\ntime.sleep(30)", limits=Limits(timeout_s=1))
        assert os.listdir(root) == []
    finally:
        os.rmdir(root)
    time.sleep(0.2)
    sleepers = subprocess.run(["pgrep", "-f", f"sleep {sleeper}"], capture_output=True, text=True).stdout.split()
    assert sleepers == []
    if sandbox.name == "docker":  # this process's containers (tests beside this one may have their own)
        mine = {"ancestor": sandbox.image, "label": f"{OWNER_LABEL}={os.getpid()}"}
        assert sandbox.client.containers.list(all=True, filters=mine) == []


def test_files_may_not_escape_the_work_dir(sandbox):
    with pytest.raises(SandboxError, match="outside the work directory"):
        sandbox.run_python("print(1)", files={"../escape.py": "x = 1"})


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(SandboxError, match="unknown"):
        get_sandbox("vm")
