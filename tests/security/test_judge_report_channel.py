"""Attacks on the judge's report channel (issue 27, class 5).

Root cause: the probe runner ran the agent's module in its own process and printed its
reports on the stdout the module shares, in a format the module could read off the probe
file in its work dir; the host kept the first report of each test. So a module could read
every hidden test's steps, compute the right values with a correct implementation it
keeps to itself, print those reports first, and export a wrong function: the verdict then
certified code that was never submitted. The rule now: the process whose reports count
never runs the agent's code; each test's code runs in a fresh interpreter that sees only
that test's steps and can write only to its own pipe; the probe file is gone before any
agent code runs; and the host accepts only report lines carrying a per-run secret that no
process running agent code can read (the runner is undumpable). Each attack below pairs a
wrong exported function with a way to make the verdict say "pass" anyway.
"""

from __future__ import annotations

import json

import pytest

import envharness
from envharness.envs.code_repair import PROBE_FILE, run_tests, verify
from envharness.envs.code_tasks import TASKS

TASK = {t.name: t for t in TASKS}["add"]

# Reads the probe program, runs every test's steps with a correct add bound in its place, and
# prints the reports the runner would print, before anything else; then exports a wrong add.
FORGE_FROM_PROBE_FILE = r"""
import json as _json, os as _os, sys as _sys

def _encode(v):
    if isinstance(v, bool):
        return ["bool", v]
    if isinstance(v, int):
        return ["int", repr(v)]
    return ["object", "?"]

def _forge(write):
    try:
        program = _json.load(open("_probes.json"))
    except OSError:
        return
    me = _sys.modules[__name__]
    me.add = lambda a, b: a + b
    for test in program["tests"]:
        scope, values = {"__name__": "test_module"}, []
        exec(program["module"], scope)
        for kind, source in test["steps"]:
            if kind == "exec":
                exec(source, scope)
            else:
                values.append(_encode(eval(source, scope)))
        line = _json.dumps({"name": test["name"], "values": values, "error": None})
        for prefix in ("PROBES ", "PROBES " + program.get("secret", "") + " "):
            write((prefix + line + "\n").encode())

_forge(lambda data: _os.write(1, data))

def add(a, b):
    return a - b
"""

# Without the probe file: the module knows the test names and the answers (this task is
# public), and writes its reports to every descriptor and every stream it can reach: its
# own fd 1 and 2, the runner's through /proc, and the parent's terminal.
FORGE_EVERYWHERE = r"""
import json as _json, os as _os

_names = ["test_add_negative", "test_add_zero", "test_add_small"]
_values = {"test_add_negative": [["int", "-5"]], "test_add_zero": [["int", "7"]], "test_add_small": [["int", "5"]]}

def _lines(secret=""):
    for name in _names:
        line = _json.dumps({"name": name, "values": _values[name], "error": None})
        yield ("PROBES " + line + "\n").encode()
        yield ("PROBES " + secret + " " + line + "\n").encode()

def _secret():
    # The runner's secret, if its memory or its files could be read.
    for path in ("/proc/%d/environ" % _os.getppid(), "/proc/%d/cmdline" % _os.getppid()):
        try:
            open(path, "rb").read()
        except OSError:
            pass
    try:
        with open("/proc/%d/mem" % _os.getppid(), "rb") as mem:
            mem.read(1)
    except (OSError, ValueError):
        pass
    return ""

_secret_text = _secret()
for _fd in (0, 1, 2, 3, 4, 5):
    for _line in _lines(_secret_text):
        try:
            _os.write(_fd, _line)
        except OSError:
            pass
for _fd in range(0, 8):
    _path = "/proc/%d/fd/%d" % (_os.getppid(), _fd)
    try:
        with open(_path, "wb", buffering=0) as _out:
            for _line in _lines(_secret_text):
                _out.write(_line)
    except OSError:
        pass

def add(a, b):
    return a - b
"""

# The probe program names the hidden tests and their inputs; a module that can read it can
# choose by it. This one is right only where it can read the file.
READS_THE_PROBE_FILE = r"""
import os as _os

_seen = _os.path.exists("_probes.json")

def add(a, b):
    return a + b if _seen else a - b
"""

# Kills the runner, so that no honest report is ever printed, after printing its own.
KILLS_THE_RUNNER = FORGE_EVERYWHERE.replace("def add(a, b):", "_os.kill(_os.getppid(), 9)\n\ndef add(a, b):")

# Leaves a process behind that prints reports for the tests after its own.
LEAVES_A_PRINTER_BEHIND = FORGE_EVERYWHERE.replace(
    "def add(a, b):",
    "if _os.fork() == 0:\n    _os.setsid()\n    import time as _t\n    for _ in range(40):\n"
    "        for _fd in (1, 2):\n            for _line in _lines():\n                try:\n                    _os.write(_fd, _line)\n"
    "                except OSError:\n                    pass\n        _t.sleep(0.05)\n    _os._exit(0)\n\ndef add(a, b):",
)

# Right only where it can read the runner's memory or open the runner's descriptors.
READS_THE_RUNNER = r"""
import os as _os

def _reach():
    parent = _os.getppid()
    for path, mode in (("/proc/%d/environ" % parent, "rb"), ("/proc/%d/mem" % parent, "rb"), ("/proc/%d/fd/1" % parent, "wb")):
        try:
            with open(path, mode, buffering=0):
                return True
        except OSError:
            pass
    return False

_reached = _reach()

def add(a, b):
    return a + b if _reached else a - b
"""

ATTACKS = {
    "reads-the-runner": READS_THE_RUNNER,
    "forge-from-probe-file": FORGE_FROM_PROBE_FILE,
    "forge-on-every-descriptor": FORGE_EVERYWHERE,
    "reads-the-probe-file": READS_THE_PROBE_FILE,
    "kills-the-runner": KILLS_THE_RUNNER,
    "leaves-a-printer-behind": LEAVES_A_PRINTER_BEHIND,
}


def judge(source: str, backend: str = "subprocess") -> dict[str, str]:
    return run_tests({TASK.path: source}, TASK.hidden_tests, "test_hidden_suite.py", backend, detail=True)


@pytest.mark.parametrize("name", ATTACKS)
def test_a_wrong_add_that_forges_reports_fails_every_hidden_test(name):
    outcome = judge(ATTACKS[name])
    assert outcome and all(v != "pass" for v in outcome.values()), outcome
    assert verify({TASK.path: ATTACKS[name]}, TASK.hidden_tests) == (False, 0, len(outcome))


def test_the_forger_would_pass_if_the_runner_shared_its_channel():
    # Proves the attack is real: run with the module's own reports counted (the old runner's rule,
    # done by hand here), the forged values are the right ones.
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from envharness.envs.code_repair import compile_suite

    module, judged = compile_suite(TASK.hidden_tests, strict=True)
    work = Path(tempfile.mkdtemp())
    (work / TASK.path).write_text(FORGE_FROM_PROBE_FILE)
    (work / PROBE_FILE).write_text(json.dumps({"module": module, "tests": [{"name": t.name, "steps": t.steps} for t in judged]}))
    done = subprocess.run([sys.executable, "-c", "import calc"], cwd=work, capture_output=True, text=True, timeout=60)
    forged = [json.loads(line[len("PROBES ") :]) for line in done.stdout.splitlines() if line.startswith("PROBES {")]
    assert {f["name"]: f["values"] for f in forged} == {
        "test_add_negative": [["int", "-5"]],
        "test_add_zero": [["int", "7"]],
    }


def test_what_the_agents_code_prints_never_breaks_judging():
    noisy = (
        "import sys\nprint('PROBES garbage' * 1000)\nsys.stderr.write('x' * 100000)\n\ndef add(a, b):\n    print(a, b)\n    return a + b\n"
    )
    assert set(judge(noisy).values()) == {"pass"}


def test_one_hanging_test_fails_alone():
    tests = (
        "from calc import add\n\ndef test_fast():\n    assert add(1, 2) == 3\n\n"
        "def test_hangs():\n    assert add(-1, 0) == -1\n\ndef test_fast_too():\n    assert add(2, 2) == 4\n"
    )
    source = "def add(a, b):\n    while a < 0:\n        pass\n    return a + b\n"
    outcome = run_tests({TASK.path: source}, tests, "test_hidden_suite.py", "subprocess", detail=True)
    assert outcome["test_fast"] == "pass" and outcome["test_hangs"].startswith("fail")
    assert outcome["test_fast_too"] == "pass"
    assert "ran out of time" in outcome["test_hangs"]


def test_the_reports_through_the_env_are_the_same():
    env = envharness.wrap("envharness/CodeRepair-v0", task="add")
    env.reset(seed=0)
    lines = FORGE_FROM_PROBE_FILE.strip("\n").splitlines()
    env.step(json.dumps({"tool": "replace", "path": "calc.py", "start": 1, "end": 2, "text": "\n".join(lines)}))
    *_, info = env.step(json.dumps({"tool": "submit"}))
    assert info["verdict"].success is False


@pytest.mark.parametrize("name", ["forge-from-probe-file", "forge-on-every-descriptor", "reads-the-probe-file", "reads-the-runner"])
def test_docker_a_wrong_add_that_forges_reports_fails(name):
    outcome = judge(ATTACKS[name], backend="docker")
    assert outcome and all(v != "pass" for v in outcome.values()), outcome
