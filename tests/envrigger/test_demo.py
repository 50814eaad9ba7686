"""envrigger demo and the policies it uses."""

from __future__ import annotations

import tempfile

import pytest

import envharness
from envharness.cli import run_cli
from envharness.transforms import ActionSlip, MoveGoal
from envrigger.cli import app, run_episodes
from envrigger.data import TrajectoryStore
from envrigger.policies import RandomPolicy, reference_policy


@pytest.mark.parametrize(
    "env_id, kwargs",
    [
        ("FrozenLake-v1", {"is_slippery": False}),
        ("Taxi-v4", {}),
        ("CliffWalking-v1", {}),
        ("CartPole-v1", {}),
        ("MountainCar-v0", {}),
        ("MiniGrid-DoorKey-8x8-v0", {}),
        ("MiniGrid-MultiRoom-N2-S4-v0", {}),
    ],
)
def test_reference_solvers_solve_their_family(env_id, kwargs):
    env = envharness.wrap(env_id, **kwargs)
    stats = run_episodes(env, reference_policy(env), list(range(5)))
    assert stats["success_rate"] == 1.0


def test_reference_beats_random_under_reshaping():
    env = envharness.wrap("MiniGrid-DoorKey-6x6-v0", MoveGoal(min_dist=3, max_dist=8), ActionSlip(p=0.1))
    seeds = list(range(10))
    reference = run_episodes(env, reference_policy(env), seeds)["success_rate"]
    random = run_episodes(env, RandomPolicy(env.action_space, seed=0), seeds)["success_rate"]
    assert reference >= 0.8 > random


def test_random_policy_is_reproducible():
    env = envharness.wrap("FrozenLake-v1")
    seeds = list(range(8))
    first = run_episodes(env, RandomPolicy(env.action_space, seed=3), seeds)
    assert first == run_episodes(env, RandomPolicy(env.action_space, seed=3), seeds)


def test_no_reference_solver_is_a_clear_error():
    with pytest.raises(ValueError, match="no reference solver"):
        reference_policy(envharness.wrap("Pendulum-v1"))


def test_demo_prints_verdicts_for_both_policies(capsys):
    assert run_cli(app, ["demo", "--env", "FrozenLake-v1", "-t", "FrozenLakeMap:add_holes=2", "--episodes", "3"], "envrigger") == 0
    out = capsys.readouterr().out
    assert "original" in out and "reshaped" in out and "reference" in out and "random" in out


def test_demo_rejects_a_bad_transform(capsys):
    assert run_cli(app, ["demo", "--env", "CartPole-v1", "-t", "MoveGoal"], "envrigger") == 2
    assert "MoveGoal" in capsys.readouterr().err


def test_demo_leaves_no_temporary_run_behind(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None  # re-read TMPDIR
    try:
        assert run_cli(app, ["demo", "--env", "FrozenLake-v1", "--episodes", "2"], "envrigger") == 0
    finally:
        tempfile.tempdir = None
    assert list(tmp_path.iterdir()) == []
    assert "pass -o DIR to keep the run" in capsys.readouterr().out


def test_demo_keeps_its_run_where_asked(tmp_path, capsys):
    assert run_cli(app, ["demo", "--env", "FrozenLake-v1", "--episodes", "2", "-o", str(tmp_path / "kept")], "envrigger") == 0
    assert len(TrajectoryStore(tmp_path / "kept")) == 2
    assert f"run stored in {tmp_path / 'kept'}" in capsys.readouterr().out.replace("\n", "")
