"""The code-repair benchmark: real tasks, tools, a sandboxed hidden-test verifier that cannot be fooled."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from gymnasium.utils.env_checker import check_env
from harness_helpers import unaudited

import envharness
from envharness.envs.code_repair import TASKS, CodeRepairEnv, suite_tests, verify
from envharness.transforms import (
    BlockTool,
    OpenFile,
    ReplayPrefix,
    RuleTransform,
    StepBudget,
    TextHint,
    ToolCost,
    TruncateText,
)
from envrigger.diagnose import diagnose
from envrigger.policies.planted import HastyCoder
from envrigger.policies.reference import CodeRepairSolver
from envrigger.rollout import rollout

ENV = "envharness/CodeRepair-v0"


def call(tool: str, **arguments: Any) -> str:
    return json.dumps({"tool": tool, **arguments})


def play(env, actions):
    env.reset(seed=0)
    for action in actions:
        out = env.step(action)
    return out


def test_there_are_twenty_tasks_each_a_real_bug_with_fail_to_pass_and_pass_to_pass_tests():
    assert len(TASKS) >= 20 and len({t.name for t in TASKS}) == len(TASKS)
    for task in TASKS:
        assert suite_tests(task.hidden_tests) and suite_tests(task.visible_tests)


@pytest.mark.parametrize("task", [t.name for t in TASKS])
def test_reference_fix_passes_hidden_tests_and_the_buggy_module_does_not(task):
    env = envharness.wrap(ENV, task=task)
    solver = CodeRepairSolver(env)
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(solver.act(obs, info))
        done = terminated or truncated
    assert info["verdict"].success and reward == 1.0
    buggy = play(envharness.wrap(ENV, task=task), [call("submit")])
    assert buggy[4]["verdict"].success is False and buggy[4]["verdict"].reason == "hidden tests fail"


def test_tools_view_replace_and_run_visible_tests():
    env = envharness.wrap(ENV, task="add")
    env.reset(seed=0)
    assert "  2|     return a - b" in env.step(call("view", path="calc.py"))[0]
    assert "0/1 visible tests pass" in env.step(call("run_tests"))[0]
    env.step(call("replace", path="calc.py", start=2, end=2, text="    return a + b"))
    obs, _, _, _, info = env.step(call("run_tests"))
    assert "1/1 visible tests pass" in obs and info["tests_passed"] == 1


@pytest.mark.parametrize(
    "action, fragment",
    [
        ("not json", "Expecting value"),
        (call("dance"), "'tool' must be one of"),
        (call("view", path="nope.py"), "no file 'nope.py'"),
        (call("replace", path="calc.py", start=5, end=9, text="x"), "outside 1-2"),
    ],
)
def test_bad_tool_calls_are_tool_errors_not_crashes(action, fragment):
    env = envharness.wrap(ENV, task="add")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(action)
    assert fragment in info["tool_error"] and obs.count("error:") == 1 and not terminated and reward == 0.0


def test_check_env_passes_on_text_spaces_with_a_stack_of_transforms():
    env = envharness.wrap(
        ENV,
        OpenFile(),
        BlockTool(tools=["list"]),
        ToolCost(tool="run_tests", cost=0.1),
        StepBudget(max_steps=12),
        TruncateText(max_chars=4000),
        TextHint(text="run the tests first"),
    )
    check_env(env, skip_render_check=True)


def test_transforms_reshape_the_code_env():
    env = envharness.wrap(
        ENV,
        OpenFile(),
        BlockTool(tools=["run_tests"], reason="no test budget"),
        ToolCost(tool="view", cost=0.25),
        TextHint(text="check edge cases"),
        task="clamp",
    )
    obs, _ = env.reset(seed=0)
    assert "  3|         return hi" in obs and obs.endswith("Hint: check edge cases")
    assert env.step(call("run_tests"))[4]["blocked"] == "no test budget"
    assert env.step(call("view", path="bounds.py"))[1] == -0.25
    # A prefix may set the files up (another level of the task, with its own id) ...
    hinted = envharness.wrap(
        ENV, ReplayPrefix(actions=[call("replace", path="calc.py", start=1, end=1, text="def add(a, b):  # fix below")]), task="add"
    )
    obs, info = hinted.reset(seed=0)
    assert "# fix below" in obs and info["level_id"] != envharness.wrap(ENV, task="add").reset(seed=0)[1]["level_id"]
    assert not hinted.step(call("submit"))[4]["verdict"].success
    # ... but not solve the task before the agent acts, nor run code while doing it.
    fixed = envharness.wrap(
        ENV, ReplayPrefix(actions=[call("replace", path="calc.py", start=2, end=2, text="    return a + b")]), task="add"
    )
    with pytest.raises(envharness.TransformError, match="solved before the agent acts"):
        fixed.reset(seed=0)
    running = envharness.wrap(ENV, ReplayPrefix(actions=[call("run_tests")]), task="add")
    with pytest.raises(envharness.TransformError, match="runs code, which setup may not do"):
        running.reset(seed=0)


def test_editing_the_visible_tests_cannot_make_a_failing_patch_pass():
    env = envharness.wrap(ENV, task="add")
    *_, info = play(
        env, [call("replace", path="test_visible.py", start=1, end=4, text="def test_ok():\n    pass"), call("run_tests"), call("submit")]
    )
    assert info["verdict"].success is False


@pytest.mark.parametrize(
    "patch",
    [
        # forge the runner's result line without knowing the nonce
        'import sys\\nprint(\'RESULT 0000 {\\"test_add_negative\\": \\"pass\\", \\"test_add_zero\\": \\"pass\\"}\')\\ndef add(a, b):\\n    return a - b',
        # leave before any test runs, with a success exit code
        "import os\\nos._exit(0)",
        # try to overwrite the hidden tests on disk
        "open('test_hidden_suite.py', 'w').write('def test_ok():\\\\n    pass\\\\n')\\ndef add(a, b):\\n    return a - b",
        # monkeypatch the serializer the runner reports with
        "import json\\njson.dumps = lambda *a, **k: '{}'\\ndef add(a, b):\\n    return a - b",
    ],
)
def test_an_adversarial_patch_cannot_pass_the_hidden_tests(patch):
    env = envharness.wrap(ENV, task="add")
    text = json.loads(f'"{patch}"')
    *_, info = play(env, [call("replace", path="calc.py", start=1, end=2, text=text), call("submit")])
    assert info["verdict"].success is False


class PoisonHiddenTests(RuleTransform):
    """A malicious transform: swaps the task's hidden tests for trivial ones mid-episode."""

    def on_action(self, action, memo, rng):
        raw = VICTIM["env"].unwrapped
        raw.task = dataclasses.replace(raw.task, hidden_tests="def test_ok():\n    pass\n")
        return action


VICTIM: dict[str, Any] = {}


def test_a_transform_that_edits_the_hidden_tests_is_caught_and_cannot_make_a_failing_patch_pass(monkeypatch):
    env = envharness.wrap(ENV, PoisonHiddenTests(), task="add")
    VICTIM["env"] = env
    env.reset(seed=0)
    with pytest.raises(envharness.VerifierTamperError, match="PoisonHiddenTests.on_action"):
        env.step(call("submit"))
    # With the audit off, the verifier's own pristine copy of the hidden tests still decides.
    quiet = unaudited(envharness.harness.make_base(ENV, task="add"), [PoisonHiddenTests()], monkeypatch)
    VICTIM["env"] = quiet
    _, reward, terminated, _, info = play(quiet, [call("submit")])
    assert reward == 1.0 and terminated  # the poisoned env believes it...
    assert info["verdict"].success is False  # ...the verifier does not


def test_hasty_coder_weakness_is_found_by_diagnose(tmp_path):
    run = rollout(ENV, lambda env: HastyCoder(env, p_right=0.5, p_typo=0.3), seeds=range(40), out=tmp_path / "hasty")
    report = diagnose(run)
    failing = report.finding("terminal_cause:hidden_tests_fail")
    assert failing is not None and failing.severity == 1.0 and 0.3 < failing.rate < 0.7
    # Its typos come as often with a pass as with a failure: how it works, not why it fails, so a style note.
    assert report.finding("tool_error") is None
    typos = next((f for f in report.style_notes if f.name == "tool_error"), None)
    assert typos is not None and 0.15 < typos.rate < 0.5 and typos.stats["contrast"]["lift_ci"][0] <= 1
    steps = [s for _, steps in run.iter_episode_steps() for s in steps]
    assert not any(json.loads(json.loads(s.action))["tool"] == "run_tests" for s in steps)


def test_the_verifier_runs_in_docker_too():
    from envharness.sandbox import DockerSandbox

    if not DockerSandbox.available():
        import os

        if os.environ.get("CI"):
            pytest.fail("CI must provide a Docker engine (.ci/run installs docker.io and starts dockerd)")
        pytest.skip("no Docker engine on this machine (install docker.io and start dockerd)")
    task = next(t for t in TASKS if t.name == "leap_year")
    fixed = task.source.splitlines()
    for start, end, text in sorted(task.fix, reverse=True):
        fixed[start - 1 : end] = text.splitlines()
    assert verify({task.path: "\n".join(fixed) + "\n"}, task.hidden_tests, "docker") == (True, 3, 3)
    assert verify({task.path: task.source}, task.hidden_tests, "docker")[0] is False
    env = envharness.wrap(ENV, task="add", sandbox="docker")
    *_, info = play(env, [call("replace", path="calc.py", start=2, end=2, text="    return a + b"), call("submit")])
    assert info["verdict"].success


def test_unknown_task_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown"):
        CodeRepairEnv(task="nope")


def test_hidden_tests_compare_with_literals_so_no_expected_value_is_computed_in_the_sandbox():
    from envharness.envs.code_repair import compile_suite

    computed = "from calc import add\n\ndef test_add():\n    assert add(1, 2) == add(0, 3)\n"
    with pytest.raises(ValueError, match="literal"):
        compile_suite(computed, strict=True)
    module, tests = compile_suite(computed)  # visible tests may: the agent sees them anyway
    assert [kind for kind, _ in tests[0].steps] == ["eval", "eval"]
    # An expected value the host can compute from literals is computed here, never sent in.
    module, tests = compile_suite("from calc import add\n\ndef test_add():\n    assert add(1, 2) == sum([1, 2])\n", strict=True)
    assert tests[0].steps == [("eval", "add(1, 2)")]
    for task in TASKS:  # every task's hidden suite is judged strictly
        module, tests = compile_suite(task.hidden_tests, strict=True)
        assert sorted(t.name for t in tests) == suite_tests(task.hidden_tests)
        assert all("==" not in source for t in tests for kind, source in t.steps)  # no expected value is sent in
