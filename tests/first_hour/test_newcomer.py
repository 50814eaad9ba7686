"""A newcomer's first hour: SB3 on MiniGrid through the CLI, user code in every command, errors you cannot miss."""

from __future__ import annotations

import json
import textwrap

import gymnasium as gym
import pytest

import envharness
from envharness.cli import app as harness_app
from envharness.cli import run_cli
from envharness.errors import SpecError
from envharness.transforms import Flatten, ImageOnly, MoveGoal
from envrigger.cli import app as rigger_app
from envrigger.data import TrajectoryStore

USER_MODULE = textwrap.dedent(
    '''
    import numpy as np
    from envharness.transforms import ObservationTransform, register_transform

    @register_transform
    class Halved(ObservationTransform):
        """Halves a float Box observation."""

        def observe(self, obs, memo, rng):
            return (np.asarray(obs) / 2).astype(obs.dtype)

    class AlwaysLeft:
        name = "always-left"

        def __init__(self, env):
            self.env = env

        def act(self, obs, info):
            return 0

    class Broken:
        name = "broken"

        def act(self, obs, info):
            raise ValueError("this policy is broken")
    '''
)


def rigger(*args: str) -> int:
    return run_cli(rigger_app, list(args), "envrigger")


def harness(*args: str) -> int:
    return run_cli(harness_app, list(args), "envharness")


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """The user's module on disk; what importing it registers is forgotten afterwards (the catalog stays as shipped)."""
    import sys

    from envharness.transforms import TRANSFORMS
    from envharness.transforms import base as transform_base

    path = tmp_path / "usercode.py"
    path.write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    registered, imported = dict(TRANSFORMS), list(transform_base._IMPORTED)
    yield path
    TRANSFORMS.clear()
    TRANSFORMS.update(registered)
    transform_base._IMPORTED[:] = imported
    sys.modules.pop("usercode", None)


def test_wrapping_an_env_inside_an_observation_wrapper_is_refused_with_the_fix():
    from minigrid.wrappers import ImgObsWrapper

    with pytest.raises(SpecError, match=r"inside ImgObsWrapper.*ImgObsWrapper\(envharness.wrap\(ENV_ID, ...\)\).*ImageOnly"):
        envharness.wrap(ImgObsWrapper(gym.make("MiniGrid-DoorKey-8x8-v0")), MoveGoal(max_dist=3))
    outside = ImgObsWrapper(envharness.wrap("MiniGrid-DoorKey-8x8-v0", MoveGoal(max_dist=3)))  # the way that works
    obs, _ = outside.reset(seed=0)
    assert obs.shape == outside.observation_space.shape == (7, 7, 3)


def test_image_only_and_flatten_give_what_sb3_policies_take():
    image = envharness.wrap("MiniGrid-DoorKey-8x8-v0", MoveGoal(max_dist=3), ImageOnly())
    assert isinstance(image.observation_space, gym.spaces.Box) and image.reset(seed=1)[0].shape == (7, 7, 3)
    flat = envharness.wrap("MiniGrid-DoorKey-8x8-v0", envharness.transforms.DropField(field="mission"), Flatten())
    obs, _ = flat.reset(seed=1)
    assert obs.dtype == flat.observation_space.dtype and flat.observation_space.contains(obs) and obs.ndim == 1
    with pytest.raises(Exception, match="cannot flatten the 'mission' field \\(a MissionSpace\\); drop that field first"):
        envharness.wrap("MiniGrid-DoorKey-8x8-v0", Flatten())


def test_sb3_ppo_on_minigrid_then_collect_and_diagnose_from_the_cli(tmp_path, capsys):
    sb3 = pytest.importorskip("stable_baselines3", reason="Stable-Baselines3 is an optional extra: pip install 'envharness[sb3]'")
    spec_path = tmp_path / "doorkey.json"
    assert harness("wrap", "MiniGrid-DoorKey-5x5-v0", "DropField:field=mission", "Flatten", "-o", str(spec_path)) == 0
    env = envharness.HarnessSpec.from_json(spec_path.read_text()).build()
    model = sb3.PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(256)
    model.save(tmp_path / "ppo.zip")
    run = tmp_path / "run"
    assert (
        rigger("collect", str(spec_path), "--policy", f"PPO:{tmp_path / 'ppo.zip'}", "-n", "6", "--backend", "serial", "-o", str(run)) == 0
    )
    assert rigger("diagnose", str(run), "-f", "html", "-o", str(tmp_path / "report.html")) == 0
    assert (tmp_path / "report.html").stat().st_size > 1000
    # The same model on the raw env (a Dict observation): refused before anything is written.
    capsys.readouterr()
    raw = tmp_path / "raw-run"
    assert rigger("collect", "MiniGrid-DoorKey-5x5-v0", "--policy", f"PPO:{tmp_path / 'ppo.zip'}", "-n", "2", "-o", str(raw)) == 2
    err = capsys.readouterr().err
    assert "policy: it observes Box" in err and "Flatten" in err and not raw.exists()


def test_sb3s_own_image_pipeline_is_collected_not_refused(tmp_path, capsys):
    """SB3 trains on ImageOnly's (7, 7, 3) images transposed to (3, 7, 7); collect plays the model on the spec as trained."""
    sb3 = pytest.importorskip("stable_baselines3", reason="Stable-Baselines3 is an optional extra: pip install 'envharness[sb3]'")
    spec_path = tmp_path / "empty.json"
    assert harness("wrap", "MiniGrid-Empty-5x5-v0", "ImageOnly", "-o", str(spec_path)) == 0
    env = envharness.HarnessSpec.from_json(spec_path.read_text()).build()
    model = sb3.PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    assert model.observation_space.shape == (3, 7, 7) and env.observation_space.shape == (7, 7, 3)  # SB3's VecTransposeImage
    model.learn(64)
    model.save(tmp_path / "ppo.zip")
    run = tmp_path / "run"
    for backend in ("serial", "process"):
        target = tmp_path / f"run-{backend}"
        args = ["collect", str(spec_path), "--policy", f"PPO:{tmp_path / 'ppo.zip'}", "-n", "4", "--backend", backend, "-o", str(target)]
        assert rigger(*args) == 0, capsys.readouterr().err
    assert (
        rigger(
            "collect",
            str(spec_path),
            "--policy",
            f"PPO:{tmp_path / 'ppo.zip'}",
            "-n",
            "4",
            "--backend",
            "serial",
            "--batch",
            "4",
            "-o",
            str(run),
        )
        == 0
    ), capsys.readouterr().err
    first = [e.length for e in TrajectoryStore(tmp_path / "run-serial").iter_episodes()]
    assert first == [e.length for e in TrajectoryStore(run).iter_episodes()]  # batched predict transposes the stack the same way
    capsys.readouterr()
    flat = tmp_path / "flat.json"  # a really different space is still refused
    assert harness("wrap", "MiniGrid-Empty-5x5-v0", "ImageOnly", "Flatten", "-o", str(flat)) == 0
    assert rigger("collect", str(flat), "--policy", f"PPO:{tmp_path / 'ppo.zip'}", "-n", "2", "-o", str(tmp_path / "no")) == 2
    assert "policy: it observes Box (3, 7, 7) but this spec's env gives Box (147,)" in capsys.readouterr().err


def test_user_code_reaches_every_command_with_import(user_module, tmp_path, capsys):
    spec = tmp_path / "spec.json"
    assert harness("wrap", "CartPole-v1", "Halved", "-o", str(spec)) == 2
    assert "--import MODULE" in capsys.readouterr().err  # the error names the option
    assert harness("wrap", "CartPole-v1", "Halved", "-o", str(spec), "--import", str(user_module)) == 0
    assert harness("--import", "usercode", "check", str(spec)) == 0
    run = tmp_path / "run"
    code = rigger("collect", str(spec), "--import", "usercode", "--policy", "usercode:AlwaysLeft", "-n", "4", "-w", "2", "-o", str(run))
    assert code == 0
    assert [e.policy_id for e in TrajectoryStore(run).iter_episodes()] == ["always-left"] * 4
    assert rigger("collect", str(spec), "--import", "usercode.py", "--policy", "usercode.py:AlwaysLeft", "-n", "2", "-o", str(run)) == 0
    assert rigger("collect", "CartPole-v1", "--policy", "usercode.py", "-n", "1", "-o", str(tmp_path / "x")) == 2
    assert "name the class in it: usercode.py:ClassName" in capsys.readouterr().err
    assert rigger("collect", "CartPole-v1", "--import", "no_such_module_here", "-n", "1", "-o", str(tmp_path / "y")) == 2
    assert "--import no_such_module_here: ModuleNotFoundError" in capsys.readouterr().err


def test_a_collect_where_every_episode_fails_is_loud(user_module, tmp_path, capsys):
    run = tmp_path / "run"
    assert rigger("collect", "CartPole-v1", "--policy", "usercode:Broken", "-n", "3", "--backend", "serial", "-o", str(run)) == 2
    err = capsys.readouterr().err
    assert "3 episodes failed with: ValueError: this policy is broken" in err
    assert "every episode failed with an error" in err.strip().splitlines()[-1]


def test_a_collect_that_fails_before_storing_anything_leaves_no_run_behind(tmp_path):
    import os

    from envrigger.errors import RolloutError
    from envrigger.policies import RandomPolicy
    from envrigger.rollout import rollout

    parent = os.getpid()

    def only_here(env):  # builds in this process, fails in every worker
        if os.getpid() != parent:
            raise RuntimeError("no GPU in the worker")
        return RandomPolicy(env.action_space, seed=0)

    run = tmp_path / "run"
    with pytest.raises(RolloutError, match="workers could not build the env or policy"):
        rollout("CartPole-v1", only_here, episodes=2, backend="process", workers=2, out=run)
    assert not run.exists()
    rollout("CartPole-v1", "random", episodes=2, out=run)  # an existing run is never removed by a failed append
    with pytest.raises(RolloutError):
        rollout("CartPole-v1", only_here, episodes=2, backend="process", workers=2, out=run)
    assert len(TrajectoryStore(run)) == 2


def test_export_asks_for_force_when_the_curriculum_ended_below_the_baseline(tmp_path, capsys):
    from envrigger.loop.library import Library

    loop = tmp_path / "loop"
    library = Library(loop / "library.db")
    spec = envharness.HarnessSpec(env_id="FrozenLake-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 30}}])
    library.admit(spec, finding="timeout", rationale="r", gates=[], seeds=[1], agent_id="a", round=1)
    library.close()
    warning = "the rigger arm ended below the original-env baseline on held-out levels (0.100 < 0.300): its curriculum did not help here"
    levels = {"disjoint": True, "heldout": 200, "validation": 100, "overlap": {}}  # as every run's final.json has them
    (loop / "final.json").write_text(json.dumps({"arms": {}, "warnings": [warning], "levels": levels}))
    assert rigger("export", str(loop), "--to", str(tmp_path / "dist"), "--no-wheel") == 2
    assert "ended below the original-env baseline" in capsys.readouterr().err and not (tmp_path / "dist").exists()
    assert rigger("export", str(loop), "--to", str(tmp_path / "dist"), "--no-wheel", "--force") == 0
    assert (tmp_path / "dist" / "registry.json").is_file()
