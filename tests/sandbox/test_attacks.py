"""Attacks on the sandbox: hostile programs try to escape, starve the host, or lie about which limit stopped them.

Every test runs one hostile program and asserts what the sandbox contract promises, on both
backends where the attack applies to both. The limit a result reports must come from what
the kernel and the host measured, never from what the program printed.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

import envharness
from envharness.sandbox import DockerSandbox, Limits, SandboxResult, SubprocessSandbox
from envharness.sandbox.docker_backend import OWNER_LABEL

SCRATCH = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None  # outside /tmp, which the jail hides
PROJECT = os.path.dirname(os.path.abspath(envharness.__file__))
MiB = 2**20


def _docker() -> DockerSandbox:
    if not DockerSandbox.available():
        if os.environ.get("CI"):
            pytest.fail("CI must provide a Docker engine (.ci/run installs docker.io and starts dockerd)")
        pytest.skip("no Docker engine on this machine (install docker.io and start dockerd)")
    return DockerSandbox()


@pytest.fixture(params=["subprocess", "docker"])
def sandbox(request):
    return SubprocessSandbox() if request.param == "subprocess" else _docker()


@pytest.fixture
def private_root(sandbox):
    """A private, world-traversable root for this test's work directories (empty again after every run)."""
    root = tempfile.mkdtemp(dir=SCRATCH, prefix="sandbox-attack-")
    os.chmod(root, 0o755)
    sandbox.workdir_root = root
    yield root
    subprocess.run(["rm", "-rf", "--one-file-system", root], check=False)


@pytest.fixture
def host_dir():
    """A host directory (0755, root-owned) in /var/tmp for files the sandbox must not reach."""
    path = tempfile.mkdtemp(dir=SCRATCH, prefix="sandbox-attack-host-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _code(text: str, **values: object) -> str:
    """Dedent ``text`` and put in ``values`` (as Python literals) for the ``@name@`` placeholders."""
    text = textwrap.dedent(text)
    for name, value in values.items():
        text = text.replace(f"@{name}@", repr(value))
    return text


def _marker() -> str:
    return f"envharness-attack-{uuid.uuid4().hex}"


def _in_parallel(first, second, delay_s: float) -> tuple[SandboxResult, SandboxResult]:
    """Start ``first``, then ``second`` ``delay_s`` later, in threads; both results."""
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(first)
        time.sleep(delay_s)
        b = pool.submit(second)
        return a.result(timeout=180), b.result(timeout=180)


def _numbers(pattern: str, text: str) -> list[int]:
    return [int(n) for n in re.findall(pattern, text)]


FRESH = """
import json, os, resource, sys
from envharness.sandbox import DockerSandbox, Limits, SubprocessSandbox
backend, code, limits = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sandbox = SubprocessSandbox() if backend == "subprocess" else DockerSandbox()
sandbox.run_python("print('warm-up')", limits=Limits(timeout_s=30))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = sandbox.run_python(code, limits=Limits(**limits))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"pid": os.getpid(), "growth_kib": after - before, "limit": result.limit, "timed_out": result.timed_out,
                  "stdout_len": len(result.stdout), "stderr_len": len(result.stderr), "stdout": result.stdout[:200]}))
"""


def _fresh(backend: str, code: str, limits: dict, stdin: int | None = None) -> dict:
    """Run ``code`` in a fresh Python process on the host (its own ru_maxrss, its own stdin); the result as a dict."""
    paths = [os.path.dirname(PROJECT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}
    done = subprocess.run(
        [sys.executable, "-c", FRESH, backend, code, json.dumps(limits)],
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"the host-side run failed: {done.stderr[-2000:]}"
    return json.loads(lines[-1])


# -- memory: one limit for the whole run, whatever holds the memory -------------------------------------
def test_forked_children_share_one_memory_limit(sandbox):
    """Six children holding 60 MiB each try to use 360 MiB under a 128 MiB limit: the run is stopped for memory."""
    code = _code("""
        import os, time
        children = []
        for _ in range(6):
            pid = os.fork()
            if pid == 0:
                block = b"x" * (60 * 2**20)
                time.sleep(3)
                os._exit(0 if block else 1)
            children.append(pid)
        print("statuses", [os.waitpid(pid, 0)[1] for pid in children])
    """)
    result = sandbox.run_python(code, limits=Limits(memory_mb=128, timeout_s=20))
    assert result.limit == "memory"


def test_memfd_pages_count_as_memory(sandbox):
    """memfd_create + write 300 MiB (no mapping, so no address-space limit applies) under 128 MiB: limit "memory"."""
    code = _code("""
        import ctypes, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.memfd_create(b"hog", 0)
        if fd < 0:
            print("memfd_create refused", ctypes.get_errno())
            sys.exit(3)
        chunk = b"x" * 2**20
        try:
            for n in range(300):
                os.write(fd, chunk)
        except OSError as error:
            print("stopped at", n, "errno", error.errno)
            sys.exit(3)
        print("stored 300 MiB")
    """)
    result = sandbox.run_python(code, limits=Limits(memory_mb=128, file_mb=1024, timeout_s=20))
    assert result.limit == "memory" and "stored 300 MiB" not in result.stdout


def test_sysv_shared_memory_counts_as_memory(sandbox):
    """Ten 32 MiB SysV segments, each attached, touched and detached (so never mapped at once), under 128 MiB: limit "memory"."""
    base = random.randrange(0x10000000, 0x70000000)
    keys = [base + n for n in range(10)]
    code = _code(
        """
        import ctypes, sys
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
        libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        libc.shmat.restype = ctypes.c_void_p
        libc.shmdt.argtypes = [ctypes.c_void_p]
        libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        size, ids = 32 * 2**20, []
        for n, key in enumerate(@keys@):
            ident = libc.shmget(key, size, 0o1600)
            if ident < 0:
                print("shmget refused", ctypes.get_errno())
                sys.exit(3)
            ids.append(ident)
            address = libc.shmat(ident, None, 0)
            if address in (None, ctypes.c_void_p(-1).value):
                print("shmat refused", ctypes.get_errno())
                sys.exit(3)
            ctypes.memset(address, 1, size)
            libc.shmdt(address)
            print("touched", (n + 1) * 32, flush=True)
        for ident in ids:
            libc.shmctl(ident, 0, None)
        print("stored 320 MiB")
        """,
        keys=keys,
    )
    try:
        result = sandbox.run_python(code, limits=Limits(memory_mb=128, timeout_s=20))
    finally:
        for key in keys:  # without an IPC namespace the segments would outlive the run on the host
            subprocess.run(["ipcrm", "-M", str(key)], capture_output=True)
    assert result.limit == "memory" and "stored 320 MiB" not in result.stdout


def test_socket_buffers_count_as_memory(sandbox):
    """300 MiB parked in the kernel buffers of Unix socket pairs (nothing in the process's own memory) under 128 MiB: "memory"."""
    code = _code("""
        import socket
        pairs, total = [], 0
        while total < 300 * 2**20:
            a, b = socket.socketpair()
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            a.setblocking(False)
            while True:
                try:
                    total += a.send(b"x" * 65536)
                except BlockingIOError:
                    break
            pairs.append((a, b))
        print("buffered MiB", total >> 20)
    """)
    result = sandbox.run_python(code, limits=Limits(memory_mb=128, timeout_s=20))
    assert result.limit == "memory" and "buffered" not in result.stdout


@pytest.mark.parametrize("directory", ["/tmp", "/dev/shm"])
def test_filling_a_memory_backed_directory_is_stopped(sandbox, directory):
    """Writing 300 MiB in 8 MiB files into /tmp or /dev/shm never succeeds, and the run says "disk" or "memory"."""
    code = _code(
        """
        import os
        written, chunk = 0, b"x" * 2**20
        try:
            for n in range(38):
                with open(os.path.join(@directory@, f"fill{n}"), "wb", buffering=0) as handle:
                    for _ in range(8):
                        written += handle.write(chunk)
                print("written", written, flush=True)
            print("stored everything", written)
        except OSError as error:
            print("stopped", written, "errno", error.errno, flush=True)
        """,
        directory=directory,
    )
    result = sandbox.run_python(code, limits=Limits(memory_mb=128, file_mb=16, disk_mb=64, timeout_s=20))
    assert result.limit in ("disk", "memory") and "stored everything" not in result.stdout
    assert max(_numbers(r"(?:written|stopped) (\d+)", result.stdout), default=0) < 300 * MiB


# -- disk: the work dir, /tmp and /dev/shm together hold at most disk_mb -----------------------------
def test_many_small_files_hit_the_disk_limit(sandbox):
    """8 MiB files (below file_mb) in the work dir until failure, disk_mb=32: limit "disk" and no more than ~32 MiB stored."""
    code = _code("""
        written, chunk = 0, b"x" * 2**20
        try:
            for n in range(40):
                with open(f"fill{n}.bin", "wb", buffering=0) as handle:
                    for _ in range(8):
                        written += handle.write(chunk)
        except OSError as error:
            print("errno", error.errno)
        print("written", written)
    """)
    result = sandbox.run_python(code, limits=Limits(disk_mb=32, file_mb=16, memory_mb=256, timeout_s=20))
    written = _numbers(r"written (\d+)", result.stdout)
    assert result.limit == "disk" and written and written[0] < 36 * MiB


def test_work_dir_tmp_and_dev_shm_share_one_disk_quota(sandbox):
    """24 MiB into each of the work dir, /tmp and /dev/shm (each below disk_mb=32 alone): together they hold ~32 MiB at most."""
    code = _code("""
        import os
        total, chunk = 0, b"x" * 2**20
        for directory in (".", "/tmp", "/dev/shm"):
            try:
                for n in range(3):
                    with open(os.path.join(directory, f"fill{n}.bin"), "wb", buffering=0) as handle:
                        for _ in range(8):
                            total += handle.write(chunk)
            except OSError as error:
                print(directory, "errno", error.errno)
        print("total", total)
    """)
    result = sandbox.run_python(code, limits=Limits(disk_mb=32, file_mb=16, memory_mb=256, timeout_s=20))
    total = _numbers(r"total (\d+)", result.stdout)
    assert result.limit == "disk" and total and total[0] < 36 * MiB


def test_a_file_larger_than_file_mb_cannot_be_written(sandbox):
    """One 8 MiB file with file_mb=4: the file stops at 4 MiB at most."""
    code = _code("""
        import os
        try:
            with open("big.bin", "wb", buffering=0) as handle:
                for _ in range(8):
                    handle.write(b"x" * 2**20)
        except OSError as error:
            print("errno", error.errno)
        print("size", os.path.getsize("big.bin"))
    """)
    result = sandbox.run_python(code, limits=Limits(file_mb=4, disk_mb=64, timeout_s=20))
    sizes = _numbers(r"size (\d+)", result.stdout)
    assert sizes and sizes[0] <= 4 * MiB


# -- processes: per-run limits, reported from the kernel's counters ------------------------------------
def test_a_silent_fork_bomb_hits_the_pids_limit(sandbox):
    """A fork bomb that swallows its errors (nothing on stderr) with pids=32: limit "pids", no timeout."""
    code = _code("""
        import os, time
        deadline = time.time() + 3
        while time.time() < deadline:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
        time.sleep(0.5)
    """)
    result = sandbox.run_python(code, limits=Limits(pids=32, timeout_s=20))
    assert result.limit == "pids" and not result.timed_out


def test_a_fork_bomb_does_not_starve_a_concurrent_run(sandbox):
    """One run fork-bombs while another starts 10 subprocesses: the other exits 0 (limits are per run, not per uid)."""
    bomb = _code("""
        import os, time
        deadline = time.time() + 6
        while time.time() < deadline:
            try:
                os.fork()
            except OSError:
                time.sleep(0.05)
    """)
    victim = _code("""
        import subprocess, sys, time
        time.sleep(1.5)
        children = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(10)]
        print("children", [child.wait() for child in children])
    """)
    bombed, other = _in_parallel(
        lambda: sandbox.run_python(bomb, limits=Limits(pids=32, timeout_s=20)),
        lambda: sandbox.run_python(victim, limits=Limits(pids=64, timeout_s=20)),
        delay_s=0.5,
    )
    assert other.exit_code == 0 and other.stdout.strip() == "children " + str([0] * 10), other.stderr[-500:]
    assert bombed.limit == "pids"


def test_using_exactly_the_pids_limit_is_not_hitting_it(sandbox):
    """A program that holds exactly pids=8 processes at once (never asking for a ninth) and exits 0: no limit is reported."""
    code = _code("""
        import os, time
        children = []
        for _ in range(7):
            pid = os.fork()
            if pid == 0:
                time.sleep(1.5)
                os._exit(0)
            children.append(pid)
        print("statuses", [os.waitpid(pid, 0)[1] for pid in children])
    """)
    result = sandbox.run_python(code, limits=Limits(pids=8, timeout_s=20))
    assert result.stdout.strip() == "statuses " + str([0] * 7), result.stderr[-500:]
    assert result.ok and result.limit is None, result.evidence


# -- CPU: summed over the whole run, and never inferred from a signal alone ------------------------------
def test_busy_loop_hits_the_cpu_limit_with_evidence(sandbox):
    """A busy loop with cpu_s=1: limit "cpu", and the kernel's CPU accounting shows about a second or more."""
    result = sandbox.run_python("while True:\n    pass", limits=Limits(cpu_s=1, timeout_s=20))
    assert result.limit == "cpu" and not result.timed_out
    assert isinstance(result.evidence["cpu_s"], float) and result.evidence["cpu_s"] >= 0.9


def test_ignoring_sigxcpu_does_not_escape_the_cpu_limit(sandbox):
    """A busy loop that sets SIGXCPU to SIG_IGN: still limit "cpu", well before the timeout."""
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
    result = sandbox.run_python(code, limits=Limits(cpu_s=1, timeout_s=20))
    assert result.limit == "cpu" and result.duration_s < 10


def test_cpu_time_is_summed_over_all_processes(sandbox):
    """Four children, each busy for 1.8 s of CPU (each below cpu_s=2, together far above): limit "cpu" well before the timeout."""
    code = _code("""
        import os, time
        start = time.time()
        for _ in range(4):
            if os.fork() == 0:
                while time.process_time() < 1.8:
                    pass
                while time.time() < start + 12:
                    time.sleep(0.1)
                os._exit(0)
        while time.time() < start + 12:
            time.sleep(0.1)
        print("all done")
    """)
    result = sandbox.run_python(code, limits=Limits(cpu_s=2, timeout_s=20))
    assert result.limit == "cpu" and result.duration_s < 10 and "all done" not in result.stdout


def test_cpu_of_auto_reaped_children_still_counts(sandbox):
    """With SIGCHLD ignored (children reaped by the kernel, their CPU never reported to anyone), six children burn 1.2 s each
    one after the other under cpu_s=2: still limit "cpu", and they do not all get to finish."""
    code = _code("""
        import os, signal, time
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        for n in range(6):
            pid = os.fork()
            if pid == 0:
                while time.process_time() < 1.2:
                    pass
                os._exit(0)
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            print("child done", n + 1, flush=True)
        print("burned 7.2 s")
    """)
    result = sandbox.run_python(code, limits=Limits(cpu_s=2, timeout_s=20))
    assert result.limit == "cpu" and "burned" not in result.stdout and result.duration_s < 10


@pytest.mark.parametrize("sig", [signal.SIGXCPU, signal.SIGKILL], ids=["SIGXCPU", "SIGKILL"])
def test_killing_itself_with_a_limit_signal_is_not_a_cpu_limit(sandbox, sig):
    """A program that sends itself SIGXCPU or SIGKILL without using CPU: limit is None, not "cpu"."""
    result = sandbox.run_python(f"import os\nos.kill(os.getpid(), {int(sig)})", limits=Limits(cpu_s=5, timeout_s=10))
    assert result.limit is None and not result.ok


@pytest.mark.parametrize("message", ["MemoryError", "Resource temporarily unavailable", "File too large", "Cannot allocate memory"])
def test_printing_a_limit_message_does_not_fake_a_limit(sandbox, message):
    """A program that prints a limit's error message to stderr and exits 1: limit is None, exit code 1."""
    result = sandbox.run_python(f"import sys\nsys.stderr.write({message!r} + '\\n')\nsys.exit(1)")
    assert result.limit is None and result.exit_code == 1


# -- output: capped without the host ever holding the flood ------------------------------------------------
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_flood_is_capped_without_host_memory_growth(sandbox, stream):
    """200 MB on stdout or stderr with output_bytes=1_000_000: limit "output", at most 1 MB kept, host RSS grows < 64 MiB."""
    code = f"import sys\nchunk = b'x' * 2**20\nfor _ in range(200):\n    sys.{stream}.buffer.write(chunk)\n"
    outcome = _fresh(sandbox.name, code, {"output_bytes": 1_000_000, "timeout_s": 60})
    assert outcome["limit"] == "output" and outcome[f"{stream}_len"] <= 1_000_000
    assert outcome["growth_kib"] < 64 * 1024, f"host ru_maxrss grew by {outcome['growth_kib']} KiB"
    if sandbox.name == "docker":  # this run's containers (tests beside this one may have their own)
        mine = {"ancestor": sandbox.image, "label": f"{OWNER_LABEL}={outcome['pid']}"}
        assert sandbox.client.containers.list(all=True, filters=mine) == []


# -- wall clock and leftovers --------------------------------------------------------------------------
def test_a_sleeper_ignoring_termination_signals_hits_the_timeout(sandbox):
    """A sleeper that ignores SIGTERM, SIGINT and SIGHUP past timeout_s: limit "timeout", and the run ends promptly."""
    code = _code("""
        import signal, time
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            time.sleep(0.05)
    """)
    result = sandbox.run_python(code, limits=Limits(timeout_s=1.5))
    assert result.timed_out and result.limit == "timeout" and result.duration_s < 8


def test_closing_stdout_and_stderr_does_not_escape_the_timeout(sandbox):
    """A program closes its stdout and stderr (the host's readers see EOF) and sleeps on: limit "timeout", run() returns promptly."""
    started = time.monotonic()
    result = sandbox.run_python("import os, time\nos.close(1)\nos.close(2)\ntime.sleep(30)", limits=Limits(timeout_s=2))
    assert result.timed_out and result.limit == "timeout" and time.monotonic() - started < 15


def test_a_double_forked_daemon_does_not_survive_the_run(sandbox):
    """A program double-forks a daemon (new session, stdout still open) and exits: no process with its marker is left."""
    marker = _marker()
    code = _code(
        """
        import os, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(20)", @marker@])
            os._exit(0)
        os.wait()
        print("parent exits")
        """,
        marker=marker,
    )
    try:
        sandbox.run_python(code, limits=Limits(timeout_s=10))
        time.sleep(0.5)
        survivors = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    finally:
        for pid in subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)  # only the test's own daemon, by its id
    assert survivors == []


# -- the filesystem: nothing of the host but read-only system paths ----------------------------------
def test_project_source_is_not_readable(sandbox):
    """The program tries to read the project's source on the host: it does not exist or is unreadable."""
    code = _code(
        """
        import os
        try:
            print("READ", len(open(os.path.join(@project@, "__init__.py")).read()))
        except OSError as error:
            print("blocked", error.errno)
        """,
        project=PROJECT,
    )
    result = sandbox.run_python(code)
    assert "blocked" in result.stdout and "READ" not in result.stdout


def test_hidden_tests_of_code_tasks_cannot_be_found(sandbox):
    """The program walks the whole filesystem for code_tasks.py (the code-repair tasks' hidden tests): none is readable."""
    assert os.path.exists(os.path.join(PROJECT, "envs", "code_tasks.py"))
    code = _code("""
        import os
        readable = []
        for root, dirs, files in os.walk("/", onerror=lambda error: None):
            if root == "/":
                dirs[:] = [d for d in dirs if d not in ("proc", "sys")]
            if "code_tasks.py" in files:
                path = os.path.join(root, "code_tasks.py")
                try:
                    with open(path) as handle:
                        handle.read(100)
                    readable.append(path)
                except OSError:
                    pass
        print("READABLE", readable)
    """)
    result = sandbox.run_python(code, limits=Limits(timeout_s=60))
    assert result.stdout.strip() == "READABLE []", result.stdout[-1000:] + result.stderr[-1000:]


def test_a_world_readable_host_file_in_var_tmp_is_not_readable(sandbox):
    """The host writes a 0644 file in /var/tmp; the program tries to read it: its content never comes out."""
    marker = _marker()
    fd, path = tempfile.mkstemp(dir="/var/tmp", prefix="sandbox-attack-")
    os.write(fd, marker.encode())
    os.close(fd)
    os.chmod(path, 0o644)
    try:
        result = sandbox.run_python(f"print(open({path!r}).read())")
    finally:
        os.unlink(path)
    assert marker not in result.stdout and result.exit_code != 0


def test_another_runs_work_dir_is_not_readable(sandbox, private_root):
    """While run A sleeps, the host plants a 0644 file in A's work dir; a second run B tries to read it: it cannot."""
    marker = _marker()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(sandbox.run_python, "import time\ntime.sleep(8)", files={"run-a.txt": "a"}, limits=Limits(timeout_s=20))
        planted, deadline = [], time.monotonic() + 15
        while not planted and time.monotonic() < deadline and not first.done():
            for directory, _, names in os.walk(private_root):
                if "run-a.txt" in names:
                    path = os.path.join(directory, "planted.txt")
                    with open(path, "w") as handle:
                        handle.write(marker)
                    os.chmod(path, 0o644)
                    planted.append(path)
            time.sleep(0.05)
        assert planted, "the host found no work directory of run A under workdir_root"
        code = _code(
            """
            for path in @planted@:
                try:
                    print("READ", open(path).read())
                except OSError as error:
                    print("blocked", error.errno)
            """,
            planted=planted,
        )
        second = sandbox.run_python(code)
        first.result(timeout=60)
    assert "blocked" in second.stdout and marker not in second.stdout


@pytest.mark.parametrize("directory", ["/usr", "/etc", "/"])
def test_system_directories_are_not_writable(sandbox, directory):
    """The program tries to create a file in /usr, /etc or /: it fails (and nothing appears on the host)."""
    target = os.path.join(directory, _marker())
    code = _code(
        """
        try:
            open(@target@, "w").write("pwned")
            print("WROTE")
        except OSError as error:
            print("blocked", error.errno)
        """,
        target=target,
    )
    try:
        result = sandbox.run_python(code)
        assert "blocked" in result.stdout and "WROTE" not in result.stdout
        assert not os.path.exists(target)
    finally:
        if os.path.exists(target):
            os.unlink(target)


# -- sockets and network ----------------------------------------------------------------------------
def test_a_host_unix_socket_at_a_0777_path_is_not_connectable(sandbox):
    """The host listens on a 0777 Unix socket in /var/tmp; the program tries to connect: it fails and nothing arrives."""
    path = os.path.join("/var/tmp", _marker() + ".sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(8)
    code = _code(
        """
        import socket
        try:
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(@path@)
            print("CONNECTED")
        except OSError as error:
            print("blocked", error.errno)
        """,
        path=path,
    )
    try:
        result = sandbox.run_python(code)
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
        os.unlink(path)
    assert "blocked" in result.stdout and "CONNECTED" not in result.stdout


def test_a_host_abstract_unix_socket_is_not_connectable(sandbox):
    """The host listens on an abstract-namespace Unix socket; the program tries to connect: it fails."""
    name = "\0" + _marker()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(name)
    server.listen(8)
    code = _code(
        """
        import socket
        try:
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(@name@)
            print("CONNECTED")
        except OSError as error:
            print("blocked", error.errno)
        """,
        name=name,
    )
    try:
        result = sandbox.run_python(code)
    finally:
        server.close()
    assert "blocked" in result.stdout and "CONNECTED" not in result.stdout


def test_a_host_tcp_port_on_loopback_is_not_reachable(sandbox):
    """The host listens on 127.0.0.1; the program tries to connect to that port: it fails."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    code = _code(
        """
        import socket
        try:
            socket.create_connection(("127.0.0.1", @port@), timeout=3)
            print("CONNECTED")
        except OSError as error:
            print("blocked", error.errno)
        """,
        port=port,
    )
    try:
        result = sandbox.run_python(code)
    finally:
        server.close()
    assert "blocked" in result.stdout and "CONNECTED" not in result.stdout


def test_no_network_interface_but_loopback(sandbox):
    """The program lists its network interfaces: there is none but lo."""
    result = sandbox.run_python("import socket\nprint('interfaces', *sorted(name for _, name in socket.if_nameindex()))")
    assert result.ok and result.stdout.startswith("interfaces") and set(result.stdout.split()[1:]) <= {"lo"}


# -- IPC and keyrings: nothing shared between runs ----------------------------------------------------
IPC_KINDS = {  # create (0666: only visibility protects it), look up without creating, remove
    "shm": ("libc.shmget(KEY, 4096, 0o1666)", "libc.shmget(KEY, 0, 0)", "libc.shmctl(ident, 0, None)"),
    "msg": ("libc.msgget(KEY, 0o1666)", "libc.msgget(KEY, 0)", "libc.msgctl(ident, 0, None)"),
    "mq": ("libc.mq_open(NAME, 0o102, 0o666, None)", "libc.mq_open(NAME, 0o2)", "libc.mq_unlink(NAME)"),
}


@pytest.mark.parametrize("kind", list(IPC_KINDS))
def test_ipc_objects_of_one_run_are_invisible_to_a_concurrent_run(sandbox, kind):
    """Run A creates a SysV shm segment / SysV message queue / POSIX message queue and sleeps; run B looks it up: absent."""
    key = random.randrange(0x10000000, 0x70000000)
    create, find, remove = IPC_KINDS[kind]
    head = f"import ctypes, time\nlibc = ctypes.CDLL(None, use_errno=True)\nKEY = {key}\nNAME = b'/envharness-attack-{key}'\n"
    creator = head + f"ident = {create}\nprint('created', ident, flush=True)\ntime.sleep(6)\nif ident >= 0:\n    {remove}\n"
    seeker = head + f"ident = {find}\nprint('visible' if ident >= 0 else 'absent', ident, ctypes.get_errno())\n"
    try:
        first, second = _in_parallel(
            lambda: sandbox.run_python(creator, limits=Limits(timeout_s=20)),
            lambda: sandbox.run_python(seeker, limits=Limits(timeout_s=20)),
            delay_s=2.0,
        )
    finally:  # without IPC namespaces the object would outlive the run on the host
        if kind == "mq":
            ctypes.CDLL(None).mq_unlink(f"/envharness-attack-{key}".encode())
        else:
            subprocess.run(["ipcrm", "-M" if kind == "shm" else "-Q", str(key)], capture_output=True)
    created = _numbers(r"created (-?\d+)", first.stdout)
    assert created and created[0] >= 0, first.stdout + first.stderr[-500:]
    assert second.stdout.startswith("absent"), second.stdout


def test_a_key_in_the_user_keyring_does_not_reach_the_next_run(sandbox):
    """Run A adds a key to the user keyring (@u) with add_key; the next run searches @u for it: refused or absent."""
    description, payload = _marker(), _marker()
    head = _code("""
        import ctypes, platform
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
        USER_KEYRING = ctypes.c_long(-4)
    """)
    adder = head + _code(
        """
        serial = libc.syscall(ADD_KEY, b"user", @description@.encode(), @payload@.encode(), ctypes.c_size_t(len(@payload@)), USER_KEYRING)
        print("added", serial, ctypes.get_errno())
        if serial > 0:
            libc.syscall(KEYCTL, ctypes.c_long(15), ctypes.c_long(serial), ctypes.c_long(60))  # expire within a minute
        """,
        description=description,
        payload=payload,
    )
    seeker = head + _code(
        """
        found = libc.syscall(KEYCTL, ctypes.c_long(10), USER_KEYRING, b"user", @description@.encode(), ctypes.c_long(0))
        print("FOUND" if found > 0 else "ABSENT", found, ctypes.get_errno())
        if found > 0:
            buffer = ctypes.create_string_buffer(256)
            size = libc.syscall(KEYCTL, ctypes.c_long(11), ctypes.c_long(found), buffer, ctypes.c_long(256))
            print("payload", buffer.raw[: max(size, 0)].decode(errors="replace"))
        """,
        description=description,
    )
    sandbox.run_python(adder)
    result = sandbox.run_python(seeker)
    assert result.stdout.startswith("ABSENT") and payload not in result.stdout, result.stdout + result.stderr[-500:]


# -- users ------------------------------------------------------------------------------------------
def test_the_program_is_not_root_and_cannot_become_root(sandbox):
    """The program reports its uid and tries setuid(0), setresuid(0, 0, 0) and seteuid(0): never root."""
    code = _code("""
        import os
        print("uid", os.getuid(), os.geteuid())
        for attempt in (lambda: os.setuid(0), lambda: os.setresuid(0, 0, 0), lambda: os.seteuid(0)):
            try:
                attempt()
                print("BECAME ROOT")
            except OSError as error:
                print("denied", error.errno)
        print("after", os.getuid(), os.geteuid())
    """)
    result = sandbox.run_python(code)
    pairs = re.findall(r"^(?:uid|after) (\d+) (\d+)$", result.stdout, flags=re.M)
    assert len(pairs) == 2 and all(int(n) != 0 for pair in pairs for n in pair)
    assert "BECAME ROOT" not in result.stdout and result.stdout.count("denied") == 3


def test_consecutive_runs_get_different_uids():
    """Subprocess backend: two runs in a row run as two different (non-root) uids, so nothing one leaves is the other's."""
    sandbox = SubprocessSandbox()
    first, second = (sandbox.run_python("import os\nprint(os.getuid())") for _ in range(2))
    uids = [int(first.stdout.strip()), int(second.stdout.strip())]
    assert 0 not in uids and uids[0] != uids[1]


# -- stdin and /proc --------------------------------------------------------------------------------
def test_stdin_is_empty_and_not_the_callers(sandbox):
    """The caller's stdin is a pipe holding data (and still open); the program reads stdin: EOF at once, no hang."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"HOST-STDIN-SECRET\n")
        code = "import sys\nprint(repr(sys.stdin.read()))"
        outcome = _fresh(sandbox.name, code, {"timeout_s": 5}, stdin=read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert outcome["stdout"].strip() == "''" and not outcome["timed_out"], outcome


def test_proc_shows_only_the_runs_own_processes(sandbox):
    """A host process carries a marker in its argv and environment; the program scans /proc: no trace of it, no host PID 1."""
    marker = _marker()
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker], env={**os.environ, "ATTACK_MARKER": marker})
    code = _code(
        """
        import os
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        seen = []
        for pid in pids:
            for name in ("cmdline", "environ"):
                try:
                    if @marker@.encode() in open(f"/proc/{pid}/{name}", "rb").read():
                        seen.append((pid, name))
                except OSError:
                    pass
        try:
            first = open("/proc/1/environ", "rb").read().hex()
        except OSError:
            first = ""
        print("SEEN", seen)
        print("PIDS", len(pids))
        print("ENV1", first)
        """,
        marker=marker,
    )
    try:
        time.sleep(0.2)
        result = sandbox.run_python(code)
    finally:
        helper.kill()
        helper.wait()
    try:
        with open("/proc/1/environ", "rb") as handle:
            host_init = handle.read()
    except OSError:
        host_init = b""  # the host's PID 1 may belong to an enclosing namespace even root cannot read
    assert "SEEN []" in result.stdout and _numbers(r"PIDS (\d+)", result.stdout)[0] <= 8
    assert not host_init or host_init.hex() not in result.stdout


def test_the_host_environment_does_not_leak_in(sandbox, monkeypatch):
    """A secret in the caller's environment: the program prints its whole environment, and the secret is not there."""
    marker = _marker()
    monkeypatch.setenv("ENVHARNESS_ATTACK_SECRET", marker)
    result = sandbox.run_python("import os\nprint(dict(os.environ))")
    assert result.ok and marker not in result.stdout


# -- weak isolation must be asked for -------------------------------------------------------------


def _as_nobody(python: str, script: str, pythonpath: str, home: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": pythonpath, "HOME": home, "LANG": "C.UTF-8"}
    # through sh, so that the interpreter's path is resolved with uid 65534's rights only (setpriv may still hold capabilities)
    command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c", 'exec "$@"', "sh", python, "-c", script]
    return subprocess.run(command, env=env, cwd=home, capture_output=True, text=True, timeout=120)


NOBODY_PROBE = "import subprocess, sys, envharness.sandbox\nsubprocess.run([sys.executable, '-c', 'pass'], check=True)\nprint('usable', envharness.__file__)"


def _nobody_python(home: str) -> tuple[str, str]:
    """An interpreter and PYTHONPATH with which uid 65534 imports this envharness and can start the interpreter again."""
    copy = os.path.join(home, "src")  # a world-readable copy of the package, for when the repo is not readable by others
    shutil.copytree(PROJECT, os.path.join(copy, "envharness"), ignore=shutil.ignore_patterns("__pycache__"))
    for directory, _, names in os.walk(home):
        os.chmod(directory, 0o755)
        for name in names:
            os.chmod(os.path.join(directory, name), 0o644)
    os.chmod(home, 0o777)
    site_packages = [path for path in sys.path if path.endswith("site-packages")]
    system = shutil.which("python3", path="/usr/bin:/bin")
    same_version = system and subprocess.run([system, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
    own, copied = os.path.join(PROJECT, "__init__.py"), os.path.join(copy, "envharness", "__init__.py")
    candidates = [(sys.executable, os.path.dirname(PROJECT), own), (sys.executable, copy, copied)]
    if same_version and same_version.stdout.strip() == str(sys.version_info[:2]):  # the venv's interpreter may be unreachable
        candidates.append((system, os.pathsep.join([copy, *site_packages]), copied))
    failures = []
    for python, pythonpath, expected in candidates:
        probe = _as_nobody(python, NOBODY_PROBE, pythonpath, home)
        if probe.returncode == 0 and probe.stdout.split()[-1:] == [expected]:
            return python, pythonpath
        failures.append(f"{python} with PYTHONPATH={pythonpath}: {(probe.stdout + probe.stderr).strip()[-300:]}")
    pytest.fail(
        "uid 65534 cannot run Python with this envharness importable; make the interpreter readable by others. " + " | ".join(failures)
    )


WEAK_PROBE = """
from envharness.sandbox import SandboxError, SubprocessSandbox
try:
    print("RAN", SubprocessSandbox().run_python("print('strict-ran')").stdout.strip())
except SandboxError as error:
    print("REFUSED", "allow_weak_isolation" in str(error))
weak = SubprocessSandbox(allow_weak_isolation=True).run_python("print('weak-ok')")
print("WEAK", weak.stdout.strip(), weak.exit_code)
"""


def test_weak_isolation_is_refused_unless_asked_for():
    """Run as uid 65534 (no root, no namespaces): SubprocessSandbox() refuses with a hint at allow_weak_isolation; opting in runs."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.fail("this test needs root and setpriv (util-linux) to run the sandbox as uid 65534")
    home = tempfile.mkdtemp(dir=SCRATCH, prefix="sandbox-attack-weak-")
    try:
        python, pythonpath = _nobody_python(home)
        done = _as_nobody(python, WEAK_PROBE, pythonpath, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert "REFUSED True" in done.stdout, done.stdout + done.stderr[-1500:]
    assert "WEAK weak-ok 0" in done.stdout, done.stdout + done.stderr[-1500:]


# -- robustness: cleanup and collect against hostile leftovers ----------------------------------------
def test_a_3000_deep_directory_tree_is_cleaned_up(sandbox, private_root):
    """The program leaves a 3000-deep directory tree: run() still returns a result, and the work directory is gone."""
    code = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nprint('deep')"
    result = sandbox.run_python(code, limits=Limits(timeout_s=30))
    assert isinstance(result, SandboxResult) and "deep" in result.stdout
    assert os.listdir(private_root) == []


def test_unwritable_dirs_and_special_files_are_cleaned_up(sandbox, private_root):
    """The program leaves chmod-0 directories with files, a FIFO and a bound Unix socket: cleanup still removes everything."""
    code = _code("""
        import os, socket
        os.makedirs("locked/inner")
        for n in range(3):
            open(f"locked/inner/f{n}", "w").write("x")
        os.mkfifo("fifo")
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).bind("sock")
        os.chmod("locked/inner", 0)
        os.chmod("locked", 0)
        os.chmod(".", 0)
        print("left")
    """)
    result = sandbox.run_python(code)
    assert "left" in result.stdout
    assert os.listdir(private_root) == []


def test_cleanup_does_not_follow_symlinks_to_the_host(sandbox, private_root, host_dir):
    """The program leaves symlinks to a host directory and a host file: cleanup removes the links, never their targets."""
    keep = os.path.join(host_dir, "keep.txt")
    with open(keep, "w") as handle:
        handle.write("keep")
    code = _code(
        "import os\nos.symlink(@host_dir@, 'victim')\nos.symlink(@keep@, 'victim-file')\nprint('linked')", host_dir=host_dir, keep=keep
    )
    result = sandbox.run_python(code)
    assert "linked" in result.stdout
    assert os.path.isfile(keep) and os.listdir(host_dir) == ["keep.txt"] and os.listdir(private_root) == []


def test_collect_does_not_follow_symlinks_to_root_only_host_files(sandbox, host_dir):
    """collect "link/secret.txt" where link -> a host directory holding a root-only file (and a direct link): no content leaks."""
    marker = _marker()
    secret = os.path.join(host_dir, "secret.txt")
    with open(secret, "w") as handle:
        handle.write(marker)
    os.chmod(secret, 0o600)
    code = _code(
        "import os\nos.symlink(@host_dir@, 'link')\nos.symlink(@secret@, 'direct.txt')\nprint('linked')", host_dir=host_dir, secret=secret
    )
    result = sandbox.run_python(code, collect=("link/secret.txt", "direct.txt"))
    assert "linked" in result.stdout
    assert all(marker not in content for content in result.files.values())


def test_collecting_a_fifo_or_a_device_link_does_not_hang(sandbox):
    """The program leaves a FIFO and a symlink to /dev/zero under names the caller collects: run() returns promptly."""
    code = "import os\nos.mkfifo('out.txt')\nos.symlink('/dev/zero', 'zero.txt')\nprint('planted')"
    outcome: list[SandboxResult] = []
    worker = threading.Thread(target=lambda: outcome.append(sandbox.run_python(code, collect=("out.txt", "zero.txt"))), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and outcome and "planted" in outcome[0].stdout
    assert all(len(content) <= Limits().output_bytes for content in outcome[0].files.values())


def test_collecting_a_huge_file_returns_at_most_output_bytes(sandbox):
    """The program writes a 50 MB file the caller collects, with output_bytes=100_000: at most 100_000 characters come back."""
    code = "open('big.txt', 'w').write('y' * 50_000_000)\nprint('written')"
    result = sandbox.run_python(code, limits=Limits(output_bytes=100_000, disk_mb=128, memory_mb=512), collect=("big.txt",))
    assert "written" in result.stdout and len(result.files.get("big.txt", "")) <= 100_000


# -- host safety -----------------------------------------------------------------------------------
def test_writing_outside_the_work_dir_leaves_the_host_untouched(sandbox):
    """The program tries to write into the test directory, /var/tmp and the work dir's parent: nothing appears anywhere."""
    name = _marker()
    targets = [os.path.join(os.path.dirname(os.path.abspath(__file__)), name), os.path.join("/var/tmp", name)]
    code = _code(
        """
        import os
        for target in @targets@ + [os.path.join(os.path.dirname(os.getcwd()), @name@)]:
            try:
                open(target, "w").write("pwned")
                print("WROTE", target)
            except OSError as error:
                print("blocked", error.errno)
        """,
        targets=targets,
        name=name,
    )
    try:
        result = sandbox.run_python(code)
        leaked = [path for path in targets if os.path.exists(path)]
    finally:
        for path in targets:
            if os.path.exists(path):
                os.unlink(path)
    assert result.stdout.count("blocked") == 3 and "WROTE" not in result.stdout and leaked == []


def test_the_docker_socket_is_not_reachable(sandbox):
    """The program tries to talk to the Docker engine through /var/run/docker.sock or /run/docker.sock: it cannot connect."""
    code = _code("""
        import socket
        for path in ("/var/run/docker.sock", "/run/docker.sock"):
            try:
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.connect(path)
                client.sendall(b"GET /version HTTP/1.0\\r\\n\\r\\n")
                print("CONNECTED", client.recv(200))
            except OSError as error:
                print("blocked", error.errno)
    """)
    result = sandbox.run_python(code)
    assert result.stdout.count("blocked") == 2 and "CONNECTED" not in result.stdout


def test_etc_shadow_is_not_readable(sandbox):
    """The program tries to read /etc/shadow: it cannot."""
    code = "try:\n    print('READ', open('/etc/shadow').read())\nexcept OSError as error:\n    print('blocked', error.errno)"
    result = sandbox.run_python(code)
    assert "blocked" in result.stdout and "READ" not in result.stdout


def test_planted_modules_in_the_work_dir_never_run_privileged(sandbox, host_dir):
    """The run's files include sitecustomize.py, usercustomize.py and shadows of envharness/stdlib modules: none runs as root."""
    os.chmod(host_dir, 0o700)  # only a root process on the host could write here
    witness = os.path.join(host_dir, "planted-ran")
    planted = _code(
        """
        import os
        for target in (@witness@, "/work/planted-ran.txt", os.path.join(os.getcwd(), "planted-ran.txt")):
            try:
                with open(target, "a") as handle:
                    handle.write(f"{os.getuid()} {__name__}\\n")
            except OSError:
                pass
        """,
        witness=witness,
    )
    names = [
        "sitecustomize.py", "usercustomize.py", "envharness/__init__.py", "envharness/sandbox/__init__.py",
        "envharness/sandbox/subprocess_backend.py", "envharness/sandbox/supervisor.py", "json.py", "ctypes.py", "resource.py",
        "signal.py", "subprocess.py", "shutil.py", "tempfile.py", "docker.py",
    ]  # fmt: skip
    result = sandbox.run_python("print('hello')", files=dict.fromkeys(names, planted), collect=("planted-ran.txt",))
    assert result.ok and result.stdout.strip() == "hello"
    assert not os.path.exists(witness)
    ran_as = [line.split()[0] for line in result.files.get("planted-ran.txt", "").splitlines()]
    assert "0" not in ran_as, ran_as


# -- found by a red-team pass after the suite was written ------------------------------------------
def test_the_keyring_syscalls_are_refused(sandbox):
    """add_key with a world-readable key would carry data to later runs (keys live per uid, outside namespaces): refused."""
    code = _code(
        """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        numbers = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]
        key = libc.syscall(numbers[0], b"user", b"stash", b"data", 4, -4)
        print("add_key", key, ctypes.get_errno())
        print("keyctl", libc.syscall(numbers[1], 0, -4, 0), ctypes.get_errno())
        """
    )
    result = sandbox.run_python(code)
    assert result.ok, result.stderr
    assert result.stdout.split() == ["add_key", "-1", "1", "keyctl", "-1", "1"]  # -1 and EPERM both times


def test_the_supervisor_command_line_shows_no_host_path_or_limit(sandbox):
    """/proc/1/cmdline is readable by the command: it names a settings file it cannot read, nothing about the host."""
    result = sandbox.run_python(
        "import os\nline = open('/proc/1/cmdline', 'rb').read().decode()\nprint(line.replace(chr(0), ' '))\n"
        "path = line.split(chr(0))[-2]\ntry:\n    open(path).read()\n    print('READ')\nexcept OSError:\n    print('blocked')"
    )
    assert result.ok and "blocked" in result.stdout and "READ" not in result.stdout
    assert PROJECT not in result.stdout and "memory_mb" not in result.stdout


def test_a_file_of_exactly_file_mb_is_not_a_limit(sandbox):
    """A program writes a file of exactly file_mb, then exits 1 on its own: the kernel refused nothing, so no limit."""
    result = sandbox.run_python("open('f', 'wb').write(b'x' * 2**20)\nraise SystemExit(1)", limits=Limits(file_mb=1))
    assert result.exit_code == 1 and result.limit is None


def test_a_nearly_full_disk_is_not_a_limit(sandbox):
    """Writing 60 of 64 MiB succeeds; the run is fine and is reported fine."""
    result = sandbox.run_python("open('/tmp/f', 'wb').write(b'x' * 60 * 2**20)", limits=Limits(disk_mb=64, memory_mb=256))
    assert result.ok and result.limit is None


def test_killing_itself_just_short_of_the_cpu_limit_is_not_a_cpu_limit(sandbox):
    """Burning 90% of cpu_s then SIGKILLing itself: the kernel did not stop it for CPU, so no "cpu"."""
    code = "import os, time\nstart = time.process_time()\nwhile time.process_time() - start < 0.9:\n    pass\nos.kill(os.getpid(), 9)"
    result = sandbox.run_python(code, limits=Limits(cpu_s=1, timeout_s=20))
    assert result.signal == 9 and result.limit is None
