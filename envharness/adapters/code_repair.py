"""Adapter for the code-repair benchmark (:class:`envharness.envs.code_repair.CodeRepairEnv`).

Contains :class:`CodeRepairAdapter`. Its verifier judges the agent's module by the task's
hidden tests (probes run in the sandbox, expected values compared on the host), with the hidden tests copied from the task registry when
the adapter was made, so nothing that happens during an episode can change what they test.
"""

from __future__ import annotations

from typing import Any

from envharness.adapters.base import Adapter, digest
from envharness.envs.code_tasks import CodeTask
from envharness.toolcall import tool_name
from envharness.verifier import RUNNING, TIMEOUT, Verdict


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
    def matches(cls, raw: Any) -> bool:
        from envharness.envs.code_repair import CodeRepairEnv

        return isinstance(raw, CodeRepairEnv)

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
        from envharness.envs.code_repair import judge_task

        task = self._reference()
        if judge_task(task, {task.path: self.raw.files.get(task.path, "")}, self.raw.sandbox, self.raw.allow_weak_isolation)[0]:
            return "the module already passes the hidden tests"
        return None

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
            success, passed, total = judge_task(task, {task.path: raw.files.get(task.path, "")}, raw.sandbox, raw.allow_weak_isolation)
            start = self._start_module
            if success and start is not None and judge_task(task, {task.path: start}, raw.sandbox, raw.allow_weak_isolation, fresh=True)[0]:
                # The module setup wrote passes now, though it failed at reset (it reads the clock, or chance):
                # the level was solved without the agent, and this success is not the agent's.
                return Verdict(False, 0.0, "the level's own start passes the hidden tests now: the submission decided nothing")
            return Verdict(success, passed / total if total else 0.0, "hidden tests pass" if success else "hidden tests fail")
        if terminated or truncated:
            return Verdict(False, 0.0, TIMEOUT if truncated else "terminated without submitting")
        return RUNNING

    def open_file(self, path: str) -> None:
        """Show ``path`` (default: the module) as if the agent had just viewed it."""
        raw = self.raw
        path = path or raw.task.path
        if path in raw.files:
            raw.last_output = raw._numbered(path)
            self.note_setup("open_file", path)  # the first observation differs: another start


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
    def matches(cls, raw: Any) -> bool:
        from envharness.envs.humaneval import HumanEvalFixEnv

        return isinstance(raw, HumanEvalFixEnv)
