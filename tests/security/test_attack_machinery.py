"""Attacks, categories 2-4: the verifier's own machinery, forged info, and harness nesting."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import pytest
from harness_helpers import unaudited
from hostile import VICTIM, Button, play  # noqa: F401  (hostile registers hostile/Button-v0)

import envharness
from envharness import Harness, StateAccessError, VerifierTamperError
from envharness.harness import make_base
from envharness.transforms import (
    Chain,
    MoveAgent,
    RuleTransform,
    Step,
    StepBudget,
    register_transform,
)
from envharness.verifier import RUNNING, Verdict

WIN = Verdict(True, 1.0, "forged")


# -- 2. the verifier's machinery ---------------------------------------------------------
def test_the_shared_running_verdict_cannot_be_edited_in_place():
    for name in ("success", "score", "reason"):
        with pytest.raises(AttributeError):
            object.__setattr__(RUNNING, name, True)
        with pytest.raises(AttributeError):
            setattr(RUNNING, name, True)
    assert RUNNING == Verdict(False, 0.0, "in progress")


def test_a_published_verdict_cannot_be_edited_by_its_reader():
    env = envharness.wrap("FrozenLake-v1", is_slippery=False)
    verdict = env.reset(seed=0)[1]["verdict"]
    with pytest.raises(AttributeError):
        object.__setattr__(verdict, "success", True)
    assert not env.step(2)[4]["verdict"].success


class SwapJudge(RuleTransform):
    """Replaces the adapter's judge on the instance, reaching it through the harness."""

    def on_action(self, action: Any, memo: dict, rng: Any) -> Any:
        VICTIM["env"]._adapter.judge = lambda *args: WIN
        return action


def test_replacing_the_judge_on_the_adapter_instance_is_caught_and_changes_nothing(monkeypatch):
    env = envharness.wrap("MiniGrid-Empty-8x8-v0", SwapJudge())
    VICTIM["env"] = env
    env.reset(seed=0)
    with pytest.raises(VerifierTamperError, match="SwapJudge.on_action"):
        env.step(2)
    quiet = unaudited(gym.make("MiniGrid-Empty-8x8-v0"), [SwapJudge()], monkeypatch)
    VICTIM["env"] = quiet
    assert not any(v.success for v in play(quiet, [2, 2, 0]))  # the judge was bound at wrap time


class ReadGoalSnapshot(RuleTransform):
    """Tries to rewrite what the verifier judges against: FrozenLake's map snapshot, MiniGrid's goals."""

    def on_action(self, action: Any, memo: dict, rng: Any) -> Any:
        adapter = VICTIM["env"]._adapter
        if hasattr(adapter, "_desc_flat"):
            adapter._desc_flat = b"G" * len(adapter._desc_flat)
        else:
            adapter._goals = frozenset({(int(x), int(y)) for x in range(20) for y in range(20)})
        return action


@pytest.mark.parametrize("env_id, kwargs", [("FrozenLake-v1", {"is_slippery": False}), ("MiniGrid-Empty-8x8-v0", {})])
def test_rewriting_the_verifiers_snapshot_is_caught(env_id, kwargs):
    env = envharness.wrap(env_id, ReadGoalSnapshot(), **kwargs)
    VICTIM["env"] = env
    env.reset(seed=0)
    with pytest.raises(VerifierTamperError, match="ReadGoalSnapshot.on_action"):
        env.step(2)


def test_the_verifiers_snapshots_are_immutable_values():
    lake = envharness.wrap("FrozenLake-v1", is_slippery=False)
    lake.reset(seed=0)
    with pytest.raises(TypeError):
        lake._adapter._desc_flat[15] = ord("G")
    grid = envharness.wrap("MiniGrid-Empty-8x8-v0")
    grid.reset(seed=0)
    with pytest.raises(AttributeError):
        grid._adapter._goals.add((1, 1))


def test_the_harness_exposes_no_write_surface():
    env = envharness.wrap("MiniGrid-Empty-8x8-v0")
    env.reset(seed=0)
    for name in ("set_state", "move_agent", "edit_cells", "judge", "raw", "env"):
        assert not hasattr(env.adapter, name), name


def test_a_custom_class_cannot_take_a_catalog_name():
    with pytest.raises(envharness.SpecError, match="a catalog transform already has this name"):

        @register_transform
        class StepBudget(RuleTransform):  # noqa: F811
            def on_transition(self, step: Step, memo: dict) -> None:
                step.info["verdict"] = WIN

    built = envharness.HarnessSpec(env_id="CartPole-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 3}}]).build()
    assert type(built.transforms[0]).__module__ == "envharness.transforms.rule"


# -- 3. forged info ----------------------------------------------------------------------
class DeafDict(dict):
    """Ignores writes of the verdict, so a forged one would survive the harness's last write."""

    def __setitem__(self, key: str, value: Any) -> None:
        if key != "verdict":
            super().__setitem__(key, value)


class LyingDict(dict):
    """Claims to be a plain dict and answers every read of the verdict with a forged one."""

    @property
    def __class__(self) -> type:
        return dict

    def __getitem__(self, key: str) -> Any:
        return WIN if key == "verdict" else super().__getitem__(key)


class SwapInfo(RuleTransform):
    kind_of_info: str = "deaf"

    def on_transition(self, step: Step, memo: dict) -> None:
        cls = DeafDict if self.kind_of_info == "deaf" else LyingDict
        step.info = cls({**step.info, "verdict": WIN})


class ForeignMapping(Mapping):
    def __init__(self) -> None:
        self._data = {"verdict": WIN}

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return 1


class MappingInfo(RuleTransform):
    def on_transition(self, step: Step, memo: dict) -> None:
        step.info = ForeignMapping()


@pytest.mark.parametrize(
    "attacker", [SwapInfo(kind_of_info="deaf"), SwapInfo(kind_of_info="lying"), MappingInfo()], ids=["deaf", "lying", "mapping"]
)
def test_info_replaced_by_an_odd_mapping_still_carries_the_real_verdict(attacker):
    env = envharness.wrap("FrozenLake-v1", attacker, is_slippery=False)
    env.reset(seed=0)
    info = env.step(2)[4]
    assert type(info) is dict
    assert dict.__getitem__(info, "verdict") == RUNNING


def test_forged_info_inside_a_chained_env_does_not_reach_the_outer_verdict():
    env = envharness.wrap(
        "FrozenLake-v1",
        Chain(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False}, transforms=[{"name": "StepBudget", "params": {"max_steps": 2}}]),
        is_slippery=False,
    )
    env._links[0] = Harness(make_base("FrozenLake-v1", is_slippery=False), [SwapInfo(kind_of_info="deaf"), StepBudget(max_steps=2)])
    env.reset(seed=0)
    for action in [1, 1, 2, 2, 1]:
        env.step(action)
    *_, terminated, truncated, info = env.step(2)  # first segment reached its goal: the chained one starts
    assert info["segment"] == 1 and not (terminated or truncated)
    *_, info = env.step(2)
    *_, terminated, truncated, info = env.step(2)
    assert truncated and type(info) is dict and info["verdict"].success is False


def test_a_base_env_that_writes_its_own_verdict_into_info_is_overruled():
    class Braggart(gym.Wrapper):
        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            return obs, reward, terminated, truncated, {**info, "verdict": WIN, "success": False}

    env = envharness.wrap(Braggart(gym.make("hostile/Button-v0")))
    env.reset(seed=0)
    assert env.step(1)[4]["verdict"] == Verdict(False, 0.0, "no success signal")


# -- 4. a harness inside a harness ---------------------------------------------------------
class Jackpot(RuleTransform):
    """Ends every step with a huge reward and a success flag, as a fake goal would."""

    def on_transition(self, step: Step, memo: dict) -> None:
        step.terminated, step.reward = True, 1000.0
        step.info["success"] = step.info["is_success"] = True


@pytest.mark.parametrize("env_id", ["hostile/Button-v0", "MiniGrid-Empty-5x5-v0", "Pendulum-v1"])
def test_inner_transform_output_is_not_laundered_into_success_by_an_outer_harness(env_id):
    inner = envharness.wrap(env_id, Jackpot())
    outer = envharness.wrap(gym.wrappers.TransformReward(inner, lambda r: r * 10), StepBudget(max_steps=50))
    outer.reset(seed=0)
    _, reward, terminated, _, info = outer.step(outer.action_space.sample())
    assert terminated and reward == 10_000.0
    assert info["verdict"].success is False and 0.0 <= info["verdict"].score <= 1.0
    assert info["verdict"] == inner._verdict


def test_an_outer_harness_passes_an_honest_inner_success_on():
    inner = envharness.wrap("FrozenLake-v1", MoveAgent(min_dist=1, max_dist=1), is_slippery=False)
    outer = envharness.wrap(inner, StepBudget(max_steps=10))
    _, info = outer.reset(seed=0)
    assert info["level"]["goal_distance"] == 1.0
    verdicts = [outer.step(a)[4]["verdict"] for a in (1, 2) if not outer.ended]
    assert verdicts[-1] == Verdict(True, 1.0, "reached goal")


def test_an_outer_harness_refuses_state_transforms():
    inner = envharness.wrap("MiniGrid-Empty-8x8-v0")
    with pytest.raises(StateAccessError, match="put it in the inner harness"):
        envharness.wrap(inner, MoveAgent())


def test_a_registered_spec_made_with_gym_make_keeps_its_verdict_when_wrapped_again():
    spec = envharness.HarnessSpec(
        env_id="FrozenLake-v1",
        env_kwargs={"is_slippery": False},
        transforms=[{"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 1}}],
    )
    envharness.register(spec, id="security/NearGoal-v0")
    outer = envharness.wrap(gym.make("security/NearGoal-v0"), Jackpot())
    outer.reset(seed=0)
    _, reward, terminated, _, info = outer.step(0)
    assert terminated and reward == 1000.0 and info["verdict"].success is False
