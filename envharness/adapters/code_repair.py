"""Adapter for the code-repair benchmark (:class:`envharness.envs.code_repair.CodeRepairEnv`).

Contains :class:`CodeRepairAdapter`. Its verifier judges the agent's module by the task's
hidden tests (probes run in the sandbox, expected values compared on the host), with the hidden tests copied from the task registry when
the adapter was made, so nothing that happens during an episode can change what they test.

A setup that is not deterministic is not a level: the module a setup leaves is judged
:data:`START_RUNS` times when its level is first made (in a process), and a module that
passes on some runs and fails on others is refused at reset, as one solved on some runs.
A submission that is its level's start up to comments and formatting never succeeds, and
on a level made by setup a success holds only if the start fails again and the submission
passes again, each judged afresh; a start seen passing then is refused from then on.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

from envharness.adapters.base import Adapter, digest
from envharness.adapters.registry import register_adapter
from envharness.envs.code_tasks import CodeTask
from envharness.toolcall import tool_name
from envharness.verifier import RUNNING, TIMEOUT, Verdict

START_RUNS = 4  # judgments of a setup's module when its level is made: all must agree
RECHECK_RUNS = 3  # on a success of a level made by setup: the start judged afresh this many times, the submission as many in all
_STARTS: dict[tuple[Any, ...], tuple[int, int]] = {}  # (task, module, sandbox, weak isolation) -> (passes, runs)
_STARTS_LOCK = threading.Lock()


def same_code(a: str, b: str) -> bool:
    """Whether two modules are the same program up to comments and formatting (the same syntax tree).

    Example:
        >>> same_code("def f(a):\\n    return a  # the fix\\n", "def f(a):  \\n\\n    return (a)\\n")
        True
        >>> same_code("def f(a):\\n    return a\\n", "def f(a):\\n    return -a\\n")
        False
    """
    try:
        return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return a == b


@register_adapter
class CodeRepairAdapter(Adapter):
    """Judges a submission by the pristine hidden tests; exposes files for state transforms.

    Example:
        >>> import gymnasium as gym, envharness.envs
        >>> env = gym.make("envharness/CodeRepair-v0", task="mean")
        >>> adapter = CodeRepairAdapter(env)
        >>> _ = env.reset(seed=0); adapter.begin_episode()
        >>> adapter.level_features()["hidden_tests"], adapter.level_id()
        (2.0, 'mean')
    """

    family = "code_repair"
    capabilities = frozenset({"files"})
    neutral_kwargs: tuple[str, ...] = ("render_mode", "sandbox", "output_limit", "allow_weak_isolation", "reviewer")
    state_attrs = ("task", "files", "last_output", "submitted", "hidden_result", "test_runs")
    # A submit is the agent's own ending, and one that fails is final: the hidden tests ran.
    irreversible_endings = frozenset({"hidden tests fail"})
    agent_endings = frozenset({"hidden tests fail"})

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        # Copied from the task registry now: nothing an episode does can change what is judged.
        self._pristine = {task.name: task for task in self._registry()}
        self._task = ""
        self._start_module: str | None = None  # the module as setup left it, where setup edited it
        self._had_text: frozenset[str] = frozenset()  # the files with text at the start, to see one emptied

    def _registry(self) -> tuple[CodeTask, ...]:
        """The tasks as the package defines them (never the env's copies)."""
        from envharness.envs.code_tasks import TASKS

        return TASKS

    @classmethod
    def matches(cls, env_type: type) -> bool:
        from envharness.envs.code_repair import CodeRepairEnv

        return issubclass(env_type, CodeRepairEnv)

    def begin_episode(self) -> None:
        from envharness.envs.code_repair import hidden_count, suite_tests

        raw = self.raw
        self._task = raw.task.name
        task = self._reference()
        self._start_module = raw.files.get(task.path, "") if self._edited() else None
        self._had_text = frozenset(name for name, text in raw.files.items() if text.strip())
        self.destroyed = None
        self._features = {
            "module_lines": float(len(raw.files[task.path].splitlines())),
            "hidden_tests": float(hidden_count(task)),
            "visible_tests": float(len(suite_tests(task.visible_tests))),
        }

    def _reference(self) -> CodeTask:
        """The current task as the registry holds it: its path, pristine source and hidden tests."""
        return self._pristine[self._task]

    def _edited(self) -> bool:
        """Whether setup (a state transform) changed the module from the task's own source."""
        # Against the task registry's own source, copied when the adapter was made, not the env's.
        task = self._reference()
        return self.raw.files.get(task.path) != task.source

    def level_id(self) -> str | None:
        if self._edited():  # a module edited during setup is another level of the same task
            return f"{self._task}@{digest(self.raw.files.get(self.raw.task.path, ''))}"
        return self._task

    def solved(self) -> str | None:
        if not self._edited():
            return None
        task = self._reference()
        passes, runs = self._judge_start(task, self.raw.files.get(task.path, ""))
        if passes == runs:
            return "the module already passes the hidden tests"
        if passes:
            return (
                f"the module setup left is not deterministic: it passed the hidden tests on {passes} of {runs} runs and failed on "
                "the others (it reads chance, the clock or its surroundings), so the level is solved on some runs; "
                "make the setup's module deterministic"
            )
        return None

    def _judge_start(self, task: CodeTask, module: str) -> tuple[int, int]:
        """(passes, runs) of the hidden tests on the module setup left, kept per module in the process.

        The first run is the judgment kept per content (what submitting this very module gets);
        the others are fresh, up to :data:`START_RUNS`, stopping at the first that disagrees.
        """
        from envharness.envs.code_repair import judge_task

        raw = self.raw
        key = (task, module, raw.sandbox, raw.allow_weak_isolation)
        with _STARTS_LOCK:
            kept = _STARTS.get(key)
        if kept is not None:
            return kept
        files = {task.path: module}
        passes = int(judge_task(task, files, raw.sandbox, raw.allow_weak_isolation)[0])
        runs = 1
        while runs < START_RUNS and passes in (0, runs):
            passes += int(judge_task(task, files, raw.sandbox, raw.allow_weak_isolation, fresh=True)[0])
            runs += 1
        self._keep_start(key, passes, runs)
        return passes, runs

    def refuse_setup(self, action: Any) -> str | None:
        tool = tool_name(action)  # as the env will read it
        if tool in ("run_tests", "submit"):
            return f"the tool {tool!r} runs code, which setup may not do; set the files up with view and replace only"
        return None

    def observe(self) -> Any:
        return self.raw.observe()

    def judge(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> Verdict:
        raw = self.raw
        if self.destroyed is None:
            emptied = sorted(name for name in self._had_text if not raw.files.get(name, "").strip())
            if emptied:  # its text is gone from the workspace: no tool brings it back
                self.destroyed = f"emptied {', '.join(emptied)}"
        if terminated and raw.submitted:
            from envharness.envs.code_repair import judge_task

            task = self._reference()
            module = raw.files.get(task.path, "")
            success, passed, total = judge_task(task, {task.path: module}, raw.sandbox, raw.allow_weak_isolation)
            if success and (why := self._not_the_agents(task, module)) is not None:
                return Verdict(False, 0.0, why)
            return Verdict(success, passed / total if total else 0.0, "hidden tests pass" if success else "hidden tests fail")
        if terminated or truncated:
            return Verdict(False, 0.0, TIMEOUT if truncated else "terminated without submitting")
        return RUNNING

    @staticmethod
    def _keep_start(key: tuple[Any, ...], passes: int, runs: int) -> None:
        with _STARTS_LOCK:
            if len(_STARTS) > 4096:
                _STARTS.clear()
            before = _STARTS.get(key, (0, 0))
            _STARTS[key] = (before[0] + passes, before[1] + runs)

    def _not_the_agents(self, task: CodeTask, module: str) -> str | None:
        """Why a passing submission is not the agent's success (None if it is).

        The level's start resubmitted with new comments or formatting decided nothing; and
        where setup wrote the start, the submission must pass again and the start fail again,
        each judged afresh: a start that passes now (it reads the clock, or chance) was solved
        without the agent, and a submission that passes only sometimes is not a fix.
        """
        from envharness.envs.code_repair import judge_task

        raw = self.raw
        start = self._start_module
        if same_code(module, task.source if start is None else start):
            return "the submission is the level's start up to comments and formatting: the submission decided nothing"
        if start is None:
            return None
        for run in range(1, RECHECK_RUNS + 1):
            if judge_task(task, {task.path: start}, raw.sandbox, raw.allow_weak_isolation, fresh=True)[0]:
                # The module setup wrote passes now, though it failed when the level was made: solved without the agent.
                # The level is known not to be deterministic: refused from now on.
                self._keep_start((task, start, raw.sandbox, raw.allow_weak_isolation), 1, run)
                return "the level's own start passes the hidden tests now: the submission decided nothing"
        for _ in range(RECHECK_RUNS - 1):
            if not judge_task(task, {task.path: module}, raw.sandbox, raw.allow_weak_isolation, fresh=True)[0]:
                return "the submission passes the hidden tests on some runs only: a fix passes every time it is judged"
        return None

    def open_file(self, path: str) -> None:
        """Show ``path`` (default: the module) as if the agent had just viewed it."""
        raw = self.raw
        path = path or raw.task.path
        if path in raw.files:
            raw.last_output = raw._numbered(path)
            self.note_setup("open_file", path)  # the first observation differs: another start


@register_adapter
class HumanEvalFixAdapter(CodeRepairAdapter):
    """The code-repair adapter for HumanEvalFix: the registry is the built task set; levels are grouped by problem.

    Example:
        >>> import gymnasium as gym, envharness.envs
        >>> env = gym.make("envharness/HumanEvalFix-v0", task="HumanEval/53::arithmetic@10:11")
        >>> adapter = HumanEvalFixAdapter(env)
        >>> _ = env.reset(seed=0); adapter.begin_episode()
        >>> adapter.level_id(), adapter.level_features()["hidden_tests"]
        ('HumanEval/53::arithmetic@10:11', 6.0)
    """

    neutral_kwargs = (*CodeRepairAdapter.neutral_kwargs, "split")  # a split only narrows which levels are drawn

    def _registry(self) -> tuple[CodeTask, ...]:
        from envharness.envs.humaneval import task_set

        return tuple(task_set().tasks)

    @classmethod
    def matches(cls, env_type: type) -> bool:
        from envharness.envs.humaneval import HumanEvalFixEnv

        return issubclass(env_type, HumanEvalFixEnv)
