"""Property: no stack of catalog transforms, with any parameters in their bounds, forges success.

For random stacks drawn from the whole catalog (``Chain`` aside: its segments are
harnesses of their own, and its composition has dedicated attacks), on every adapter
family, played by the reference solver with random slips, every success verdict must be
backed by the base env's *own* success, read by an oracle written here, independently of
the adapters: the raw transition recorded under the harness and the raw state. The
harness runs with the audit forced on, so the same episodes also prove that catalog
transforms never touch the base env outside their surfaces (no false alarms either),
that scores stay in [0, 1], and that an ended episode stays ended.
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from enrolment import unattacked
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import envharness
from envharness import (
    EpisodeEndedError,
    Harness,
    IncompatibleTransformError,
    SpecError,
    TransformError,
)
from envharness.harness import make_base
from envharness.transforms import CATALOG, Chain, WalkthroughStart
from envrigger.policies import reference_policy

MAX_STEPS = 600


class Recorder(gym.Wrapper):
    """Sits between the harness and the made env: remembers the last raw transition."""

    def reset(self, **kwargs: Any) -> Any:
        self.steps, self.last = 0, None
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        self.last = self.env.step(action)
        self.steps += 1
        return self.last


def _minigrid_won(raw: Any, base: tuple, steps: int) -> bool:
    _, reward, terminated, _, _ = base
    cell = raw.grid.get(*raw.agent_pos)
    on_goal = cell is not None and cell.type == "goal"
    return terminated and reward > 0 and (on_goal or not _has_goal(raw))


def _has_goal(raw: Any) -> bool:
    return any(c is not None and c.type == "goal" for c in raw.grid.grid)


def _cartpole_won(raw: Any, base: tuple, steps: int, limit: int = 500) -> bool:
    x, _, theta, _ = raw.state
    return not base[2] and steps >= limit and abs(theta) <= 12 * 2 * math.pi / 360 and abs(x) <= 2.4


# family id -> (make kwargs, the base env's own success, read from the raw env and transition)
FAMILIES: dict[str, tuple[dict[str, Any], Any]] = {
    "MiniGrid-DoorKey-5x5-v0": ({}, _minigrid_won),
    "MiniGrid-LavaGapS5-v0": ({}, _minigrid_won),
    "MiniGrid-Fetch-5x5-N2-v0": ({}, _minigrid_won),
    "FrozenLake-v1": ({"is_slippery": False}, lambda raw, base, n: base[2] and raw.desc.flat[raw.s] == b"G" and base[1] > 0),
    "FrozenLake8x8-v1": ({"is_slippery": True}, lambda raw, base, n: base[2] and raw.desc.flat[raw.s] == b"G" and base[1] > 0),
    "Taxi-v4": ({}, lambda raw, base, n: base[2] and base[1] == 20),
    "CliffWalking-v1": ({}, lambda raw, base, n: base[2] and raw.s == 47),
    "CartPole-v1": ({}, _cartpole_won),
    "MountainCar-v0": ({}, lambda raw, base, n: base[2] and raw.state[0] >= 0.5),
    "Acrobot-v1": ({}, lambda raw, base, n: base[2] and -math.cos(raw.state[0]) - math.cos(raw.state[0] + raw.state[1]) > 1.0),
    "envharness/CodeRepair-v0": ({"task": "add"}, lambda raw, base, n: base[2] and base[1] == 1.0),
    "envharness/GeneratedFrozenLake-v0": ({}, lambda raw, base, n: base[2] and raw.desc.flat[raw.s] == b"G" and base[1] > 0),
    "envharness/PhysicsCartPole-v0": ({}, lambda raw, base, n: _cartpole_won(raw, base, n, limit=200)),
    "Pendulum-v1": ({}, lambda raw, base, n: False),
}
TOOLS = ["list", "view", "replace", "run_tests", "submit"]


def _field_strategy(cls: type, name: str, field: Any, env: gym.Env) -> st.SearchStrategy:
    """Values for one parameter, inside its declared bounds, shaped by the env where they must be."""
    annotation = field.annotation
    n = int(getattr(env.action_space, "n", 0) or 0)
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)
    base_type = next(a for a in typing.get_args(annotation) if a is not type(None)) if optional else annotation
    lo, hi = -math.inf, math.inf
    for meta in field.metadata:
        lo = getattr(meta, "ge", getattr(meta, "gt", lo))
        hi = getattr(meta, "le", getattr(meta, "lt", hi))
    if name == "demos":  # recordings of any level: seeds and actions as a hostile spec author writes them
        action = st.integers(0, max(n - 1, 0)) if n else st.just(env.action_space.sample())
        return st.lists(
            st.fixed_dictionaries({"seed": st.integers(0, 50), "actions": st.lists(action, min_size=1, max_size=6)}), min_size=1, max_size=3
        )
    if name == "actions" and cls.__name__ == "ReplayPrefix":
        return st.lists(st.integers(0, max(n - 1, 0)) if n else st.just(env.action_space.sample()), max_size=6)
    if name == "actions":
        return st.lists(
            st.integers(0, max(n - 1, 0)), min_size=1 if cls.__name__ == "BlockAction" else 0, max_size=max(n - 1, 1), unique=True
        )
    if name == "mapping":
        return st.dictionaries(st.integers(0, max(n - 1, 0)), st.integers(0, max(n - 1, 0)), min_size=1, max_size=max(n, 1))
    if name == "indices":
        size = int(np.prod(env.observation_space.shape or (1,)))
        return st.lists(st.integers(0, size - 1), min_size=1, max_size=size, unique=True)
    if name == "field":
        return st.sampled_from(["mission", "direction", "image"])
    if name in ("tool", "tools"):
        return st.sampled_from(TOOLS) if name == "tool" else st.lists(st.sampled_from(TOOLS), min_size=1, max_size=2, unique=True)
    if name == "verbs":
        return st.lists(st.sampled_from(["go", "take", "look"]), min_size=1, max_size=2, unique=True)
    if name == "path":
        return st.sampled_from(["", "calc.py", "test_visible.py"])
    if base_type is str:
        return st.text(alphabet="abc xyz", min_size=1, max_size=12)
    if typing.get_origin(base_type) is typing.Literal:
        return st.sampled_from(typing.get_args(base_type))
    if base_type is bool:
        return st.booleans()
    if base_type is int:
        value = st.integers(int(lo), int(min(hi, 600)))  # long budgets only make episodes slow
    elif base_type is float:
        value = st.floats(float(lo), float(min(hi, 1e3)), allow_nan=False)
    else:
        raise AssertionError(f"no strategy for {cls.__name__}.{name}: {annotation}")
    return st.none() | value if optional else value


def _catalog_for(env_id: str) -> list[type]:
    """Catalog classes that can reshape this family with some parameters (found by wrapping once)."""
    usable = []
    for cls in sorted(CATALOG, key=lambda c: c.__name__):
        if cls is Chain:
            continue
        env = make_base(env_id, **FAMILIES[env_id][0])
        view = Harness(env).adapter
        try:
            if cls.capability is not None:
                view.require(cls.capability, cls.__name__)
            if cls.kind == "rule" and cls.__name__ in ("BlockAction", "ActionSlip", "RemapActions") and not hasattr(env.action_space, "n"):
                continue
            if cls.__name__ in ("BlockTool", "ToolCost") and not isinstance(env.action_space, gym.spaces.Text):
                continue
        except IncompatibleTransformError:
            continue
        usable.append(cls)
    return usable


@st.composite
def stacks(draw: Any, env_id: str, usable: list[type]) -> list[Any]:
    env = make_base(env_id, **FAMILIES[env_id][0])
    chosen = draw(st.lists(st.sampled_from(usable), min_size=1, max_size=4))
    out = []
    for cls in chosen:
        params = {name: draw(_field_strategy(cls, name, field, env)) for name, field in cls.model_fields.items()}
        if "min_dist" in params:
            params["min_dist"], params["max_dist"] = sorted((params["min_dist"], params["max_dist"]))
        try:
            out.append(cls(**params))
        except SpecError:
            reject()
    return out


def _check_episode(env_id: str, stack: list[Any], seed: int, slip: float) -> int:
    """Play one episode; assert every success is the base env's own. Returns the successes seen."""
    kwargs, won = FAMILIES[env_id]
    recorder = Recorder(make_base(env_id, **kwargs))
    try:
        env = Harness(recorder, stack, audit=True)
    except (IncompatibleTransformError, SpecError):
        reject()
    try:
        obs, info = env.reset(seed=seed)
    except TransformError as error:  # a prefix that ends or solves the level is refused, as designed
        assert "ReplayPrefix" in str(error) or "DemoStart" in str(error)
        reject()
    assert info["verdict"].success is False
    try:
        policy = reference_policy(env)
    except ValueError:
        policy = None
    if policy is not None and hasattr(policy, "reset"):
        policy.reset(seed)
    rng = np.random.default_rng(seed)
    start, successes = recorder.steps, 0
    for _ in range(MAX_STEPS):
        action = env.action_space.sample() if policy is None or rng.random() < slip else policy.act(obs, info)
        obs, _, terminated, truncated, info = env.step(action)
        verdict = info["verdict"]
        assert 0.0 <= verdict.score <= 1.0
        if verdict.success:
            assert won(env.unwrapped, recorder.last, recorder.steps - start), (env_id, stack, seed, verdict)
            assert terminated or truncated
            successes += 1
        if terminated or truncated:
            with pytest.raises(EpisodeEndedError):
                env.step(action)
            break
    return successes


# Families no reference solver plays (Fetch's missions are not goal tiles): they check that no success is invented.
UNSOLVED = ("Pendulum-v1", "Acrobot-v1", "MiniGrid-Fetch-5x5-N2-v0")
SLOW = {
    "envharness/TextWorld-v0": 10,
    "envharness/CodeRepair-v0": 5,
    "CartPole-v1": 10,
    "envharness/PhysicsCartPole-v0": 10,
    "Acrobot-v1": 8,
    "MountainCar-v0": 8,
}


@pytest.mark.parametrize("env_id", sorted(FAMILIES))
def test_no_catalog_stack_forges_a_success(env_id):
    if env_id.startswith("envharness/"):
        import envharness.envs  # noqa: F401
    usable = _catalog_for(env_id)
    seen = {"successes": 0}

    @settings(
        max_examples=SLOW.get(env_id, 20),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    @given(stack=stacks(env_id, usable), seed=st.integers(0, 2**16), slip=st.sampled_from([0.0, 0.1, 0.5]))
    def episodes(stack: list[Any], seed: int, slip: float) -> None:
        seen["successes"] += _check_episode(env_id, stack, seed, slip)

    episodes()
    if env_id not in UNSOLVED:
        assert seen["successes"] > 0, "no success at all: the property was never exercised"


def test_every_catalog_class_is_exercised_on_some_family():
    covered = {cls for env_id in FAMILIES if not env_id.startswith("envharness/") for cls in _catalog_for(env_id)}
    import envharness.envs  # noqa: F401

    covered |= set(_catalog_for("envharness/CodeRepair-v0"))
    # Text-game only: its forgery attacks are in tests/envharness/envs/test_textworld.py (Jericho games cannot be
    # opened by the dozen in one process, as this property's strategies would).
    covered |= {WalkthroughStart}
    assert covered == CATALOG - {Chain}, sorted(c.__name__ for c in CATALOG - {Chain} - covered)


def test_the_audit_does_not_mistake_a_random_policy_sampling_actions_for_tampering():
    from envharness.transforms import RuleTransform

    class Nothing(RuleTransform):  # any custom transform switches the audit on
        def on_action(self, action: Any, memo: dict, rng: Any) -> Any:
            return action

    for env_id, (kwargs, _) in FAMILIES.items():
        if env_id.startswith("envharness/"):
            continue
        env = envharness.wrap(env_id, Nothing(), **kwargs)
        env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(200):
            env.render() if env.render_mode else None
            *_, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()


# Adapter families this property leaves to a suite of their own, and why (a new family is attacked here or named here).
ATTACKED_ELSEWHERE = {
    "textworld": "opening Jericho games by the dozen in one process segfaulted under CI; the forgery attacks on its starts "
    "and verdict are in tests/envharness/envs/test_textworld.py",
}


def test_every_registered_family_is_attacked_here_or_says_where():
    registered, left_out = unattacked(FAMILIES)
    assert left_out == set(ATTACKED_ELSEWHERE), "give a new family an env id in FAMILIES, or a reason here"
    assert set(ATTACKED_ELSEWHERE) <= registered
