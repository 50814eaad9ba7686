"""Invariant 8: bad input raises a specific EnvHarnessError with a one-line message naming the fix."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envharness
from envharness import (
    EnvHarnessError,
    EnvNotFoundError,
    HarnessSpec,
    IncompatibleTransformError,
    SpecError,
    StateAccessError,
    TransformError,
    UnknownTransformError,
)
from envharness.transforms import (
    AddLava,
    BlockAction,
    FrozenLakeMap,
    MaskObservation,
    MoveGoal,
    PartialView,
    PhysicsParams,
    ReplayPrefix,
    TextHint,
    transform_from_spec,
)


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and message
    assert isinstance(error.value, EnvHarnessError)
    return message


def test_unknown_transform_name_names_the_catalog():
    with pytest.raises(UnknownTransformError) as error:
        transform_from_spec({"name": "TeleportAgent", "params": {}})
    assert "TeleportAgent" in _one_line(error) and "envharness transforms" in str(error.value)


def test_unknown_transform_name_suggests_the_right_spelling():
    with pytest.raises(UnknownTransformError) as error:
        HarnessSpec(env_id="CartPole-v1", transforms=[{"name": "stepbudget"}]).build()
    assert "did you mean 'StepBudget'" in _one_line(error)


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: MoveGoal(max_dist=500), "MoveGoal.max_dist"),
        (lambda: MoveGoal(min_dist=5, max_dist=2), "MoveGoal"),
        (lambda: PhysicsParams(gravity=-1.0), "PhysicsParams.gravity"),
        (lambda: BlockAction(actions=[]), "BlockAction.actions"),
        (lambda: FrozenLakeMap(add_holes="many"), "FrozenLakeMap.add_holes"),
        (lambda: MoveGoal(distance=3), "MoveGoal.distance"),
    ],
)
def test_out_of_bounds_or_malformed_parameter_names_the_field(make, field):
    with pytest.raises(SpecError) as error:
        make()
    assert _one_line(error).startswith(field)


@pytest.mark.parametrize(
    "env_id, transform, kwargs",
    [
        ("CartPole-v1", FrozenLakeMap(add_holes=2), {}),
        ("FrozenLake-v1", PhysicsParams(gravity=3.0), {}),
        ("CartPole-v1", PhysicsParams(link_length=1.0), {}),
        ("MiniGrid-Fetch-5x5-N2-v0", MoveGoal(), {}),
        ("FrozenLake-v1", AddLava(count=1), {}),
        ("CartPole-v1", PartialView(radius=1), {}),
        ("FrozenLake-v1", TextHint(text="go"), {}),
        ("CartPole-v1", MaskObservation(indices=[9]), {}),
        ("Pendulum-v1", BlockAction(actions=[0]), {}),
        ("FrozenLake-v1", BlockAction(actions=[7]), {}),
        ("FrozenLake-v1", ReplayPrefix(actions=[9]), {}),
    ],
)
def test_transform_incompatible_with_the_env_fails_at_wrap_time(env_id, transform, kwargs):
    with pytest.raises(IncompatibleTransformError) as error:
        envharness.wrap(env_id, transform, **kwargs)
    assert transform.name in _one_line(error)


def test_state_transform_on_a_generic_env_is_a_state_access_error_at_wrap_time():
    with pytest.raises(StateAccessError) as error:
        envharness.wrap("Pendulum-v1", MoveGoal())
    message = _one_line(error)
    assert "no state access" in message and "ReplayPrefix" in message


def test_replay_prefix_needs_no_state_access():
    env = envharness.wrap("Pendulum-v1", ReplayPrefix(actions=[[1.0], [1.0]]))
    plain = gym.make("Pendulum-v1")
    plain.reset(seed=0)
    expected = [plain.step([1.0])[0] for _ in range(2)][-1]
    assert env.reset(seed=0)[0].tolist() == expected.tolist()


def test_replay_prefix_that_ends_the_episode_says_to_shorten_it():
    env = envharness.wrap("FrozenLake-v1", ReplayPrefix(actions=[2, 1, 1, 1, 1]), is_slippery=False)
    with pytest.raises(TransformError) as error:
        env.reset(seed=0)
    assert "shorten the prefix" in _one_line(error)


def test_unknown_env_id_is_env_not_found():
    with pytest.raises(EnvNotFoundError) as error:
        envharness.wrap("MiniGrid-NoSuchThing-v0")
    assert "MiniGrid-NoSuchThing-v0" in _one_line(error)


def test_bad_env_kwargs_are_a_spec_error():
    with pytest.raises(SpecError) as error:
        envharness.wrap("FrozenLake-v1", slipperiness=0.5)
    assert _one_line(error).startswith("env_kwargs")


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"transforms": []}', "spec.env_id"),
        ('{"env_id": "CartPole-v1", "transforms": [{"params": {}}]}', "spec.transforms.0.name"),
        ('{"env_id": "CartPole-v1", "colour": "red"}', "spec.colour"),
    ],
)
def test_malformed_spec_json_names_the_field(text, fragment):
    with pytest.raises(SpecError) as error:
        HarnessSpec.from_json(text)
    assert fragment in _one_line(error)
