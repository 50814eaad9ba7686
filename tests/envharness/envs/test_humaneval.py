"""HumanEvalFix: HumanEval's 164 problems as bug-fix levels, judged by their own check() out of the agent's reach."""

from __future__ import annotations

import json
import os

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envharness
from envharness.adapters.base import level_group
from envharness.envs.check_judge import CheckError, judge_check, reference_calls
from envharness.envs.code_repair import judge_task
from envharness.envs.humaneval import SPLITS, HumanEvalFixEnv, problems, split_of, task_set
from envharness.envs.mutants import OPERATORS, mutants
from envharness.spec import HarnessSpec
from envrigger.diagnose import diagnose
from envrigger.loop.config import LoopConfig
from envrigger.loop.levels import LevelSplit, Seeds
from envrigger.policies.planted import HastyCoder
from envrigger.policies.reference import CodeRepairSolver
from envrigger.rollout import rollout

ENV = "envharness/HumanEvalFix-v0"
PROBLEMS = [p["task_id"] for p in problems()]


def solve(env, policy):
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
        done = terminated or truncated
    return info


def test_every_one_of_the_164_problems_is_built_into_levels_and_none_is_refused():
    tasks = task_set()
    assert len(PROBLEMS) == 164 and tasks.refused == []
    assert {t.problem for t in tasks.tasks} == set(PROBLEMS)
    assert all(level_group(t.name) == t.problem and "::" in t.name for t in tasks.tasks)
    assert len({t.name for t in tasks.tasks}) == len(tasks.tasks) >= 164
    # The bugs come from many operators, not one.
    used = {t.name.split("::")[1].split("@")[0] for t in tasks.tasks}
    assert used <= set(OPERATORS) and len(used) >= 8


@pytest.mark.parametrize("problem", PROBLEMS)
def test_the_canonical_solution_passes_and_every_kept_mutant_fails_under_the_judge(problem):
    levels = [t for t in task_set().tasks if t.problem == problem]
    assert 1 <= len(levels) <= 3
    assert judge_task(levels[0], {levels[0].path: levels[0].trusted}, fresh=True)[0] is True
    for task in levels:
        assert judge_task(task, {task.path: task.source}, fresh=True)[0] is False, task.name
        # The level's fix, applied as the reference solver applies it, is the canonical line back.
        ((line, end, text),) = task.fix
        lines = task.source.splitlines()
        lines[line - 1 : end] = [text]
        assert "\n".join(lines) + "\n" == task.trusted


@pytest.mark.parametrize("problem", ["HumanEval/2", "HumanEval/32", "HumanEval/53", "HumanEval/151"])
def test_the_judge_runs_on_docker_too(problem, docker_engine):
    task = next(t for t in task_set().tasks if t.problem == problem)
    assert judge_task(task, {task.path: task.trusted}, "docker", fresh=True)[0] is True
    assert judge_task(task, {task.path: task.source}, "docker", fresh=True)[0] is False


@pytest.fixture
def docker_engine():
    from envharness.sandbox import DockerSandbox

    if not DockerSandbox.available():
        if os.environ.get("CI"):
            pytest.fail("CI must provide a Docker engine (.ci/run installs docker.io and starts dockerd)")
        pytest.skip("no Docker engine on this machine (install docker.io and start dockerd)")


def test_the_reference_solver_fixes_a_level_through_the_tools_and_a_hasty_coder_that_edits_nothing_fails():
    name = "HumanEval/53::arithmetic@10:11"
    env = envharness.wrap(ENV, task=name)
    info = solve(env, CodeRepairSolver(env))
    assert info["verdict"].success and info["verdict"].reason == "hidden tests pass"
    env = envharness.wrap(ENV, task=name)
    info = solve(env, HastyCoder(env, p_right=0.0, p_typo=0.0))
    assert info["verdict"].success is False and info["verdict"].reason == "hidden tests fail"


def test_visible_tests_are_the_docstring_examples_and_run_with_the_tools():
    env = envharness.wrap(ENV, task="HumanEval/0::negate_condition@14:15")
    env.reset(seed=0)
    obs, *_ = env.step(json.dumps({"tool": "view", "path": "test_visible.py"}))
    assert "has_close_elements([1.0, 2.0, 3.0], 0.5) == False" in obs
    obs, _, _, _, info = env.step(json.dumps({"tool": "run_tests"}))
    assert info["tests_passed"] + info["tests_failed"] == 2 and info["tests_failed"] >= 1  # the bug shows


def test_the_wrapped_env_is_a_compliant_gymnasium_env_with_level_ids_naming_problem_and_mutation():
    env = gym.make(ENV)
    check_env(env.unwrapped, skip_render_check=True)
    wrapped = envharness.wrap(ENV)
    ids = {wrapped.reset(seed=seed)[1]["level_id"] for seed in range(40)}
    assert len(ids) > 30 and all("::" in i and i.split("::")[0].startswith("HumanEval/") for i in ids)


def test_a_split_draws_only_its_own_problems_and_the_three_splits_are_disjoint_by_problem():
    by_split = {split: {t.problem for t in task_set().by_split(split)} for split in SPLITS}
    assert set().union(*by_split.values()) == set(PROBLEMS)
    assert not (by_split["train"] & by_split["validation"] or by_split["train"] & by_split["heldout"])
    assert not by_split["validation"] & by_split["heldout"]
    assert 0.45 < len(by_split["train"]) / 164 < 0.75 and len(by_split["heldout"]) >= 20
    env = envharness.wrap(ENV, split="heldout")
    drawn = {level_group(env.reset(seed=seed)[1]["level_id"]) for seed in range(30)}
    assert drawn <= by_split["heldout"] and all(split_of(p) == "heldout" for p in drawn)


def test_level_split_holds_out_whole_problems_so_training_never_sees_another_bug_of_a_held_out_problem():
    base = HarnessSpec(env_id=ENV)
    config = LoopConfig(spec=base, eval_episodes=10, val_episodes=10)
    split = LevelSplit.make(base, config, probe=60)
    held = {level_group(level) for level in split.heldout_levels + split.validation_levels}
    seeds = Seeds(base, 0, split.reserved)
    trained = {seeds.level(seeds.next()) for _ in range(40)}
    seeds.close()
    assert trained and not {level_group(level) for level in trained} & held
    # Another mutation of a held-out problem counts as seen.
    problem = split.heldout_levels[0].split("::")[0]
    sibling = next(
        t.name for t in task_set().tasks if t.problem == problem and t.name not in split.heldout_levels + split.validation_levels
    )
    with pytest.raises(Exception, match="level overlap"):
        split.check({"original:train": {sibling}})


def test_bad_arguments_get_one_clear_line():
    with pytest.raises(ValueError, match="split: got 'test'; use all, train, validation, heldout"):
        HumanEvalFixEnv(split="test")
    with pytest.raises(ValueError, match=r"task 'HumanEval/999' is unknown; use one of HumanEval/0::.* \(476 in all\)|unknown"):
        HumanEvalFixEnv(task="HumanEval/999")


def test_diagnose_finds_the_hasty_coders_weakness_on_the_real_task_set(tmp_path):
    run = rollout(ENV, lambda env: HastyCoder(env, p_right=0.5, p_typo=0.0), seeds=range(24), out=tmp_path / "hasty")
    report = diagnose(run)
    failing = report.finding("terminal_cause:hidden_tests_fail")
    assert failing is not None and 0.2 < failing.rate < 0.8


def test_a_test_whose_calls_depend_on_earlier_answers_is_judged_over_rounds():
    trusted = "def step(x):\n    return x + 1\n"
    test = "def check(candidate):\n    x = 0\n    for _ in range(4):\n        x = candidate(x)\n    assert x == 4\n"
    calls = reference_calls(trusted, test, "step", seed=0)
    right = judge_check({"m.py": "def step(x):\n    return 1 + x\n"}, "m", "step", trusted, test, 0, calls)
    assert right.passed and right.rounds == 1
    # A wrong first answer changes every later call's argument: the judge asks again, and decides.
    wrong = judge_check({"m.py": "def step(x):\n    return x + 2\n"}, "m", "step", trusted, test, 0, calls)
    assert not wrong.passed and wrong.rounds > 1 and "AssertionError" in wrong.why


def test_the_random_inputs_of_a_check_are_seeded_so_a_submission_is_judged_the_same_every_time():
    task = next(t for t in task_set().tasks if t.problem == "HumanEval/53")
    calls = json.loads(task.calls)
    assert reference_calls(task.trusted, task.hidden_tests, task.entry_point, task.seed) == calls
    assert len(calls) == 105  # five literal calls and a hundred random ones


def test_a_benchmark_test_the_canonical_solution_fails_is_refused_with_the_reason():
    with pytest.raises(CheckError, match="fails its test: AssertionError at line 2"):
        reference_calls("def f(x):\n    return x\n", "def check(candidate):\n    assert candidate(1) == 2\n", "f", seed=0)


def test_mutation_operators_change_one_line_and_keep_the_rest():
    source = "def f(xs):\n    total = 0\n    for x in xs:\n        if x > 0 and not x == 3:\n            total += x\n    return total\n"
    found = mutants(source, first_line=2)
    assert {m.operator for m in found} >= {"comparison", "boolean", "drop_not", "arithmetic", "off_by_one", "negate_condition"}
    for mutant in found:
        changed = mutant.apply(source).splitlines()
        original = source.splitlines()
        differing = [i for i, (a, b) in enumerate(zip(changed, original)) if a != b]
        assert len(differing) == 1 or mutant.operator == "early_return"


def test_the_loop_runs_level_disjoint_on_the_real_task_set_and_never_plays_a_held_out_problem(tmp_path, monkeypatch):
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("openai", reason='the chat agent needs the llm extra: pip install "envharness[llm]"')
    from envrigger.agents.scripted import ChatServer, repair_model

    monkeypatch.setenv("OPENAI_API_KEY", "local")
    with ChatServer(repair_model, models=("weak",)) as server:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "envrigger"), "run", ENV, "--learner", "none", "--agent", "chat", "--base-url", server.url,
             "--model", "weak", "--arms", "rigger", "--rounds", "2", "--budget-steps", "100", "--collect-episodes", "20",
             "--val-episodes", "10", "--eval-episodes", "12", "--candidates", "2", "--backend", "serial", "-o", str(tmp_path / "run")],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads((tmp_path / "run" / "levels.json").read_text())
    held = {level_group(level) for level in saved["heldout_levels"] + saved["validation_levels"]}
    assert saved["disjoint"] and len(held) >= 15
    played = {
        level for path in (tmp_path / "run").glob("levels-round-*.json") for used in json.loads(path.read_text()).values() for level in used
    }
    assert played and not {level_group(level) for level in played} & held  # not one bug of a held-out problem
    diagnosis = json.loads((tmp_path / "run" / "round-1" / "diagnosis.json").read_text())
    assert "terminal_cause:hidden_tests_fail" in {f["name"] for f in diagnosis["findings"]}
