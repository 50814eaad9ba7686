"""Hostile spec data gets a one-line envharness error naming the field, never a raw Python error.

Root cause (issue 27, class 7): numbers no spec means (an integer of thousands of digits, a
float that is not finite) reached code that fails on them with ``ValueError`` (printing
the number), ``OverflowError`` (drawing from an infinite range) or worse. The rule: spec
data is checked at the boundary (``HarnessSpec.from_json``/``coerce``, ``make_base``),
wherever it nests, and an env's own ranges are bounded by what ``PhysicsParams`` may set.
"""

from __future__ import annotations

import json

import pytest

import envharness
from envharness import HarnessSpec, SpecError
from envharness.cli import app, run_cli

HUGE = "1" + "0" * 5000  # past the 4300 digits Python will turn into text

HOSTILE = {
    "a huge step budget": (
        '{"env_id": "CartPole-v1", "transforms": [{"name": "StepBudget", "params": {"max_steps": HUGE}}]}'.replace("HUGE", HUGE),
        "max_steps",
    ),
    "a huge time limit": (
        '{"env_id": "CartPole-v1", "env_kwargs": {"max_episode_steps": HUGE}}'.replace("HUGE", HUGE),
        "max_episode_steps",
    ),
    "a huge limit inside a chain": (
        '{"env_id": "FrozenLake-v1", "transforms": [{"name": "Chain", "params": {"env_id": "FrozenLake-v1", '
        '"env_kwargs": {"max_episode_steps": HUGE}}}]}'.replace("HUGE", HUGE),
        "max_episode_steps",
    ),
    "a huge negative kwarg": ('{"env_id": "FrozenLake-v1", "env_kwargs": {"map_name": -HUGE}}'.replace("HUGE", HUGE), "map_name"),
    "an infinite physics range": (
        '{"env_id": "envharness/PhysicsCartPole-v0", "env_kwargs": {"ranges": {"pole_length": [0.5, Infinity]}}}',
        "pole_length",
    ),
    "a NaN physics range": ('{"env_id": "envharness/PhysicsCartPole-v0", "env_kwargs": {"ranges": {"force": [NaN, 9.0]}}}', "force"),
    "a physics range past the catalog's bounds": (
        '{"env_id": "envharness/PhysicsCartPole-v0", "env_kwargs": {"ranges": {"pole_length": [0.5, 1e308]}}}',
        "pole_length",
    ),
    "an infinite physics constant": (
        '{"env_id": "CartPole-v1", "transforms": [{"name": "PhysicsParams", "params": {"gravity": -Infinity}}]}',
        "gravity",
    ),
    "a huge noise scale": (
        '{"env_id": "MountainCar-v0", "transforms": [{"name": "InitialStateNoise", "params": {"scale": 1e308}}]}',
        "scale",
    ),
}


def build_and_play(text: str) -> None:
    env = HarnessSpec.from_json(text).build()
    env.reset(seed=0)
    env.step(env.action_space.sample())


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_numbers_are_one_line_spec_errors_naming_the_field(case):
    text, field = HOSTILE[case]
    with pytest.raises(SpecError) as refused:
        build_and_play(text)
    message = str(refused.value)
    assert "\n" not in message and field in message and len(message) < 400


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_cli_refuses_them_with_exit_2(case, tmp_path, capsys):
    path = tmp_path / "spec.json"
    path.write_text(HOSTILE[case][0])
    assert run_cli(app, ["check", str(path), "--episodes", "1"], "envharness") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("envharness: error: ") and "\n" not in err and "Traceback" not in err


def test_a_huge_integer_passed_from_python_is_refused_too():
    with pytest.raises(SpecError, match="max_episode_steps: got an integer of 5001 digits"):
        envharness.wrap("CartPole-v1", max_episode_steps=10**5000)
    with pytest.raises(SpecError, match=r"spec.env_kwargs.x\[1\]: got an integer of 5001 digits"):
        HarnessSpec.coerce({"env_id": "CartPole-v1", "env_kwargs": {"x": [1, 10**5000]}})


def test_ordinary_numbers_still_pass():
    spec = {"env_id": "envharness/PhysicsCartPole-v0", "env_kwargs": {"ranges": {"pole_length": [0.5, 1.5]}}}
    build_and_play(json.dumps(spec))
    build_and_play(json.dumps({"env_id": "CartPole-v1", "env_kwargs": {"max_episode_steps": 400}}))
