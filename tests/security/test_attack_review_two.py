"""The second adversarial review of issue 27's fixes: each finding's attack, and what now holds.

- F2: ``OpenFile`` reached the start a one-step ``view`` prefix reaches, under the plain level's id.
- F3: a setup module that fails when the start-solved check samples it and passes seconds
  later (it reads the clock) was a success for an agent that only made a no-op edit.
- F4: spec data that raised raw Python errors (a ``Chain`` nested 100 deep, a non-integer
  ``output_limit``, a non-numeric ``goal_velocity``, a non-numeric ``ReplayPrefix`` action on
  a Box) or hung (a ``GeneratedFrozenLake`` share of frozen tiles that leaves no path).
- F5: agent actions outside a ``Discrete`` space reached the base env (raw ``KeyError``).

F1 (a module that behaves differently while it is judged) is written down in
docs/sandbox.md as not defended: the easy tell is gone (the runner keeps nothing in the
child's ``__main__``), and what remains is the limit of every test-based judge.
"""

from __future__ import annotations

import json
import time

import pytest

import envharness
from envharness import ActionError, EpisodeEndedError, HarnessSpec, SpecError
from envharness.envs.code_repair import run_tests
from envharness.envs.code_tasks import TASKS
from envharness.transforms import Chain, OpenFile, ReplayPrefix

TASK = {t.name: t for t in TASKS}["add"]


def call(tool: str, **arguments: object) -> str:
    return json.dumps({"tool": tool, **arguments})


def test_openfile_names_another_level_like_the_prefix_it_equals():
    plain = envharness.wrap("envharness/CodeRepair-v0", task="add").reset(seed=0)[1]["level_id"]
    opened = envharness.wrap("envharness/CodeRepair-v0", OpenFile(), task="add").reset(seed=0)[1]["level_id"]
    viewed = envharness.wrap("envharness/CodeRepair-v0", ReplayPrefix(actions=[call("view", path="calc.py")]), task="add")
    assert opened != plain and viewed.reset(seed=0)[1]["level_id"] != plain


def test_a_setup_module_that_turns_right_later_is_not_the_agents_success():
    switch = time.time() + 3
    module = f"import time\ndef add(a, b):\n    return a + b if time.time() > {switch} else a - b\n"
    spec = {
        "env_id": "envharness/CodeRepair-v0",
        "env_kwargs": {"task": "add"},
        "transforms": [{"name": "ReplayPrefix", "params": {"actions": [call("replace", path="calc.py", start=1, end=2, text=module)]}}],
    }
    env = HarnessSpec.from_json(json.dumps(spec)).build()
    env.reset(seed=0)  # accepted: at reset the module still fails
    time.sleep(max(0.0, switch - time.time()) + 0.3)
    env.step(call("replace", path="calc.py", start=1, end=1, text="import time  # no-op"))
    *_, info = env.step(call("submit"))
    assert info["verdict"].success is False and "the submission decided nothing" in info["verdict"].reason


def test_a_real_fix_of_a_setup_module_still_succeeds():
    broken = "def add(a, b):\n    return a * b\n"
    env = envharness.wrap(
        "envharness/CodeRepair-v0", ReplayPrefix(actions=[call("replace", path="calc.py", start=1, end=2, text=broken)]), task="add"
    )
    env.reset(seed=0)
    env.step(call("replace", path="calc.py", start=2, end=2, text="    return a + b"))
    *_, info = env.step(call("submit"))
    assert info["verdict"].success is True


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"env_id": "envharness/CodeRepair-v0", "env_kwargs": {"task": "add", "output_limit": "x"}}, "output_limit"),
        ({"env_id": "envharness/CodeRepair-v0", "env_kwargs": {"task": "add", "output_limit": 1.5}}, "output_limit"),
        ({"env_id": "MountainCar-v0", "env_kwargs": {"goal_velocity": "x"}}, "goal_velocity"),
        ({"env_id": "MountainCar-v0", "env_kwargs": {"goal_velocity": float("inf")}}, "goal_velocity"),
        ({"env_id": "envharness/GeneratedFrozenLake-v0", "env_kwargs": {"frozen": [1e-300, 1e-300]}}, "frozen"),
        ({"env_id": "envharness/GeneratedFrozenLake-v0", "env_kwargs": {"sizes": [32], "frozen": [0.05, 0.05]}}, "frozen"),
        ({"env_id": "MountainCarContinuous-v0", "transforms": [{"name": "ReplayPrefix", "params": {"actions": [["x"]]}}]}, "ReplayPrefix"),
    ],
)
def test_bad_spec_data_is_one_line_naming_the_field(spec, field):
    with pytest.raises(envharness.EnvHarnessError) as refused:
        HarnessSpec.from_json(json.dumps(spec)).build().reset(seed=0)
    message = str(refused.value)
    assert "\n" not in message and field in message


def test_a_chain_nested_too_deeply_is_one_line():
    chain: dict = {"name": "Chain", "params": {"env_id": "FrozenLake-v1"}}
    for _ in range(100):
        chain = {"name": "Chain", "params": {"env_id": "FrozenLake-v1", "transforms": [chain]}}
    with pytest.raises(SpecError) as refused:
        HarnessSpec.from_json(json.dumps({"env_id": "FrozenLake-v1", "transforms": [chain]})).build()
    assert "\n" not in str(refused.value) and "nests too deeply" in str(refused.value)


@pytest.mark.parametrize(
    ("env_id", "action"),
    [("FrozenLake-v1", 7), ("FrozenLake-v1", "1"), ("MiniGrid-Empty-5x5-v0", 99), ("Taxi-v4", -1), ("CliffWalking-v1", True)],
)
@pytest.mark.parametrize("stack", ["plain", "reshaped"])
def test_an_action_outside_the_space_is_one_line_and_the_episode_goes_on(env_id, action, stack):
    from envharness.transforms import ActionCost

    env = envharness.wrap(env_id, *([ActionCost(cost=0.1)] if stack == "reshaped" else []))
    env.reset(seed=0)
    with pytest.raises(ActionError, match=r"is not in the action space Discrete"):
        env.step(action)
    assert env.step(0)[4]["verdict"] is not None  # refused before anything happened: the episode goes on
    env.reset(seed=0)
    env.step(0)


def test_an_action_after_the_end_is_still_an_ended_episode():
    env = envharness.wrap("FrozenLake-v1", is_slippery=False, max_episode_steps=1)
    env.reset(seed=0)
    env.step(0)
    with pytest.raises(EpisodeEndedError):
        env.step(99)


def test_the_judged_module_finds_nothing_of_the_runner_in_main():
    probe = "import sys\n_names = sorted(n for n in vars(sys.modules['__main__']) if not n.startswith('__'))\n\ndef add(a, b):\n    return len(_names)\n"
    outcome = run_tests({TASK.path: probe}, "from calc import add\n\ndef test_n():\n    assert add(0, 0) == 1\n", "t.py", "subprocess")
    assert outcome == {"test_n": "pass"}  # only the runner's entry function: no request, channel or encoder


def test_chain_still_builds_at_ordinary_depths():
    env = envharness.wrap("FrozenLake-v1", Chain(env_id="FrozenLake-v1", transforms=[Chain(env_id="FrozenLake-v1").to_spec()]))
    assert env.reset(seed=0)[0] == 0
