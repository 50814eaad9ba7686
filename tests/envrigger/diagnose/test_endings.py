"""How episodes end, in each family's terms: irreversible failures, endings the agent chose, and giving up.

The adapter marks which verdict reasons cannot be undone (lava, a hole, the pole falling, a
failed submit) and which endings the agent chose (a submit); a rollout stores them per
episode with the step limit, and diagnosis finds an agent that gives up: it submits
without success while most of its steps are left.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import envharness
from envharness import HarnessSpec
from envharness.envs.code_tasks import TASKS
from envrigger.diagnose import diagnose
from envrigger.rollout import rollout

CODE = HarnessSpec(env_id="envharness/CodeRepair-v0")
BY_PATH = {task.path: task for task in TASKS}


def fix_plan(task: Any) -> list[str]:
    plan = [json.dumps({"tool": "view", "path": task.path})]
    for start, end, text in sorted(task.fix, reverse=True):
        plan.append(json.dumps({"tool": "replace", "path": task.path, "start": start, "end": end, "text": text}))
    return [*plan, json.dumps({"tool": "submit"})]


class Scripted:
    """Plays a plan per episode, chosen from the task the first observation names."""

    def __init__(self, plan_for: Any) -> None:
        self.plan_for, self.plan = plan_for, []

    def reset(self, seed: int | None) -> None:
        self.plan, self.seed = [], seed

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if not self.plan:
            path = re.search(r'"path": "([^"]+)"', obs).group(1)  # the tools line's example names the module
            self.plan = self.plan_for(self.seed, BY_PATH[path])
        return self.plan.pop(0)


@pytest.mark.parametrize(
    ("env_id", "kwargs", "reason"),
    [("FrozenLake-v1", {"is_slippery": False}, "hole"), ("CartPole-v1", {}, "pole fell"), ("MiniGrid-LavaGapS5-v0", {}, "lava")],
)
def test_an_ending_that_cannot_be_undone_is_stored_as_an_irreversible_failure(tmp_path, env_id, kwargs, reason):
    spec = HarnessSpec(env_id=env_id, env_kwargs=kwargs)
    store = rollout(spec, "random", seeds=range(30), out=tmp_path / "run")
    episodes = list(store.iter_episodes())
    limit = envharness.wrap(env_id, **kwargs).adapter.time_limit()
    assert all(e.step_limit == limit for e in episodes)
    ended = [e for e in episodes if e.reason == reason]
    assert ended and all(e.irreversible == reason and e.agent_ended is False for e in ended)
    assert all(e.irreversible is None for e in episodes if e.reason != reason)  # a timeout or a success is not one


def test_a_failed_submit_is_the_agents_own_irreversible_ending_and_a_timeout_is_neither(tmp_path):
    plans = {0: lambda task: [json.dumps({"tool": "submit"})], 1: lambda task: [json.dumps({"tool": "list"})] * 40}
    store = rollout(CODE, Scripted(lambda seed, task: plans[seed](task)), seeds=[0, 1], out=tmp_path / "run")
    submitted, timed_out = list(store.iter_episodes())
    assert (submitted.reason, submitted.agent_ended, submitted.irreversible) == ("hidden tests fail", True, "hidden tests fail")
    assert (timed_out.reason, timed_out.agent_ended, timed_out.irreversible) == ("timeout", False, None)


def test_a_file_emptied_for_good_makes_a_failed_episode_irreversible_and_a_success_is_never_one(tmp_path):
    def plan(seed: int, task: Any) -> list[str]:
        lines = len(task.source.splitlines())
        wipe = json.dumps({"tool": "replace", "path": task.path, "start": 1, "end": lines, "text": ""})
        return [wipe, *[json.dumps({"tool": "list"})] * 40] if seed == 0 else fix_plan(task)

    store = rollout(CODE, Scripted(plan), seeds=[0, 1], out=tmp_path / "run")
    wiped, fixed = list(store.iter_episodes())
    assert wiped.reason == "timeout" and wiped.irreversible.startswith("emptied ")
    assert fixed.success and fixed.irreversible is None


def test_an_agent_that_submits_at_once_half_the_time_is_found_giving_up(tmp_path):
    def plan(seed: int, task: Any) -> list[str]:
        return [json.dumps({"tool": "submit"})] if seed % 2 else fix_plan(task)

    report = diagnose(rollout(CODE, Scripted(plan), seeds=range(16), out=tmp_path / "run"))
    finding = report.finding("giving_up")
    assert finding is not None and finding.episodes == finding.failures == 8, [f.name for f in report.findings]


def test_an_agent_that_submits_late_is_not_giving_up(tmp_path):
    def plan(seed: int, task: Any) -> list[str]:
        if seed % 2:  # looks around for most of its 30 steps, then submits the module unfixed
            return [*[json.dumps({"tool": "list"})] * 20, json.dumps({"tool": "submit"})]
        return fix_plan(task)

    report = diagnose(rollout(CODE, Scripted(plan), seeds=range(16), out=tmp_path / "run"))
    assert report.finding("giving_up") is None and report.finding("terminal_cause:hidden_tests_fail") is not None
