"""An env family is one registered unit: which parts each family has, and which part each env we use gets."""

from __future__ import annotations

import importlib.util

import pytest

import envharness
from envharness.adapters import adapter_families
from envharness.spec import HarnessSpec
from envharness.transforms import TRANSFORMS
from envrigger.agents import AgentHarness, default_harness, text_view
from envrigger.family_registry import Family, MissingPart, families, family, family_of, register_family
from envrigger.loop.solvability import search_levels, searchable
from envrigger.policies import reference_policy

needs_textworld = pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="needs the textworld extra")


def test_each_family_has_exactly_its_parts():
    assert {key: found.parts() for key, found in families().items()} == {
        "classic_control": ("reference_solver",),
        "code_repair": ("reference_solver", "text_view", "agent_harness"),
        "generic": ("text_view",),
        "minigrid": ("reference_solver", "search"),
        "textworld": ("reference_solver", "text_view", "agent_harness"),
        "toy_text": ("reference_solver",),
    }


def test_every_adapter_family_has_a_family_module_and_nothing_else_does():
    assert sorted(families()) == sorted(adapter_families())


def test_transforms_name_only_registered_families():
    named = {key for cls in TRANSFORMS.values() if cls.families != "any" for key in cls.families}
    assert named <= set(adapter_families())
    assert {name for name, cls in TRANSFORMS.items() if cls.works_on_family("textworld") and cls.families != "any"} == {
        "BlockVerb",
        "TextHint",
        "TruncateText",
    }


# env id, kwargs -> reference solver, text view kind (or None), default harness (own or plain), searchable
USED = [
    ("MiniGrid-DoorKey-6x6-v0", {}, "MiniGridPlanner", None, "plain", True),
    ("MiniGrid-Dynamic-Obstacles-Random-6x6-v0", {}, "MiniGridPlanner", None, "plain", True),
    ("MiniGrid-KeyCorridorS3R2-v0", {}, "MiniGridPlanner", None, "plain", True),
    ("FrozenLake-v1", {}, "TabularPlanner", None, "plain", False),
    ("envharness/GeneratedFrozenLake-v0", {}, "TabularPlanner", None, "plain", False),
    ("Taxi-v4", {}, "TabularPlanner", None, "plain", False),
    ("CartPole-v1", {}, "CartPoleController", None, "plain", False),
    ("envharness/PhysicsCartPole-v0", {}, "CartPoleController", None, "plain", False),
    ("MountainCar-v0", {}, "MountainCarController", None, "plain", False),
    ("envharness/CodeRepair-v0", {"task": "add"}, "CodeRepairSolver", "tool_calls", "own", False),
    ("envharness/HumanEvalFix-v0", {}, "CodeRepairSolver", "tool_calls", "own", False),
]


@pytest.mark.parametrize(("env_id", "kwargs", "solver", "view", "harness", "search"), USED, ids=[u[0] for u in USED])
def test_each_env_we_use_gets_its_familys_parts(env_id, kwargs, solver, view, harness, search):
    _check_parts(env_id, kwargs, solver, view, harness, search)


@needs_textworld
def test_textworld_gets_its_familys_parts():
    _check_parts("envharness/TextWorld-v0", {"levels": [3], "games_per_level": 2}, "TextWorldSolver", "commands", "own", False)


def _check_parts(env_id, kwargs, solver, view, harness, search):
    spec = HarnessSpec(env_id=env_id, env_kwargs=kwargs)
    env = spec.build()
    try:
        assert type(reference_policy(env)).__name__ == solver
        if view is None:
            with pytest.raises(envharness.SpecError, match=rf"family '{family_of(env).key}' has no text view"):
                text_view(env)
        else:
            assert text_view(env).kind == view
        assert (default_harness(env_id) != AgentHarness()) == (harness == "own")
        assert searchable(spec) is search
    finally:
        env.close()


def test_a_missing_part_is_a_named_absence():
    with pytest.raises(MissingPart, match="family 'generic' has no reference solver"):
        reference_policy(envharness.wrap("Pendulum-v1"))
    with pytest.raises(MissingPart, match="family 'classic_control' has no reference solver for AcrobotEnv"):
        reference_policy(envharness.wrap("Acrobot-v1"))
    with pytest.raises(MissingPart, match="family 'toy_text' has no level search"):
        search_levels(HarnessSpec(env_id="FrozenLake-v1"), [0])


def test_an_adapter_family_nothing_registered_has_no_parts():
    assert family("not-a-family").parts() == ()
    with pytest.raises(MissingPart, match="family 'not-a-family' has no default agent harness"):
        family("not-a-family").part("agent_harness")


def test_a_second_family_under_one_key_is_refused():
    with pytest.raises(ValueError, match="family 'minigrid' is registered twice"):
        register_family(Family("minigrid"))
    assert family("minigrid").has("search")
