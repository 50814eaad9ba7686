"""Attacks found by an adversarial review of the first version of these defences, kept as tests.

Each forged a success, ran code from a spec, or broke the audit before it was fixed.
"""

from __future__ import annotations

import copy
import copyreg
import dataclasses
import pickle
import sys
from collections import deque
from typing import Any, ClassVar

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from hostile import VICTIM

import envharness
from envharness import (
    ActionError,
    EpisodeEndedError,
    HarnessSpec,
    SpecError,
    StateAccessError,
    TransformError,
    VerifierTamperError,
)
from envharness.transforms import (
    ActionCost,
    ActionSlip,
    Chain,
    ObservationTransform,
    RuleTransform,
    StateTransform,
    register_transform,
)
from envharness.verifier import Verdict

LAVA_EDGE = [1, 2, 2, 0]  # LavaGapS5, seed 1: the agent ends facing a lava tile at (2, 3)


def _lava_gap(*transforms: Any):
    env = envharness.wrap("MiniGrid-LavaGapS5-v0", *transforms)
    VICTIM["env"] = env
    env.reset(seed=1)
    for action in LAVA_EDGE:
        env.step(action)
    assert env.unwrapped.grid.get(*env.unwrapped.front_pos).type == "lava"
    return env


# -- spec data ------------------------------------------------------------------------------
def test_a_chains_env_kwargs_cannot_opt_its_own_imports_in(tmp_path, monkeypatch):
    (tmp_path / "chain_marker.py").write_text(f"open({str(tmp_path / 'mark')!r}, 'w').write('x')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = {
        "env_id": "FrozenLake-v1",
        "transforms": [{"name": "Chain", "params": {"env_id": "chain_marker:E-v0", "env_kwargs": {"allow_imports": ["chain_marker"]}}}],
    }
    with pytest.raises(SpecError, match="would import module 'chain_marker'"):
        HarnessSpec.coerce(spec).build()
    assert not (tmp_path / "mark").exists() and "chain_marker" not in sys.modules


def test_env_kwargs_cannot_replace_a_registered_specs_own_spec():
    envharness.register(HarnessSpec(env_id="CartPole-v1"), id="review/Benign-v0")
    hostile = {"env_id": "review/Benign-v0", "env_kwargs": {"spec": {"env_id": "Taxi-v4"}}}
    with pytest.raises(SpecError, match="env_kwargs.spec: review/Benign-v0 is a registered envharness spec"):
        HarnessSpec.coerce(hostile).build()


# -- links and nesting ---------------------------------------------------------------------------
LAKE = {"is_slippery": False}
TO_GOAL = [1, 1, 2, 2, 1, 2]


def test_a_harness_around_a_chain_does_not_see_the_first_segment_as_the_episode():
    inner = envharness.wrap("FrozenLake-v1", Chain(env_id="FrozenLake-v1", env_kwargs=LAKE), **LAKE)
    outer = envharness.wrap(inner, ActionSlip(p=0.0))
    outer.reset(seed=0)
    for action in TO_GOAL:  # solves the first lake only
        *_, terminated, truncated, info = outer.step(action)
    assert not (terminated or truncated) and info["verdict"].success is False


def test_a_chain_inside_a_chain_publishes_success_only_at_the_very_end():
    inner = Chain(env_id="FrozenLake-v1", env_kwargs=LAKE).to_spec()
    env = envharness.wrap("FrozenLake-v1", Chain(env_id="FrozenLake-v1", env_kwargs=LAKE, transforms=[inner]), **LAKE)
    env.reset(seed=0)
    for segment in range(2):
        for action in TO_GOAL:
            *_, terminated, truncated, info = env.step(action)
        assert not (terminated or truncated) and info["verdict"].success is False, segment
    for action in TO_GOAL:
        *_, terminated, _, info = env.step(action)
    assert terminated and info["verdict"] == Verdict(True, 1.0, "all linked segments succeeded")


# -- the step's own flow ---------------------------------------------------------------------------
class RaiseOnEnd(RuleTransform):
    def on_transition(self, step, memo):
        if step.terminated:
            raise RuntimeError("bug in a rule")


def test_an_exception_after_a_terminal_base_step_ends_the_episode():
    env = _lava_gap(ActionCost(cost=0.1, actions=[0]))
    with pytest.raises(ActionError):
        env.step(complex(2, 0))  # not an action of Discrete(7): refused before the base env sees it
    env.step(2)  # so the episode goes on
    env = _lava_gap(RaiseOnEnd())
    with pytest.raises(RuntimeError):
        env.step(2)
    with pytest.raises(EpisodeEndedError):
        env.step(2)


class TruthyOnce:
    def __init__(self) -> None:
        self.calls = 0

    def __bool__(self) -> bool:
        self.calls += 1
        return self.calls == 1


class Fickle(RuleTransform):
    def on_transition(self, step, memo):
        if step.terminated:
            step.terminated = TruthyOnce()


def test_an_end_flag_that_changes_its_mind_is_read_once():
    env = _lava_gap(Fickle())
    *_, terminated, _, info = env.step(2)
    assert terminated is True and info["verdict"].reason == "lava"
    with pytest.raises(EpisodeEndedError):
        env.step(2)


class Sneaky(int):
    """An action whose comparison moves the agent onto the goal, inside the base step."""

    def __eq__(self, other: Any) -> bool:
        VICTIM["env"].unwrapped.agent_pos = (6, 6)
        return int(self) == other

    __hash__ = int.__hash__


class SmuggleAction(RuleTransform):
    def on_action(self, action, memo, rng):
        return Sneaky(action)


def test_an_action_object_cannot_run_code_inside_the_base_step():
    env = envharness.wrap("MiniGrid-Empty-8x8-v0", SmuggleAction())
    VICTIM["env"] = env
    env.reset(seed=0)
    assert env.step(0)[4]["verdict"].success is False
    assert tuple(env.unwrapped.agent_pos) == (1, 1)


class Macro(RuleTransform):
    def on_action(self, action, memo, rng):
        VICTIM["env"].step(2)
        return action


class ResetInside(RuleTransform):
    def on_transition(self, step, memo):
        VICTIM["env"].reset(seed=5)


@pytest.mark.parametrize("attacker", [Macro(), ResetInside()], ids=["step", "reset"])
def test_a_hook_cannot_drive_the_env_itself(attacker):
    env = envharness.wrap("MiniGrid-LavaGapS5-v0", attacker)
    VICTIM["env"] = env
    env.reset(seed=1)
    with pytest.raises(TransformError, match="called from inside a transform hook"):
        env.step(1)
    with pytest.raises(EpisodeEndedError):
        env.step(2)


KEPT: list = []


class KeepInfo(RuleTransform):
    def on_reset(self, memo, obs, rng):
        for info in KEPT:
            info["verdict"] = Verdict(True, 1.0, "reached goal")

    def on_transition(self, step, memo):
        KEPT.append(step.info)


def test_the_info_returned_is_not_the_one_a_rule_can_keep():
    env = envharness.wrap("FrozenLake-v1", KeepInfo(), **LAKE)
    env.reset(seed=0)
    final: Any = None
    for action in [1, 2, 2, 2, 2]:
        *_, terminated, _, final = env.step(action)
        if terminated:
            break
    assert final["verdict"].reason == "hole"
    env.reset(seed=0)
    assert final["verdict"].reason == "hole"


# -- surfaces ----------------------------------------------------------------------------------------
COPIES: list = []


class CopyHandle(StateTransform):
    def apply(self, adapter, obs, rng):
        COPIES.append(copy.copy(adapter))
        return obs


def test_a_copied_state_handle_is_revoked_with_the_original():
    env = envharness.wrap("MiniGrid-Empty-8x8-v0", CopyHandle())
    env.reset(seed=0)
    with pytest.raises(TransformError, match="used after apply"):
        COPIES[-1].move_agent(np.random.default_rng(0), 1, 1)
    with pytest.raises(TransformError, match="cannot be pickled"):
        cloudpickle.dumps(COPIES[-1])


def _loosen_cartpole() -> None:
    VICTIM["base"].unwrapped.theta_threshold_radians = 1e9
    VICTIM["base"].unwrapped.x_threshold = 1e9


class InCheck(RuleTransform):
    def check(self, adapter, observation_space, action_space):
        _loosen_cartpole()


class InBind(RuleTransform):
    def bind(self, memo, action_space):
        _loosen_cartpole()


class InSpace(ObservationTransform):
    def observation_space(self, space):
        _loosen_cartpole()
        return space


class InApply(StateTransform):
    capability: ClassVar[str] = "physics"

    def apply(self, adapter, obs, rng):
        _loosen_cartpole()
        return obs


@pytest.mark.parametrize("attacker", [InCheck(), InBind(), InSpace()], ids=["check", "bind", "observation_space"])
def test_wrap_time_methods_of_a_custom_transform_are_audited(attacker):
    VICTIM["base"] = envharness.harness.make_base("CartPole-v1")
    with pytest.raises(VerifierTamperError, match=type(attacker).__name__):
        envharness.Harness(VICTIM["base"], [attacker])


def test_a_custom_state_transform_may_not_touch_what_is_not_state():
    VICTIM["base"] = envharness.harness.make_base("CartPole-v1")
    env = envharness.Harness(VICTIM["base"], [InApply()])
    with pytest.raises(VerifierTamperError, match="InApply.apply changed the base env outside its StateHandle"):
        env.reset(seed=0)


class PatchClass(RuleTransform):
    def on_reset(self, memo, obs, rng):
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

        original = FrozenLakeEnv.step
        memo["restore"] = original

        def step(self, action):
            self.s = 14
            return original(self, 2)

        FrozenLakeEnv.step = step


def test_a_method_patched_on_the_class_is_caught():
    from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

    original = FrozenLakeEnv.step
    try:
        env = envharness.wrap("FrozenLake-v1", PatchClass(), **LAKE)
        with pytest.raises(VerifierTamperError, match="PatchClass.on_reset"):
            env.reset(seed=0)
    finally:
        FrozenLakeEnv.step = original


class DriveUp(StateTransform):
    requires_state_access: ClassVar[bool] = False

    def apply(self, adapter, obs, rng):
        for _ in range(400):
            obs = adapter.step(np.array([1.0 if obs[1] >= 0 else -1.0], dtype=np.float32))[0]
        return obs


def test_setup_steps_that_end_the_episode_are_refused_and_generic_envs_take_no_state_edits():
    env = envharness.wrap("MountainCarContinuous-v0", DriveUp())
    with pytest.raises(TransformError, match="DriveUp: the episode ended at setup step"):
        env.reset(seed=0)

    class Edit(StateTransform):
        def apply(self, adapter, obs, rng):
            return obs

    with pytest.raises(StateAccessError, match="generic adapter"):
        envharness.wrap("MountainCarContinuous-v0", Edit())


# -- verifier details ---------------------------------------------------------------------------------------
def test_a_goalless_minigrid_score_cannot_be_raised_by_a_looser_max_steps():
    # MiniGrid's score is 1 - 0.9 * steps / max_steps: a looser max_steps would raise it. It is refused.
    with pytest.raises(SpecError, match=r"env_kwargs.max_steps: 1000000000 is above"):
        envharness.wrap("MiniGrid-Fetch-5x5-N2-v0", max_steps=10**9)
    env, plain = envharness.wrap("MiniGrid-Fetch-5x5-N2-v0", max_steps=20), envharness.wrap("MiniGrid-Fetch-5x5-N2-v0")
    assert env.adapter.time_limit() == 20 and env._adapter._max_steps == plain._adapter._max_steps  # scored at the default


def test_a_fickle_taxi_passenger_delivered_to_their_new_destination_is_a_success():
    env = envharness.wrap("Taxi-v4", fickle_passenger=True, fickle_probability=1.0)
    raw = env.unwrapped
    wins = 0
    for seed in range(5):
        env.reset(seed=seed)
        for _ in range(100):
            action = _plan_taxi(raw)
            *_, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        assert (reward == 20) == info["verdict"].success
        wins += info["verdict"].success
    assert wins == 5


def _plan_taxi(raw: Any) -> int:
    """First action of a shortest path to a rewarding drop-off, over the env's own table."""
    prev, queue = {raw.s: None}, deque([raw.s])
    while queue:
        u = queue.popleft()
        for action, outcomes in raw.P[u].items():
            _, v, reward, done = outcomes[0]
            if done and reward > 0:
                while prev[u] is not None:
                    u, action = prev[u]
                return action
            if v not in prev:
                prev[v] = (u, action)
                queue.append(v)
    raise AssertionError("no plan")


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda env: cloudpickle.loads(cloudpickle.dumps(env))], ids=["deepcopy", "cloudpickle"])
def test_an_audited_harness_survives_a_copy(clone):
    class Nothing(RuleTransform):
        def on_action(self, action, memo, rng):
            return action

    env = clone(envharness.wrap("FrozenLake-v1", Nothing(), **LAKE))
    env.reset(seed=0)
    assert env.step(1)[4]["verdict"].success is False


# -- a second review, against the fixed version ------------------------------------------------------------
def test_two_threads_stepping_one_harness_cannot_walk_on_from_lava():
    import threading

    from minigrid.core.world_object import Lava

    env = envharness.wrap("MiniGrid-Empty-5x5-v0")  # no transforms: the direct step path
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for trial in range(60):
            env.reset(seed=trial)
            raw = env.unwrapped
            raw.grid.set(2, 3, Lava())  # (the test sets the level up: lava between the agent and the goal)
            raw.agent_pos, raw.agent_dir = (1, 3), 0
            barrier, out = threading.Barrier(2), []

            def forward(barrier: threading.Barrier = barrier, out: list = out) -> None:
                barrier.wait()
                try:
                    out.append(env.step(2)[4]["verdict"])
                except EpisodeEndedError:
                    out.append(None)

            threads = [threading.Thread(target=forward) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not any(v is not None and v.success for v in out), trial
    finally:
        sys.setswitchinterval(switch)


def test_babyai_is_judged_at_its_per_level_step_limit_and_a_done_that_wins_at_once_is_refused():
    from envharness.transforms import MoveAgent

    env = envharness.wrap("BabyAI-GoToObj-v0", MoveAgent(min_dist=1, max_dist=100))
    refused = 0
    for seed in range(120):
        try:
            env.reset(seed=seed)
        except TransformError as error:
            assert "the mission is complete before the agent acts" in str(error)
            refused += 1
            continue
        assert env.adapter.time_limit() > 0
        assert not env.step(6)[4]["verdict"].success  # `done` straight away never wins
    assert refused > 0


def test_an_exported_package_cannot_be_made_to_run_library_text(tmp_path):
    import subprocess

    from envrigger.export import export_library
    from envrigger.loop.library import Library

    library = Library(tmp_path / "library.db")
    evil = f'timeout"""\nimport pathlib; pathlib.Path({str(tmp_path / "PWNED")!r}).write_text("x")\n"""'
    library.admit(
        HarnessSpec(env_id="FrozenLake-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 20}}]),
        finding=evil,
        rationale="r",
        gates=[],
        seeds=[1],
        agent_id="q",
    )
    paths = export_library(library, tmp_path / "out", package="evil_envs")
    ran = subprocess.run(
        [sys.executable, "-c", "import evil_envs; print(len(evil_envs.ENV_IDS))"], cwd=str(paths["package"]), capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "1" and not (tmp_path / "PWNED").exists()


def test_map_edits_keep_frozenlakes_slipperiness():
    from envharness.transforms import FrozenLakeMap

    env = envharness.wrap("FrozenLake-v1", FrozenLakeMap(add_holes=1), success_rate=0.2)
    env.reset(seed=0)
    assert sorted(round(p, 3) for p, *_ in env.unwrapped.P[0][1]) == [0.2, 0.4, 0.4]


@pytest.mark.parametrize("env_kwargs", [{"map_name": "nope"}, {"desc": []}, {"max_episode_steps": 0}])
def test_hostile_env_kwargs_get_a_one_line_error_at_the_cli(env_kwargs, tmp_path, capsys):
    from envharness.cli import main

    path = tmp_path / "spec.json"
    path.write_text(HarnessSpec(env_id="FrozenLake-v1", env_kwargs=env_kwargs).to_json())
    with pytest.raises(SystemExit) as code:
        main(["check", str(path)])
    err = capsys.readouterr().err.strip()
    assert code.value.code == 2 and len(err.splitlines()) == 1 and "env_kwargs" in err


def test_a_registration_that_contains_itself_is_a_clear_error():
    envharness.register(
        {"env_id": "FrozenLake-v1", "transforms": [{"name": "Chain", "params": {"env_id": "review/Loop-v0"}}]}, id="review/Loop-v0"
    )
    with pytest.raises(SpecError, match="recursed"):
        gym.make("review/Loop-v0")


def test_register_refuses_to_shadow_a_base_env_or_take_a_module_id():
    with pytest.raises(SpecError, match="already registered"):
        envharness.register({"env_id": "CartPole-v0"}, id="CartPole-v1")
    with pytest.raises(SpecError, match="holds ':'"):
        envharness.register({"env_id": "CartPole-v0"}, id="evil:Mod-v0")


def test_reset_options_that_move_the_start_are_a_different_level():
    env = envharness.wrap("MountainCar-v0")
    plain = env.reset(seed=0)[1]["level_id"]
    moved = env.reset(seed=0, options={"low": 0.45, "high": 0.46})[1]["level_id"]
    assert moved != plain


class ReviewNothing(RuleTransform):
    """A custom rule that does nothing; registered during the test so that gym.make(env.spec) can rebuild it."""

    def on_action(self, action, memo, rng):
        return action


@pytest.fixture
def registered_nothing():
    from envharness.transforms import TRANSFORMS

    register_transform(ReviewNothing)
    yield ReviewNothing
    TRANSFORMS.pop("ReviewNothing")


def test_the_audit_cannot_be_switched_off_for_custom_transforms(registered_nothing):
    Nothing = registered_nothing
    with pytest.raises(SpecError, match="custom transforms are always audited"):
        envharness.Harness(gym.make("FrozenLake-v1"), [Nothing()], audit=False)
    env = envharness.Harness(gym.make("FrozenLake-v1"), [Nothing()])
    spec = env.spec
    spec.additional_wrappers[-1].kwargs["audit"] = False  # an edited EnvSpec is data too
    with pytest.raises(SpecError, match="always audited"):
        gym.make(spec)


class PatchLakeStep(RuleTransform):
    """Patches FrozenLake's step on the class, so it needs no reference to any env."""

    def on_action(self, action, memo, rng):
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

        original = FrozenLakeEnv.step
        PATCHED.append(original)

        def step(self, action):
            self.s = 14
            return original(self, 2)

        FrozenLakeEnv.step = step
        return action


PATCHED: list = []


def test_a_rollout_records_a_tampered_episode_as_failed_with_its_error(tmp_path):
    from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

    from envharness.transforms import TRANSFORMS
    from envrigger.rollout import rollout

    register_transform(PatchLakeStep)
    try:
        spec = HarnessSpec(env_id="FrozenLake-v1", env_kwargs=LAKE, transforms=[{"name": "PatchLakeStep"}])
        run = rollout(spec, "random", seeds=[0, 1], backend="serial", out=tmp_path / "run")
    finally:
        TRANSFORMS.pop("PatchLakeStep")
        if PATCHED:
            FrozenLakeEnv.step = PATCHED[0]
    episodes = list(run.iter_episodes())
    assert len(episodes) == 2
    for episode in episodes:
        assert not episode.success and episode.reason == "error"
        assert episode.error.startswith("VerifierTamperError: PatchLakeStep.on_action")


# -- a third review: objects that run inside the base step, and checkpoints that could be fooled ---------------------
class Plant(RuleTransform):
    """Runs ``PLANTS[0]`` (which plants something in the env) in its first on_action."""

    def on_reset(self, memo, obs, rng):
        memo["done"] = False

    def on_action(self, action, memo, rng):
        if not memo["done"]:
            memo["done"] = True
            PLANTS[0]()
        return action


PLANTS: list = []


def _plant_twin_grid():
    from minigrid.core.grid import Grid

    class TwinGrid(Grid):  # pickles exactly like the Grid it replaces, hides the walls
        @property
        def __class__(self):  # pickle reads __class__, not type()
            return Grid

        def __reduce_ex__(self, protocol):
            return (copyreg.__newobj__, (Grid,), self.__dict__, None, None)

        def get(self, i, j):
            cell = Grid.get(self, i, j)
            return None if cell is not None and cell.type == "wall" and 0 < i < self.width - 1 else cell

    raw = VICTIM["env"].unwrapped
    twin = TwinGrid.__new__(TwinGrid)
    twin.__dict__ = raw.grid.__dict__
    assert pickle.dumps(twin) == pickle.dumps(raw.grid)
    raw.grid = twin


def _plant_copyreg():
    copyreg.pickle(np.ndarray, lambda array: (np.zeros, ((),)))
    VICTIM["env"].unwrapped.state = np.zeros(4)


def _plant_window():
    class Window:  # what step() calls when it renders for a human: it moves the agent
        def blit(self, *args):
            VICTIM["env"].unwrapped.agent_pos = (6, 6)

    raw = VICTIM["env"].unwrapped
    raw.render_mode, raw.window = "human", Window()


def _plant_space():
    class Sneaky(gym.spaces.Discrete):  # the env's own step asserts `action_space.contains(action)`
        def contains(self, x):
            VICTIM["env"].unwrapped.state = np.array([0.55, 0.01])
            return True

    VICTIM["env"].unwrapped.action_space = Sneaky(3)


def _plant_wrapper():
    class Teleport(gym.Wrapper):
        def step(self, action):
            self.env.unwrapped.s = 14
            return self.env.step(2)

    VICTIM["env"].env = Teleport(VICTIM["env"].env)


def _plant_module_function():
    from gymnasium.envs.toy_text import frozen_lake

    PLANTS.append(frozen_lake.categorical_sample)
    frozen_lake.categorical_sample = lambda probs, rng: len(probs) // 2  # the lake never slips


PLANTED = {
    "pickle twin": ("MiniGrid-Empty-8x8-v0", {}, _plant_twin_grid),
    "copyreg": ("CartPole-v1", {}, _plant_copyreg),
    "render window": ("MiniGrid-Empty-8x8-v0", {}, _plant_window),
    "action space": ("MountainCar-v0", {}, _plant_space),
    "spliced wrapper": ("FrozenLake-v1", LAKE, _plant_wrapper),
    "module function": ("FrozenLake8x8-v1", {"is_slippery": True}, _plant_module_function),
}


@pytest.mark.parametrize("plant", sorted(PLANTED))
def test_something_planted_to_run_inside_the_base_step_is_caught_before_it_runs(plant):
    from gymnasium.envs.toy_text import frozen_lake

    env_id, kwargs, planting = PLANTED[plant]
    env = envharness.wrap(env_id, Plant(), **kwargs)
    VICTIM["env"] = env
    PLANTS[:] = [planting]
    saved = (copyreg.dispatch_table.copy(), frozen_lake.categorical_sample)
    try:
        env.reset(seed=0)
        with pytest.raises(VerifierTamperError, match="Plant.on_action"):
            env.step(0)
    finally:
        copyreg.dispatch_table.clear()
        copyreg.dispatch_table.update(saved[0])
        frozen_lake.categorical_sample = saved[1]


class WriteState(StateTransform):
    """Writes state attributes directly, around its handle."""

    def apply(self, adapter, obs, rng):
        adapter.move_agent(rng, 1, 3)  # a real edit, through the handle
        for by_action in VICTIM["env"].unwrapped.P.values():  # then one around it: every move right wins
            by_action[2] = [(1.0, 63, 1.0, True)]
        return obs


@pytest.mark.parametrize("env_id, kwargs", [("FrozenLake8x8-v1", {"is_slippery": False}), ("envharness/CodeRepair-v0", {"task": "add"})])
def test_a_state_transform_writing_state_around_its_handle_is_caught(env_id, kwargs):
    import envharness.envs  # noqa: F401

    attacker = WriteStateFiles() if env_id.startswith("envharness/") else WriteState()
    env = envharness.wrap(env_id, attacker, **kwargs)
    VICTIM["env"] = env
    with pytest.raises(VerifierTamperError, match="apply changed the base env outside its StateHandle"):
        env.reset(seed=0)


class WriteStateFiles(StateTransform):
    def apply(self, adapter, obs, rng):
        raw = VICTIM["env"].unwrapped
        fixed = raw.task.source.replace("return a - b", "return a + b")
        raw.files[raw.task.path], raw.task = fixed, dataclasses.replace(raw.task, source=fixed)
        return adapter.observe()


def test_what_a_physics_name_writes_cannot_be_edited():
    from envharness.adapters import CartPoleAdapter

    with pytest.raises(TypeError):
        CartPoleAdapter.physics["force"] = ("theta_threshold_radians",)
