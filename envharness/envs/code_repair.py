"""A code-repair benchmark: fix a small Python bug with tools; hidden tests judge in a sandbox.

Contains :class:`CodeRepairEnv`, :func:`verify` (the hidden-test verifier) and the test
runner it sends into the sandbox. Actions are JSON tool calls (a ``Text`` space, as an
LLM agent would emit them)::

    {"tool": "list"}
    {"tool": "view", "path": "calc.py"}
    {"tool": "replace", "path": "calc.py", "start": 2, "end": 2, "text": "    return a + b"}
    {"tool": "run_tests"}                       # the visible tests
    {"tool": "submit"}                          # the hidden tests decide; the episode ends

Observations are text: the task, then the last tool's output. Success means every hidden
test passes (fail-to-pass and pass-to-pass), run in the sandbox (``subprocess`` or
``docker``) on the agent's files with the pristine hidden tests written last, so no file
the agent writes can replace them.
"""

from __future__ import annotations

import ast
import json
import secrets
import string
from functools import lru_cache
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from envharness.envs.code_tasks import TASKS, CodeTask

TOOLS = ("list", "view", "replace", "run_tests", "submit")
CHARSET = "".join(sorted(set(string.printable) - set("\x0b\x0c")))
OBS_LIMIT = 8000
HIDDEN_FILE = "test_hidden_suite.py"
VISIBLE_FILE = "test_visible.py"

# Ours, written into the sandbox after the agent's files. It reads the nonce and keeps its
# own references to what it reports with before any agent code is imported.
RUNNER = r"""
import importlib, json, sys, traceback
nonce = sys.stdin.readline().strip()
dumps, write = json.dumps, sys.__stdout__.write
results = {}
try:
    module = importlib.import_module(sys.argv[1])
    names = sorted(n for n in vars(module) if n.startswith("test_") and callable(getattr(module, n)))
except BaseException:
    names, results["<import>"] = [], "error: " + traceback.format_exc(limit=3)[-600:]
for name in names:
    try:
        getattr(module, name)()
        results[name] = "pass"
    except BaseException:
        results[name] = "fail: " + traceback.format_exc(limit=3)[-600:]
write("\nRESULT " + nonce + " " + dumps(results) + "\n")
"""


def suite_tests(source: str) -> list[str]:
    """The test functions a test module defines, read without running it."""
    return sorted(node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"))


def run_tests(files: dict[str, str], tests: str, test_file: str, backend: str) -> dict[str, str]:
    """Run ``tests`` against ``files`` in a sandbox; test name -> "pass" or the failure."""
    from envharness.sandbox import Limits, get_sandbox

    nonce = secrets.token_hex(16)
    sandbox = get_sandbox(backend)
    payload = {**files, test_file: tests, "_runner.py": RUNNER}  # ours last: they overwrite anything the agent wrote
    module = test_file.removesuffix(".py")
    result = sandbox.run(
        ["sh", "-c", f"echo {nonce} | python3 _runner.py {module}"], payload, Limits(timeout_s=15, memory_mb=256, cpu_s=10)
    )
    marker = f"RESULT {nonce} "
    line = next((out for out in reversed(result.stdout.splitlines()) if out.startswith(marker)), None)
    if line is None:
        reason = result.limit or (result.stderr.strip().splitlines() or ["no result"])[-1]
        return {name: f"fail: the test run did not finish ({reason})" for name in suite_tests(tests)}
    reported = json.loads(line[len(marker) :])
    # Only the tests the suite defines count, and a missing one fails.
    return {name: reported.get(name, "fail: not run") for name in suite_tests(tests)} | (
        {"<import>": reported["<import>"]} if "<import>" in reported else {}
    )


@lru_cache(maxsize=4096)
def _verify_cached(files_json: str, hidden: str, backend: str) -> tuple[bool, int, int]:
    outcome = run_tests(json.loads(files_json), hidden, HIDDEN_FILE, backend)
    passed = sum(v == "pass" for v in outcome.values())
    return passed == len(outcome) and bool(outcome), passed, len(outcome)


def verify(files: dict[str, str], hidden_tests: str, backend: str = "subprocess") -> tuple[bool, int, int]:
    """(all hidden tests pass, passed, total) for ``files``; cached on content."""
    return _verify_cached(json.dumps(files, sort_keys=True), hidden_tests, backend)


class CodeRepairEnv(gym.Env):
    """Repair one of twenty buggy Python modules with file tools; hidden tests run in a sandbox.

    Args:
        task: a task name to always use; by default each reset picks one from its seed.
        sandbox: ``subprocess`` or ``docker``: where tests run.
        output_limit: characters of tool output shown.

    Example:
        >>> import json
        >>> env = CodeRepairEnv(task="add")
        >>> obs, info = env.reset(seed=0)
        >>> obs, *_ = env.step(json.dumps({"tool": "replace", "path": "calc.py", "start": 2, "end": 2, "text": "    return a + b"}))
        >>> obs, reward, terminated, truncated, info = env.step(json.dumps({"tool": "submit"}))
        >>> reward, terminated, info["hidden_passed"], info["hidden_total"]
        (1.0, True, 2, 2)
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self, task: str | None = None, sandbox: str = "subprocess", output_limit: int = 3000, render_mode: str | None = None
    ) -> None:
        names = [t.name for t in TASKS]
        if task is not None and task not in names:
            raise ValueError(f"task {task!r} is unknown; use one of {', '.join(names)}")
        self.fixed_task = task
        self.sandbox = sandbox
        self.output_limit = output_limit
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=OBS_LIMIT, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(max_length=4000, min_length=0, charset=CHARSET)
        self.task: CodeTask = TASKS[0]
        self.files: dict[str, str] = {}
        self.last_output = ""
        self.submitted = False
        self.hidden_result: tuple[bool, int, int] | None = None
        self.test_runs = 0

    # -- helpers -------------------------------------------------------------------------
    def _text(self, output: str) -> str:
        header = (
            f"Task: {self.task.description}\nFiles: {', '.join(sorted(self.files))}\n"
            f'Tools: {", ".join(TOOLS)} (JSON actions, e.g. {{"tool": "view", "path": "{self.task.path}"}})\n\n'
        )
        text = header + output[: self.output_limit]
        text = "".join(c if c in CHARSET else "?" for c in text)
        return text[:OBS_LIMIT]

    def observe(self) -> str:
        return self._text(self.last_output)

    def _numbered(self, path: str) -> str:
        return "\n".join(f"{i:3d}| {line}" for i, line in enumerate(self.files[path].splitlines(), start=1))

    # -- gymnasium API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if self.fixed_task is not None:
            self.task = next(t for t in TASKS if t.name == self.fixed_task)
        else:
            self.task = TASKS[int(self.np_random.integers(len(TASKS)))]
        self.files = {self.task.path: self.task.source, VISIBLE_FILE: self.task.visible_tests}
        self.last_output = "Start by viewing the module or running the visible tests."
        self.submitted, self.hidden_result, self.test_runs = False, None, 0
        return self.observe(), {"task": self.task.name}

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        info: dict[str, Any] = {}
        try:
            call = json.loads(action) if isinstance(action, str) else dict(action)
            if not isinstance(call, dict) or call.get("tool") not in TOOLS:
                raise ValueError(f"'tool' must be one of {', '.join(TOOLS)}")
            tool = call["tool"]
            info["tool"] = tool
            reward, terminated = 0.0, False
            if tool == "list":
                output = "\n".join(sorted(self.files))
            elif tool == "view":
                path = call.get("path", "")
                if path not in self.files:
                    raise ValueError(f"no file {path!r}; files: {', '.join(sorted(self.files))}")
                output = self._numbered(path)
            elif tool == "replace":
                path, start, end, text = call.get("path", ""), int(call.get("start", 0)), int(call.get("end", 0)), str(call.get("text", ""))
                if path not in self.files:
                    raise ValueError(f"no file {path!r}; files: {', '.join(sorted(self.files))}")
                lines = self.files[path].splitlines()
                if not (1 <= start <= end + 1 and end <= len(lines)):
                    raise ValueError(f"line range {start}-{end} is outside 1-{len(lines)}")
                lines[start - 1 : end] = text.splitlines()
                self.files[path] = "\n".join(lines) + "\n"
                output = f"replaced lines {start}-{end} of {path}:\n{self._numbered(path)}"
            elif tool == "run_tests":
                self.test_runs += 1
                outcome = run_tests({self.task.path: self.files[self.task.path]}, self.files[VISIBLE_FILE], VISIBLE_FILE, self.sandbox)
                passed = sum(v == "pass" for v in outcome.values())
                info["tests_passed"], info["tests_failed"] = passed, len(outcome) - passed
                output = f"{passed}/{len(outcome)} visible tests pass\n" + "\n".join(f"{k}: {v}" for k, v in outcome.items())
            else:  # submit
                self.submitted = True
                self.hidden_result = verify({self.task.path: self.files[self.task.path]}, self.task.hidden_tests, self.sandbox)
                success, passed, total = self.hidden_result
                info["hidden_passed"], info["hidden_total"] = passed, total
                reward, terminated = (1.0 if success else 0.0), True
                output = f"submitted: {passed}/{total} hidden tests pass"
        except (ValueError, TypeError, KeyError, json.JSONDecodeError) as error:
            info["tool_error"] = str(error).splitlines()[0] if str(error) else type(error).__name__
            reward, terminated = 0.0, False
            output = f"error: {info['tool_error']}"
        self.last_output = output
        return self.observe(), reward, terminated, False, info

    def render(self) -> str | None:
        return self.observe() if self.render_mode == "ansi" else None


__all__ = ["CodeRepairEnv", "TASKS", "run_tests", "verify"]
