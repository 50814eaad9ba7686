"""A judge for tests written as trusted code that calls the agent's function: HumanEval's ``check(candidate)``.

Contains :func:`reference_calls` (the calls a test makes, found by running it against the
benchmark's own solution), :func:`judge_check` (pass or fail for the agent's module) and
:class:`CheckOutcome`. Such a test is a program, not a list of ``assert f(x) == literal``:
it loops over inputs, draws random ones, compares with a tolerance, or computes the expected
value with helper code that comes with the benchmark. The function is called on copies of the
test's arguments (what it changes in place stays its own, so it cannot rewrite the data the
test goes on to compute its expected values from). No part of it is split into an
expression the agent's code could see. Two sandbox runs, neither of which can reach the other:

- the **calls** run imports the agent's module and answers a list of calls (the arguments,
  plain data) with the values its function returns, encoded with their exact types; it never
  sees the test, an expected value or a tolerance;
- the **trusted** run executes the benchmark's test code and helpers (never the agent's
  module) with ``candidate`` standing for the answers: each call returns the decoded answer
  as plain data (lists, numbers, strings...; any other object, a value that cannot be
  trusted, fails the test when touched). The test decides with its own code.

A test whose calls depend on earlier answers (a call the answers did not cover) sends the
calls it needs back; the judge asks the agent's module again, up to :data:`ROUNDS` times, and
fails closed when that does not settle it. The test's random module is seeded, so the same
submission is judged the same way every time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from envharness.envs.exact import ENCODER

ROUNDS = 6  # rounds of asking the agent's module again, for calls that depend on earlier answers
MAX_CALLS = 5000  # calls one test may make
CALLS_FILE, TRUSTED_FILE = "_calls.json", "_trusted.json"

# The calls run: our program, written into the sandbox after the agent's files. It reads the
# call list, keeps a channel to stdout for itself and sends everything the agent's code prints
# to /dev/null, imports the module and answers each call on its own line as it goes, so a call
# that hangs costs only the answers after it. Whatever the agent's code does here, it can
# only change its own answers: the test and its expected values are not in this run.
# Plain data from its encoded form; ``other`` reads the kinds that are not plain data.
PLAIN_DECODER = r"""
def decode(node, other=None):
    kind, rest = node[0], node[1:]
    if kind == "none":
        return None
    if kind in ("bool", "str"):
        return rest[0]
    if kind == "int":
        return int(rest[0])
    if kind == "float":
        return float(rest[0])
    if kind == "dict":
        return {decode(k, other): decode(v, other) for k, v in rest[0]}
    if kind in ("list", "tuple", "set", "frozenset"):
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](decode(item, other) for item in rest[0])
    return other(kind, rest)

"""
CALLS_PROGRAM = (
    ENCODER
    + PLAIN_DECODER
    + r"""
def _answer():
    import importlib, json, os, sys
    kind_of, text, make_encoder = type, str, exact_encoder
    del globals()["exact_encoder"]
    channel = os.fdopen(os.dup(1), "w")
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    with open(sys.argv[1]) as handle:
        request = json.load(handle)
    os.unlink(sys.argv[1])

    calls = [(decode(["list", args]), {key: decode(value) for key, value in kwargs}) for args, kwargs in request["calls"]]
    sys.path.insert(0, os.getcwd())
    try:
        function = getattr(importlib.import_module(request["module"]), request["entry_point"])
    except BaseException as raised:
        channel.write("FAILED " + json.dumps((text(kind_of(raised).__name__) + ": " + text(raised))[:300]) + "\n")
        channel.flush()
        os._exit(0)
    for args, kwargs in calls:
        try:
            value = function(*args, **kwargs)
            answer = make_encoder()(value)
        except BaseException as raised:
            answer = ["raised", text(kind_of(raised).__name__)[:100]]
        channel.write("ANSWER " + json.dumps(answer) + "\n")
        channel.flush()
    os._exit(0)


_answer()
"""
)

# The trusted run: the benchmark's helpers and test, with ``candidate`` answering from the
# table. Mode "reference" answers with the benchmark's own solution and records the calls.
TRUSTED_PROGRAM = (
    PLAIN_DECODER
    + r"""
import builtins, json, os, random, sys, time

channel = os.fdopen(os.dup(1), "w")
quiet = os.open(os.devnull, os.O_RDWR)
os.dup2(quiet, 1)
os.dup2(quiet, 2)
with open(sys.argv[1]) as handle:
    request = json.load(handle)


class Untrusted(BaseException):
    # BaseException: a test's own ``except Exception`` does not swallow it
    pass


class NeedCall(BaseException):
    pass


class Opaque:
    # An answer that is not plain data (an object, a value too large): touching it fails the test.
    def __init__(self, what):
        object.__setattr__(self, "what", what)

    def _refuse(self, *args, **kwargs):
        raise Untrusted(object.__getattribute__(self, "what") + " is not plain data the test can trust")


for _name in (
    "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ __bool__ __len__ __iter__ __contains__ __getitem__ "
    "__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __floordiv__ __rfloordiv__ "
    "__mod__ __rmod__ __pow__ __rpow__ __neg__ __pos__ __abs__ __int__ __float__ __index__ __round__ "
    "__str__ __repr__ __format__ __getattr__ __call__ __and__ __or__ __xor__ __rand__ __ror__ __rxor__"
).split():
    setattr(Opaque, _name, Opaque._refuse)


def untrusted(kind, rest):
    if kind == "raised":
        error = getattr(builtins, rest[0], None)
        if isinstance(error, type) and issubclass(error, Exception):
            raise error("raised by the function under test")
        raise RuntimeError(rest[0] + " raised by the function under test")
    if kind == "missing":
        raise TimeoutError("the function under test gave no answer in time")
    return Opaque("a " + str(rest[0]) + " object" if kind == "object" else "a value too large")


def encode(value, depth=0):
    kind = type(value)
    if depth > 40:
        raise Untrusted("an argument nested too deep")
    if value is None:
        return ["none"]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        return ["int", repr(value)]
    if kind is float:
        return ["float", repr(value)]
    if kind is str:
        return ["str", value]
    if kind in (list, tuple, set, frozenset):
        items = sorted(value, key=repr) if kind in (set, frozenset) else value
        return [kind.__name__, [encode(item, depth + 1) for item in items]]
    if kind is dict:
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    raise Untrusted("an argument of type " + kind.__name__ + " cannot be sent to the function under test")


reference = request["mode"] == "reference"
answers = request.get("answers", [])
calls = []
scope = {"__name__": "__main__"}
random.seed(request["seed"])
exec(compile(request["trusted"], "trusted", "exec"), scope)
canonical = scope.get(request["entry_point"])
random.seed(request["seed"])
exec(compile(request["test"], "test", "exec"), scope)


def candidate(*args, **kwargs):
    key = [[encode(a) for a in args], [[k, encode(v)] for k, v in sorted(kwargs.items())]]
    if len(calls) >= request["max_calls"]:
        raise Untrusted("the test made more calls than the judge answers")
    calls.append(key)
    if reference:
        # On copies, as the agent's function is called: what a function changes in place stays its own.
        value = canonical(*[decode(a) for a in key[0]], **{k: decode(v) for k, v in key[1]})
        return decode(encode(value))  # the answer must be plain data
    index = len(calls) - 1
    if index >= len(answers) or answers[index][0] != key:
        raise NeedCall()
    return decode(answers[index][1], untrusted)


outcome = {"outcome": "pass"}
started = time.process_time()
try:
    scope["check"](candidate)
except NeedCall:
    outcome = {"outcome": "need"}
except Untrusted as error:
    outcome = {"outcome": "fail", "why": str(error)[:300]}
except BaseException as error:
    line = error.__traceback__
    while line is not None and line.tb_frame.f_code.co_filename != "test":
        line = line.tb_next
    where = f" at line {line.tb_lineno} of the test" if line is not None else ""
    outcome = {"outcome": "fail", "why": (type(error).__name__ + where + (": " + str(error) if str(error) else ""))[:300]}
outcome["calls"] = calls
outcome["seconds"] = time.process_time() - started
channel.write("RESULT " + json.dumps(outcome) + "\n")
channel.flush()
os._exit(0)
"""
)


@dataclass(frozen=True)
class CheckOutcome:
    """The judge's decision on one submission: passed, why not, and what it cost.

    ``calls`` counts the agent's function's calls the test made; ``rounds`` the times the
    agent's module was asked (more than one when later calls depend on earlier answers).
    """

    passed: bool
    why: str
    calls: int
    rounds: int


class CheckError(ValueError):
    """The benchmark's own test cannot be judged (its reference run fails, or it sends what cannot be answered)."""


def _sandbox(backend: str, allow_weak_isolation: bool) -> Any:
    from envharness.sandbox import SubprocessSandbox, get_sandbox

    return SubprocessSandbox(allow_weak_isolation=allow_weak_isolation) if backend == "subprocess" else get_sandbox(backend)


def _trusted_run(request: dict[str, Any], backend: str, allow_weak_isolation: bool) -> dict[str, Any]:
    from envharness.sandbox import Limits

    payload = {TRUSTED_FILE: json.dumps(request), "_trusted.py": TRUSTED_PROGRAM}
    result = _sandbox(backend, allow_weak_isolation).run(
        ["python3", "-E", "-s", "_trusted.py", TRUSTED_FILE], payload, Limits(timeout_s=20, memory_mb=512, cpu_s=15)
    )
    for text in result.stdout.splitlines():
        if text.startswith("RESULT "):
            outcome = json.loads(text[len("RESULT ") :])
            if isinstance(outcome, dict) and outcome.get("outcome") in ("pass", "fail", "need"):
                return outcome
    last = (result.stderr.strip().splitlines() or [result.limit or "no result"])[-1][:200]
    return {"outcome": "fail", "why": f"the test's own run did not finish ({result.limit or last})", "calls": []}


def reference_calls(
    trusted: str, test: str, entry_point: str, seed: int, backend: str = "subprocess", allow_weak_isolation: bool = False
) -> list:
    """The calls ``test`` makes when ``candidate`` is the benchmark's own solution; raises :class:`CheckError` if it fails.

    ``trusted`` is the benchmark's code (the prompt with its helpers, and the canonical
    solution); the test runs with it in the trusted sandbox only.

    Example:
        >>> trusted = "def double(x):\\n    return 2 * x\\n"
        >>> test = "def check(candidate):\\n    for x in range(3):\\n        assert candidate(x) == x + x\\n"
        >>> reference_calls(trusted, test, "double", seed=0)
        [[[['int', '0']], []], [[['int', '1']], []], [[['int', '2']], []]]
    """
    request = {"mode": "reference", "trusted": trusted, "test": test, "entry_point": entry_point, "seed": seed, "max_calls": MAX_CALLS}
    outcome = _trusted_run(request, backend, allow_weak_isolation)
    if outcome["outcome"] != "pass":
        raise CheckError(f"the benchmark's own solution fails its test: {outcome.get('why', outcome['outcome'])}")
    return list(outcome["calls"])


def _answers(stdout: str, count: int) -> tuple[list[Any], str | None]:
    """The agent's answers, each checked to be readable plain data (else an untrusted object); or why there are none."""
    from envharness.envs.exact import decode

    answers: list[Any] = []
    for text in stdout.splitlines():
        if text.startswith("FAILED ") and not answers:
            try:
                return [], "the module cannot be imported: " + str(json.loads(text[len("FAILED ") :]))[:200]
            except ValueError:
                return [], "the module cannot be imported"
        if not text.startswith("ANSWER ") or len(answers) >= count:
            continue
        try:
            value = json.loads(text[len("ANSWER ") :])
            if isinstance(value, list) and value[:1] == ["raised"] and len(value) == 2 and isinstance(value[1], str):
                value = ["raised", value[1] if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,99}", value[1]) else "Exception"]
            else:
                decode(value)  # plain data, or refused here
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError):
            value = ["object", "unreadable answer"]
        answers.append(value)
    return answers, None


def judge_check(
    files: dict[str, str],
    module: str,
    entry_point: str,
    trusted: str,
    test: str,
    seed: int,
    calls: list,
    backend: str = "subprocess",
    allow_weak_isolation: bool = False,
    timeout_s: float = 10.0,
) -> CheckOutcome:
    """Judge the module ``module`` in ``files`` by ``test``, starting from the ``calls`` the reference run made.

    Example:
        >>> trusted = "def double(x):\\n    return 2 * x\\n"
        >>> test = "def check(candidate):\\n    for x in range(3):\\n        assert abs(candidate(x) - 2 * x) < 1e-9\\n"
        >>> calls = reference_calls(trusted, test, "double", seed=0)
        >>> judge_check({"m.py": "def double(x):\\n    return x + x\\n"}, "m", "double", trusted, test, 0, calls).passed
        True
        >>> judge_check({"m.py": "def double(x):\\n    return x * x\\n"}, "m", "double", trusted, test, 0, calls).why
        'AssertionError at line 3 of the test'
    """
    from envharness.sandbox import Limits

    sandbox = _sandbox(backend, allow_weak_isolation)
    calls = list(calls)
    for round_number in range(1, ROUNDS + 1):
        calls_request = {"module": module, "entry_point": entry_point, "calls": calls}
        payload = {**files, CALLS_FILE: json.dumps(calls_request), "_calls.py": CALLS_PROGRAM}  # ours last: they overwrite the agent's
        result = sandbox.run(
            ["python3", "-E", "-s", "_calls.py", CALLS_FILE], payload, Limits(timeout_s=timeout_s, memory_mb=256, cpu_s=timeout_s)
        )
        answers, failed = _answers(result.stdout, len(calls))
        if failed is not None:
            return CheckOutcome(False, failed, len(calls), round_number)
        answers += [["missing"]] * (len(calls) - len(answers))  # the calls a hang or a crash left unanswered
        request: dict[str, Any] = {
            "mode": "judge",
            "trusted": trusted,
            "test": test,
            "entry_point": entry_point,
            "seed": seed,
            "max_calls": MAX_CALLS,
            "answers": [[call, answer] for call, answer in zip(calls, answers)],
        }
        outcome = _trusted_run(request, backend, allow_weak_isolation)
        if outcome["outcome"] != "need":
            return CheckOutcome(outcome["outcome"] == "pass", outcome.get("why", ""), len(outcome.get("calls", [])), round_number)
        calls = outcome["calls"]  # the calls answered so far, then the one the answers did not cover
    return CheckOutcome(False, f"the test's calls still depended on new answers after {ROUNDS} rounds", len(calls), ROUNDS)


__all__ = ["CheckError", "CheckOutcome", "judge_check", "reference_calls"]
