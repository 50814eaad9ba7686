"""A code-repair benchmark: fix a small Python bug with tools; hidden tests judge in a sandbox.

Contains :class:`CodeRepairEnv`, :func:`verify` (the hidden-test verifier), and the judge
it uses: :func:`compile_suite` splits a test module into probes (the expressions that need
the agent's code) and checks (the comparisons, with the expected values), the sandbox runs
only the probes and reports their values with exact types, and the host decodes them into
plain data and runs the checks, out of reach of the agent's code. Actions are JSON tool calls (a ``Text`` space, as an
LLM agent would emit them)::

    {"tool": "list"}
    {"tool": "view", "path": "calc.py"}
    {"tool": "replace", "path": "calc.py", "start": 2, "end": 2, "text": "    return a + b"}
    {"tool": "run_tests"}                       # the visible tests
    {"tool": "submit"}                          # the hidden tests decide; the episode ends
    {"tool": "ask_human", "question": "..."}    # only with a reviewer: a human intervention

Observations are text: the task, then the last tool's output. Success means every hidden
test passes (fail-to-pass and pass-to-pass), judged from the values the agent's module
produces in the sandbox (``subprocess`` or ``docker``); the hidden tests' expected values
never enter it, and a failing hidden test is reported by count only.
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from envharness.envs.code_tasks import TASKS, CodeTask
from envharness.envs.exact import ENCODER, Opaque, decode
from envharness.toolcall import parse_tool_call

TOOLS = ("list", "view", "replace", "run_tests", "submit")
ASK_HUMAN = "ask_human"
REVIEWERS = ("hint", "fix", "silent")  # what the scripted reviewer answers ask_human with
CHARSET = "".join(sorted(set(string.printable) - set("\x0b\x0c")))
OBS_LIMIT = 8000
HIDDEN_FILE = "test_hidden_suite.py"
VISIBLE_FILE = "test_visible.py"

# Ours, written into the sandbox after the agent's files. Two programs, so that the one whose
# reports count never runs the agent's code. The runner (PROBE_RUNNER) reads the probe program,
# deletes its file, makes itself undumpable (no other process of the run's uid can read its
# memory or open its descriptors through /proc), then starts one fresh interpreter per test
# (PROBE_CHILD) with nothing but that test's steps on its stdin and no descriptor of its own
# but a pipe back. The child imports the agent's code, runs the test's statements, evaluates
# each probe (an operand of an assert that needs the agent's code) and sends the values back,
# encoded with their exact types; everything the agent's code prints goes to /dev/null. The
# runner prints each test's report once, prefixed with a per-run secret the host chose and no
# child ever sees. No program in the sandbox sees an expected value: those stay on the host,
# which decodes the values into plain data and decides. Whatever the agent's code patches,
# prints or returns, only the values it produces for its own test's probes can count.
PROBE_FILE = "_probes.json"
PROBE_SECONDS = 12.0  # the wall-clock budget of all tests together (the sandbox's own limit is 15 s)
PROBE_CHILD = (
    ENCODER
    + r"""
def _judge():
    import json, os, sys
    kind_of, text = type, str
    encode = exact_encoder()
    del globals()["exact_encoder"]  # nothing of ours stays in __main__ but the entry function
    channel = os.fdopen(os.dup(1), "w")
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    request = json.loads(sys.stdin.read())
    os.dup2(quiet, 0)

    module, steps = request.pop("module"), request.pop("steps")
    values, error = [], None
    scope = {"__name__": "test_module"}
    try:
        exec(module, scope)
        for kind, source in steps:
            if kind == "exec":
                exec(source, scope)
            else:
                try:
                    values.append(encode(eval(source, scope)))
                except Exception as raised:
                    values.append(["raised", text(kind_of(raised).__name__)[:200]])
    except BaseException as raised:
        error = (text(kind_of(raised).__name__) + ": " + text(raised))[:300]
    channel.write(json.dumps({"values": values, "error": error}) + "\n")
    channel.flush()
    os._exit(0)


_judge()
"""
)
PROBE_RUNNER = r"""
import ctypes, json, os, signal, subprocess, sys, time
with open(sys.argv[1]) as handle:
    program = json.load(handle)
os.unlink(sys.argv[1])
try:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
except Exception:
    pass
secret, child, deadline = program.pop("secret"), program.pop("child"), time.monotonic() + program.pop("seconds")


def report(data):
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    try:
        line = json.loads(lines[-1])
    except (IndexError, ValueError, RecursionError):
        return [], "the test's process sent no report"
    if not isinstance(line, dict) or not isinstance(line.get("values"), list) or not isinstance(line.get("error"), (str, type(None))):
        return [], "the test's process sent no report"
    return line["values"], line["error"]


tests = program["tests"]
for index, test in enumerate(tests):
    values, error = [], "TimeoutError: the test ran out of time"
    left = deadline - time.monotonic()
    # Each test gets its share of what is left (at least 2 s while any is): one that hangs fails alone.
    left = max(left / (len(tests) - index), min(left, 2.0))
    if left > 0:
        request = json.dumps({"module": program["module"], "steps": test["steps"]}).encode()
        proc = subprocess.Popen(
            [sys.executable, "-E", "-s", "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True,
        )
        try:
            data, _ = proc.communicate(request, timeout=left)
            values, error = report(data)
        except subprocess.TimeoutExpired:
            pass
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
    sys.stdout.write("PROBES " + secret + " " + json.dumps({"name": test["name"], "values": values, "error": error}) + "\n")
    sys.stdout.flush()
"""


def _same(a: Any, b: Any) -> bool:
    return a is b if b is None or isinstance(b, bool) else a == b


_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Is: _same,
    ast.IsNot: lambda a, b: not _same(a, b),
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


# Arithmetic the host does itself on decoded values, so a tolerance like ``abs(f(x) - 0.33) < 1e-6``
# sends only ``f(x)`` into the sandbox and its expected value stays here.
_ARITHMETIC: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: _bounded_product(a, b),
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: _plain_mod(a, b),
    ast.Pow: lambda a, b: _bounded_power(a, b),
}
_SIGNS: dict[type, Callable[[Any], Any]] = {ast.USub: lambda a: -a, ast.UAdd: lambda a: +a}
# Pure builtins a test applies to what the module returned; the host calls them on plain data only.
_BUILTINS: dict[str, Callable[..., Any]] = {
    name: getattr(builtins, name)
    for name in ("abs", "round", "len", "min", "max", "sum", "sorted", "all", "any", "list", "tuple", "set", "frozenset", "bool")
}
_BUILTINS |= {"math.isclose": math.isclose, "math.fabs": math.fabs}
_HUGE = 10**6  # the largest repeat count or exponent the host computes


def _bounded_product(a: Any, b: Any) -> Any:
    for count in (a, b):
        if (
            isinstance(count, int)
            and not isinstance(count, bool)
            and abs(count) > _HUGE
            and isinstance(a if count is b else b, (str, list, tuple))
        ):
            raise OverflowError("a repeat count too large to judge")
    return a * b


def _bounded_power(a: Any, b: Any) -> Any:
    if isinstance(b, int) and abs(b) > _HUGE or isinstance(a, int) and isinstance(b, int) and abs(a) > 1 and abs(b) > 4096:
        raise OverflowError("a power too large to judge")
    return a**b


def _plain_mod(a: Any, b: Any) -> Any:
    if isinstance(a, str):
        raise TypeError("string formatting is not arithmetic")
    return a % b


def _literal(node: ast.expr) -> tuple | None:
    """``("const", value)`` for a literal, else None."""
    try:
        return ("const", ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _builtin_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name) and node.id in _BUILTINS:
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and f"{node.value.id}.{node.attr}" in _BUILTINS:
        return f"{node.value.id}.{node.attr}"
    return None


def _check(node: ast.expr, probes: list[str], strict: bool = False) -> tuple:
    """An assert's test as a tree the host evaluates: literals and arithmetic stay here, the rest become probes.

    A probe is the smallest part of the test that needs the module's code (a call of the
    module's functions, a name the test body assigned); ``probes`` is the whole test's list,
    so a probe's index is its place among all the values the sandbox reports for the test.
    ``strict`` (hidden tests): a comparison must have one side without a probe, so no
    expected value is ever computed where the agent's code runs.
    """
    try:
        return ("const", ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ("not", _check(node.operand, probes, strict))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _SIGNS:
        return ("sign", type(node.op), _check(node.operand, probes, strict))
    if isinstance(node, ast.BoolOp):
        return ("and" if isinstance(node.op, ast.And) else "or", [_check(value, probes, strict) for value in node.values])
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return ("arith", type(node.op), _check(node.left, probes, strict), _check(node.right, probes, strict))
    name = _builtin_name(node.func) if isinstance(node, ast.Call) else None
    if isinstance(node, ast.Call) and name is not None and not any(isinstance(a, ast.Starred) for a in node.args):
        keywords = [(k.arg, _literal(k.value)) for k in node.keywords]
        if all(key is not None and value is not None for key, value in keywords):  # rel_tol=1e-3, ndigits=2: data only
            args = [_check(arg, probes, strict) for arg in node.args]
            return ("call", name, args, keywords)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        sides = [_check(side, probes, strict) for side in (node.left, *node.comparators)]
        if strict and sum(_reads_probe(side) for side in sides) > 1:
            raise ValueError(f"line {node.lineno}: a hidden test compares the module's output with a literal, not with a computed value")
        return ("cmp", sides[0], [(type(op), side) for op, side in zip(node.ops, sides[1:])])
    probes.append(ast.unparse(node))
    return ("probe", len(probes) - 1)


def _reads_probe(tree: Any) -> bool:
    """Whether a check tree (or any part of one) needs a value from the sandbox."""
    if isinstance(tree, tuple) and tree and tree[0] == "probe":
        return True
    if isinstance(tree, tuple) and tree and tree[0] == "const":
        return False
    return isinstance(tree, (tuple, list)) and any(_reads_probe(part) for part in tree)


def _probes_of(tree: Any) -> list[int]:
    """The probe indices a check tree reads, in order."""
    if isinstance(tree, tuple) and tree and tree[0] == "probe":
        return [tree[1]]
    if isinstance(tree, tuple) and tree and tree[0] == "const":
        return []
    if isinstance(tree, (tuple, list)):
        return [i for part in tree for i in _probes_of(part)]
    return []


def _plain(value: Any) -> Any:
    """``value`` if the host may compute with it (plain data), else a TypeError: an Opaque never takes part."""
    if isinstance(value, Opaque):
        raise TypeError(f"{value.what} cannot be computed with")
    return value


def _evaluate(tree: tuple, values: list[Any]) -> Any:
    kind = tree[0]
    if kind == "const":
        return tree[1]
    if kind == "probe":
        return values[tree[1]]
    if kind == "not":
        return not _evaluate(tree[1], values)
    if kind == "and":
        return all(bool(_evaluate(t, values)) for t in tree[1])
    if kind == "or":
        return any(bool(_evaluate(t, values)) for t in tree[1])
    if kind == "sign":
        return _SIGNS[tree[1]](_plain(_evaluate(tree[2], values)))
    if kind == "arith":
        return _ARITHMETIC[tree[1]](_plain(_evaluate(tree[2], values)), _plain(_evaluate(tree[3], values)))
    if kind == "call":
        args = [_plain(_evaluate(arg, values)) for arg in tree[2]]
        keywords = {key: _plain(_evaluate(value, values)) for key, value in tree[3]}
        return _BUILTINS[tree[1]](*args, **keywords)
    left = _evaluate(tree[1], values)
    for op, right_tree in tree[2]:
        right = _evaluate(right_tree, values)
        if isinstance(left, Opaque) or isinstance(right, Opaque) or not _COMPARE[op](left, right):
            return False
        left = right
    return True


@dataclass
class JudgedTest:
    """One test function, split into what runs in the sandbox (steps) and what the host checks."""

    name: str
    steps: list[tuple[str, str]]  # ("exec", statement) or ("eval", probe expression)
    checks: list[tuple[str, tuple, list[int]]]  # (assert source, check tree, the probe indices it reads)


def compile_suite(source: str, strict: bool = False) -> tuple[str, list[JudgedTest]]:
    """Split a test module into its imports (sent in) and its tests; raises ValueError on what it cannot judge.

    Example:
        >>> module, tests = compile_suite("from calc import add\\n\\ndef test_add():\\n    assert add(2, 3) == 5\\n")
        >>> module, tests[0].steps, tests[0].checks[0][0]
        ('from calc import add', [('eval', 'add(2, 3)')], 'add(2, 3) == 5')
    """
    tree = ast.parse(source)
    module, tests = [], []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module.append(ast.unparse(node))
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and not node.args.args:
            steps: list[tuple[str, str]] = []
            checks = []
            probes: list[str] = []  # the test's, across its asserts: a probe's index is its value's place in the report
            for statement in node.body:
                if isinstance(statement, ast.Assert):
                    first = len(probes)
                    check = _check(statement.test, probes, strict)
                    steps += [("eval", probe) for probe in probes[first:]]
                    checks.append((ast.unparse(statement.test), check, _probes_of(check)))
                elif isinstance(statement, (ast.Expr, ast.Assign, ast.AugAssign, ast.Import, ast.ImportFrom, ast.Pass)):
                    steps.append(("exec", ast.unparse(statement)))
                else:
                    raise ValueError(f"line {statement.lineno}: the judge reads asserts, assignments and calls only")
            tests.append(JudgedTest(node.name, steps, checks))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue  # a docstring
        else:
            raise ValueError(f"line {node.lineno}: a test module holds imports and test_ functions only")
    return "\n".join(module), tests


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _outcome(test: JudgedTest, line: dict) -> str:
    """'pass' or why not, for one test, from the values the sandbox reported for it."""
    if line.get("error") is not None:
        return f"fail: {str(line['error'])[:300]}"
    try:
        values = [decode(value) for value in line["values"]]
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError):
        return "fail: the values reported are not readable"
    probes = [source for kind, source in test.steps if kind == "eval"]
    if len(values) != len(probes):
        return "fail: not every value was reported"
    for source, check, used in test.checks:
        try:
            passed = bool(_evaluate(check, values))
        except Exception:  # an Opaque value, or values that do not compare
            passed = False
        if not passed:
            got = ", ".join(f"{probes[i]} gave {_shown(values[i])}" for i in used)
            return f"fail: assert {source}" + (f" ({got})" if got else "")
    return "pass"


def suite_tests(source: str) -> list[str]:
    """The test functions a test module defines, read without running it."""
    return sorted(node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"))


def run_tests(
    files: dict[str, str], tests: str, test_file: str, backend: str, allow_weak_isolation: bool = False, detail: bool = True
) -> dict[str, str]:
    """Judge ``files`` by the test module ``tests``; test name -> "pass" or the failure.

    The sandbox runs the agent's code on each probe and reports values; the host decides.
    ``detail=False`` (hidden tests) names no expression or value in a failure.
    """
    from envharness.sandbox import Limits, SubprocessSandbox, get_sandbox

    try:
        names = suite_tests(tests)
        module, judged = compile_suite(tests, strict=not detail)
    except (ValueError, SyntaxError, RecursionError, MemoryError) as error:
        why = str(error).splitlines()[0] if str(error) else type(error).__name__
        return {"<tests>": f"fail: the tests cannot be judged ({why})"}
    secret = secrets.token_hex(16)  # only the runner's own reports carry it
    program = {
        "module": module,
        "tests": [{"name": t.name, "steps": t.steps} for t in judged],
        "secret": secret,
        "child": PROBE_CHILD,
        "seconds": PROBE_SECONDS,
    }
    sandbox = SubprocessSandbox(allow_weak_isolation=allow_weak_isolation) if backend == "subprocess" else get_sandbox(backend)
    # Ours last: they overwrite anything the agent wrote under these names.
    payload = {**files, PROBE_FILE: json.dumps(program), "_runner.py": PROBE_RUNNER}
    result = sandbox.run(["python3", "-E", "-s", "_runner.py", PROBE_FILE], payload, Limits(timeout_s=15, memory_mb=256, cpu_s=10))
    reported: dict[str, dict] = {}
    mark = f"PROBES {secret} "
    for text in result.stdout.splitlines():
        if text.startswith(mark):
            try:
                line = json.loads(text[len(mark) :])
            except (ValueError, RecursionError):
                continue
            if isinstance(line, dict) and isinstance(line.get("name"), str) and isinstance(line.get("values"), list):
                reported.setdefault(line["name"], line)  # the runner reports each test once
    outcome = {}
    for test in judged:
        line = reported.get(test.name)
        if line is None:
            last = (result.stderr.strip().splitlines() or ["no result"])[-1][:200]
            outcome[test.name] = f"fail: the test run did not finish ({result.limit or (last if detail else 'no result')})"
            continue
        verdict = _outcome(test, line)
        outcome[test.name] = verdict if detail or verdict == "pass" else "fail"
    return {name: outcome.get(name, "fail: not run") for name in names}


@lru_cache(maxsize=4096)
def _verify_cached(files_json: str, hidden: str, backend: str, allow_weak_isolation: bool) -> tuple[bool, int, int]:
    outcome = run_tests(json.loads(files_json), hidden, HIDDEN_FILE, backend, allow_weak_isolation, detail=False)
    passed = sum(v == "pass" for v in outcome.values())
    return passed == len(outcome) and bool(outcome), passed, len(outcome)


def verify(
    files: dict[str, str], hidden_tests: str, backend: str = "subprocess", allow_weak_isolation: bool = False, fresh: bool = False
) -> tuple[bool, int, int]:
    """(all hidden tests pass, passed, total) for ``files``; cached on content unless ``fresh``.

    The hidden tests never enter the sandbox: only the inputs of their probes do, and the
    expected values are compared here, on the host.
    """
    judge = _verify_cached.__wrapped__ if fresh else _verify_cached
    return judge(json.dumps(files, sort_keys=True), hidden_tests, backend, allow_weak_isolation)


@lru_cache(maxsize=4096)
def _judge_check_cached(files_json: str, task: CodeTask, backend: str, allow_weak_isolation: bool) -> tuple[bool, int, int]:
    from envharness.envs.check_judge import judge_check

    outcome = judge_check(
        json.loads(files_json),
        task.module,
        task.entry_point,
        task.trusted,
        task.hidden_tests,
        task.seed,
        json.loads(task.calls),
        backend,
        allow_weak_isolation,
    )
    return outcome.passed, int(outcome.passed), 1


def judge_task(
    task: CodeTask, files: dict[str, str], backend: str = "subprocess", allow_weak_isolation: bool = False, fresh: bool = False
) -> tuple[bool, int, int]:
    """(all hidden tests pass, passed, total) for ``files`` by ``task``'s hidden tests, read the way its ``judge`` says.

    A ``check`` program counts as one test.
    """
    if task.judge == "check":
        judge = _judge_check_cached.__wrapped__ if fresh else _judge_check_cached
        return judge(json.dumps(files, sort_keys=True), task, backend, allow_weak_isolation)
    return verify(files, task.hidden_tests, backend, allow_weak_isolation, fresh)


def hidden_count(task: CodeTask) -> int:
    """How many hidden tests ``task`` has: its ``test_`` functions, or the asserts of its ``check`` program."""
    if task.judge == "check":
        return sum(isinstance(node, ast.Assert) for node in ast.walk(ast.parse(task.hidden_tests)))
    return len(suite_tests(task.hidden_tests))


class CodeRepairEnv(gym.Env):
    """Repair one of twenty buggy Python modules with file tools; hidden tests run in a sandbox.

    Args:
        task: a task name to always use; by default each reset picks one from its seed.
        sandbox: ``subprocess`` or ``docker``: where tests run.
        output_limit: characters of tool output shown.
        allow_weak_isolation: run the agent's code even where the subprocess sandbox cannot
            isolate it (not root, no cgroups); refused by default.
        reviewer: offer an ``ask_human`` tool, answered by a scripted reviewer: ``hint`` (the
            lines the bug is on), ``fix`` (the fixed lines) or ``silent`` (no help). Each call
            is a human intervention (``info["human_intervention"]``); success is unchanged.

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
        self,
        task: str | None = None,
        sandbox: str = "subprocess",
        output_limit: int = 3000,
        render_mode: str | None = None,
        allow_weak_isolation: bool = False,
        reviewer: str | None = None,
    ) -> None:
        self.tasks = self._task_list()
        names = [t.name for t in self.tasks]
        if reviewer is not None and reviewer not in REVIEWERS:
            raise ValueError(f"reviewer: got {reviewer!r}; use one of {', '.join(REVIEWERS)} (or none, for no ask_human tool)")
        self.reviewer = reviewer
        self.tools = (*TOOLS, ASK_HUMAN) if reviewer is not None else TOOLS
        if task is not None and task not in names:
            shown = ", ".join(names[:6]) + (f" ... ({len(names)} in all)" if len(names) > 6 else "")
            raise ValueError(f"task {task!r} is unknown; use one of {shown}")
        if type(output_limit) is not int or not 100 <= output_limit <= OBS_LIMIT:
            raise ValueError(f"output_limit: got {output_limit!r}; give a whole number of characters from 100 to {OBS_LIMIT}")
        self.fixed_task = task
        self.sandbox = sandbox
        self.allow_weak_isolation = allow_weak_isolation
        self.output_limit = output_limit
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=OBS_LIMIT, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(max_length=4000, min_length=0, charset=CHARSET)
        self.task: CodeTask = self.tasks[0]
        self.files: dict[str, str] = {}
        self.last_output = ""
        self.submitted = False
        self.hidden_result: tuple[bool, int, int] | None = None
        self.test_runs = 0

    def _task_list(self) -> tuple[CodeTask, ...]:
        """The tasks this env draws its levels from."""
        return TASKS

    # -- helpers -------------------------------------------------------------------------
    def _text(self, output: str) -> str:
        header = (
            f"Task: {self.task.description}\nFiles: {', '.join(sorted(self.files))}\n"
            f'Tools: {", ".join(self.tools)} (JSON actions, e.g. {{"tool": "view", "path": "{self.task.path}"}})\n\n'
        )
        text = header + output[: self.output_limit]
        text = "".join(c if c in CHARSET else "?" for c in text)
        return text[:OBS_LIMIT]

    def observe(self) -> str:
        return self._text(self.last_output)

    def _numbered(self, path: str) -> str:
        return "\n".join(f"{i:3d}| {line}" for i, line in enumerate(self.files[path].splitlines(), start=1))

    def _review(self) -> str:
        """The scripted reviewer's answer: where the bug is, the fix itself, or nothing."""
        fix = self.task.fix
        if self.reviewer == "hint":
            return (
                "reviewer: the bug is on "
                + ", ".join(f"lines {a}-{b}" if a != b else f"line {a}" for a, b, _ in fix)
                + f" of {self.task.path}"
            )
        if self.reviewer == "fix":
            return "reviewer: replace " + "; ".join(f"lines {a}-{b} with:\n{text}" for a, b, text in fix)
        return "reviewer: I cannot help with this one."

    # -- gymnasium API -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if self.fixed_task is not None:
            self.task = next(t for t in self.tasks if t.name == self.fixed_task)
        else:
            self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self.files = {self.task.path: self.task.source, VISIBLE_FILE: self.task.visible_tests}
        self.last_output = "Start by viewing the module or running the visible tests."
        self.submitted, self.hidden_result, self.test_runs = False, None, 0
        return self.observe(), {"task": self.task.name}

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        info: dict[str, Any] = {}
        try:
            call = parse_tool_call(action)  # the rules that judge tool calls read them with the same parser
            if call.get("tool") not in self.tools:
                raise ValueError(f"'tool' must be one of {', '.join(self.tools)}")
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
            elif tool == ASK_HUMAN:
                info["human_intervention"] = 1
                output = self._review()
            elif tool == "run_tests":
                self.test_runs += 1
                module = {self.task.path: self.files[self.task.path]}
                outcome = run_tests(module, self.files[VISIBLE_FILE], VISIBLE_FILE, self.sandbox, self.allow_weak_isolation)
                passed = sum(v == "pass" for v in outcome.values())
                info["tests_passed"], info["tests_failed"] = passed, len(outcome) - passed
                output = f"{passed}/{len(outcome)} visible tests pass\n" + "\n".join(f"{k}: {v}" for k, v in outcome.items())
            else:  # submit
                self.submitted = True
                module = {self.task.path: self.files[self.task.path]}
                self.hidden_result = judge_task(self.task, module, self.sandbox, self.allow_weak_isolation)
                success, passed, total = self.hidden_result
                info["hidden_passed"], info["hidden_total"] = passed, total
                reward, terminated = (1.0 if success else 0.0), True
                output = f"submitted: {passed}/{total} hidden tests pass"
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError, json.JSONDecodeError) as error:
            info["tool_error"] = str(error).splitlines()[0] if str(error) else type(error).__name__
            reward, terminated = 0.0, False
            output = f"error: {info['tool_error']}"
        self.last_output = output
        return self.observe(), reward, terminated, False, info

    def render(self) -> str | None:
        return self.observe() if self.render_mode == "ansi" else None


__all__ = ["CodeRepairEnv", "TASKS", "hidden_count", "judge_task", "run_tests", "verify"]
