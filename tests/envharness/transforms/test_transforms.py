"""The catalog: every transform serializes, mutates within bounds, and does what it says."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import envharness
from envharness.transforms import (
    KINDS,
    TRANSFORMS,
    ActionCost,
    ActionSlip,
    AddLava,
    AddWalls,
    BlockAction,
    BlockTool,
    BlockVerb,
    Chain,
    DelayObservation,
    DemoStart,
    DropField,
    Flatten,
    FrozenLakeMap,
    ImageOnly,
    InitialStateNoise,
    MaskObservation,
    MoveAgent,
    MoveGoal,
    ObservationNoise,
    OpenFile,
    PartialView,
    PhysicsParams,
    RemapActions,
    RemoveWalls,
    ReplayPrefix,
    StepBudget,
    TerminateOn,
    TextHint,
    ToolCost,
    TruncateText,
    WalkthroughStart,
    transform_from_spec,
)
from envharness.transforms.base import field_bounds

EXAMPLES = [
    MoveGoal(min_dist=2, max_dist=6),
    MoveAgent(min_dist=1, max_dist=4),
    AddWalls(count=3),
    RemoveWalls(count=4),
    AddLava(count=2),
    FrozenLakeMap(add_holes=2, remove_holes=1),
    PhysicsParams(pole_length=0.8, gravity=12.0),
    InitialStateNoise(scale=0.05),
    ReplayPrefix(actions=[2, 2, 1]),
    DemoStart(demos=[{"seed": 0, "actions": [2, 2, 1, 1, 1, 2]}], min_share=0.25, max_share=0.75),
    WalkthroughStart(min_share=0.25, max_share=0.75),
    BlockAction(actions=[0, 3], reason="blocked"),
    ActionSlip(p=0.2),
    StepBudget(max_steps=40),
    ActionCost(cost=0.1, actions=[1]),
    TerminateOn(event="revisit", patience=4),
    RemapActions(mapping={0: 1, 1: 0}),
    ObservationNoise(std=0.1),
    MaskObservation(indices=[1, 3]),
    PartialView(radius=2),
    TextHint(text="look for the key"),
    DelayObservation(steps=2),
    DropField(field="direction"),
    ImageOnly(field="image"),
    Flatten(),
    Chain(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False}),
    OpenFile(path="calc.py"),
    BlockTool(tools=["run_tests"]),
    ToolCost(tool="run_tests", cost=0.1),
    TruncateText(max_chars=300),
    BlockVerb(verbs=["look", "inventory"]),
]


def test_catalog_has_at_least_sixteen_transforms_of_all_four_kinds():
    assert len(TRANSFORMS) >= 16
    assert {cls.kind for cls in TRANSFORMS.values()} == set(KINDS)


def test_every_registered_transform_has_an_example_here():
    assert {t.name for t in EXAMPLES} == set(TRANSFORMS)


def test_every_transform_is_documented_in_the_catalog_page():
    page = (Path(__file__).parents[3] / "docs" / "transforms.md").read_text()
    missing = [name for name in TRANSFORMS if f"`{name}" not in page]
    assert not missing


@pytest.mark.parametrize("transform", EXAMPLES, ids=lambda t: t.name)
def test_spec_round_trip_rebuilds_an_equal_transform(transform):
    import json

    assert transform_from_spec(json.loads(json.dumps(transform.to_spec()))) == transform


@pytest.mark.parametrize("transform", EXAMPLES, ids=lambda t: t.name)
def test_mutate_is_pure_seeded_and_within_bounds(transform):
    before = transform.model_dump()
    first = [transform.mutate(np.random.default_rng(s)) for s in range(30)]
    again = [transform.mutate(np.random.default_rng(s)) for s in range(30)]
    assert transform.model_dump() == before
    assert first == again
    for child in first:
        assert type(child) is type(transform)
        for name, field in type(child).model_fields.items():
            value = getattr(child, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                lo, hi = field_bounds(field)
                assert lo <= value <= hi
    numeric = any(field.annotation in (int, float) or field.annotation == float | None for field in type(transform).model_fields.values())
    if numeric:
        assert any(child != transform for child in first)


@pytest.mark.parametrize("distance", [1, 3, 6])
def test_move_goal_places_the_goal_at_the_asked_distance(distance):
    env = envharness.wrap("MiniGrid-Empty-8x8-v0", MoveGoal(min_dist=distance, max_dist=distance))
    assert {env.reset(seed=s)[1]["level"]["goal_distance"] for s in range(5)} == {float(distance)}


def test_move_agent_on_frozenlake_starts_near_the_goal():
    env = envharness.wrap("FrozenLake-v1", MoveAgent(min_dist=2, max_dist=2), map_name="8x8")
    starts = set()
    for s in range(10):
        obs, info = env.reset(seed=s)
        assert info["level"]["goal_distance"] == 2.0
        starts.add(obs)
    assert len(starts) > 1


def test_added_walls_and_lava_keep_the_level_solvable():
    env = envharness.wrap("MiniGrid-Empty-8x8-v0", AddWalls(count=8), AddLava(count=6))
    for s in range(10):
        level = env.reset(seed=s)[1]["level"]
        assert (level["n_walls"], level["n_lava"]) == (8.0, 6.0)
        assert level["goal_distance"] > 0


def test_frozenlake_map_keeps_a_path_even_when_crowded():
    env = envharness.wrap("FrozenLake-v1", FrozenLakeMap(add_holes=30), map_name="8x8")
    for s in range(5):
        assert env.reset(seed=s)[1]["level"]["goal_distance"] > 0


def test_remove_walls_opens_fourrooms():
    assert envharness.wrap("MiniGrid-FourRooms-v0", RemoveWalls(count=50)).reset(seed=0)[1]["level"]["n_walls"] == 0


def test_physics_params_change_the_dynamics():
    actions = [0] * 3

    def final(env):
        env.reset(seed=0)
        return [env.step(a)[0] for a in actions][-1]

    plain = final(envharness.wrap("CartPole-v1"))
    heavy = final(envharness.wrap("CartPole-v1", PhysicsParams(gravity=30.0, pole_length=0.2)))
    assert not np.allclose(plain, heavy)


def test_action_slip_replaces_about_p_of_the_actions():
    env = envharness.wrap("CliffWalking-v1", ActionSlip(p=0.3))
    env.reset(seed=0)
    slipped = 0
    for _ in range(2000):
        *_, terminated, truncated, info = env.step(0)
        slipped += "slipped_to" in info
        if terminated or truncated:  # CliffWalking episodes end after 200 steps
            env.reset()
    assert 0.25 < slipped / 2000 < 0.35


def test_remap_actions_relabels_the_agent_actions():
    env = envharness.wrap("FrozenLake-v1", RemapActions(mapping={1: 2, 2: 1}), is_slippery=False)
    env.reset(seed=0)
    assert env.step(1)[0] == 1  # "down" now moves right


def test_terminate_on_revisit_ends_an_oscillating_agent():
    env = envharness.wrap("FrozenLake-v1", TerminateOn(event="revisit", patience=3), is_slippery=False)
    env.reset(seed=0)
    ends = [env.step(a)[2] for a in (2, 0, 2, 0)]
    assert ends == [False, False, False, True]


def test_terminate_on_blocked_counts_refusals():
    env = envharness.wrap("FrozenLake-v1", BlockAction(actions=[3]), TerminateOn(event="blocked", patience=2))
    env.reset(seed=0)
    _, _, first, _, _ = env.step(3)
    _, _, second, _, info = env.step(3)
    assert (first, second) == (False, True) and info["verdict"].reason == "ended: blocked"


def test_delay_observation_lags_by_the_asked_steps():
    env = envharness.wrap("FrozenLake-v1", DelayObservation(steps=2), is_slippery=False)
    assert env.reset(seed=0)[0] == 0
    assert [env.step(2)[0] for _ in range(3)] == [0, 0, 1]


def test_partial_view_hides_far_cells():
    wide = envharness.wrap("MiniGrid-FourRooms-v0").reset(seed=0)[0]["image"]
    narrow = envharness.wrap("MiniGrid-FourRooms-v0", PartialView(radius=1)).reset(seed=0)[0]["image"]
    assert (narrow != 0).any(axis=2).sum() <= 6 < (wide != 0).any(axis=2).sum()


def test_initial_state_noise_spreads_the_start_states():
    env = envharness.wrap("MountainCar-v0", InitialStateNoise(scale=0.2))
    starts = [env.reset(seed=s)[0] for s in range(20)]
    assert np.std([s[1] for s in starts]) > 0  # velocity starts at exactly 0 without noise
    assert all(env.observation_space.contains(s) for s in starts)


def test_chain_succeeds_only_when_both_segments_succeed():
    env = envharness.wrap(
        "FrozenLake-v1",
        Chain(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False}, transforms=[MoveGoal(min_dist=1, max_dist=1).to_spec()]),
        is_slippery=False,
    )
    env.reset(seed=0)
    path = (1, 1, 2, 2, 1, 2)
    for action in path:
        obs, _, terminated, _, info = env.step(action)
    assert not terminated and info["segment"] == 1
    # In segment B the goal sits one step away; find the step that reaches it.
    linked = env._links[0].unwrapped
    goal = int(np.flatnonzero(linked.desc.ravel() == b"G")[0])
    row, col = divmod(obs, 4)
    grow, gcol = divmod(goal, 4)
    action = {(0, -1): 0, (1, 0): 1, (0, 1): 2, (-1, 0): 3}[(grow - row, gcol - col)]
    _, _, terminated, _, info = env.step(action)
    assert terminated and info["verdict"].success and info["verdict"].reason == "all linked segments succeeded"


def test_chain_failure_in_the_second_segment_fails_the_episode():
    env = envharness.wrap("FrozenLake-v1", Chain(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False}), is_slippery=False)
    env.reset(seed=0)
    for action in (1, 1, 2, 2, 1, 2):
        env.step(action)
    env.step(2)
    _, _, terminated, _, info = env.step(1)  # into the hole at (1, 1)
    assert terminated and not info["verdict"].success and info["verdict"].reason == "segment 2: hole"


def test_chain_refuses_envs_with_different_spaces():
    with pytest.raises(envharness.IncompatibleTransformError):
        envharness.wrap("FrozenLake-v1", Chain(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8"}))
