"""envrigger export: a library becomes a package that installs in a fresh venv, with the envharness wheel, and makes its envs."""

from __future__ import annotations

import json
import subprocess
import sys

from envharness import HarnessSpec
from envrigger.loop.library import Library

LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})

NEAR = {"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}}


def test_exported_package_installs_in_a_fresh_venv_and_makes_envs(tmp_path):
    library = Library(tmp_path / "library.db")
    moved = LAKE.extended(NEAR)
    library.admit(moved, finding="terminal_cause:hole", rationale="reverse curriculum", gates=[], seeds=[1], agent_id="test")
    from envrigger.export import export_library

    written = export_library(library, tmp_path / "dist", package="lake_envs")
    registry = json.loads(written["registry"].read_text())
    env_id = registry["environments"][0]["id"]
    assert env_id == "lake_envs/FrozenLake-c1-v0"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]  # byte-compiling is most of an install's time
    # No project checkout: the exported package and the envharness wheel written beside it (its
    # dependencies come from the package index), installed from a directory outside the project.
    assert written["wheel"].parent == tmp_path / "dist" / "wheels" and written["wheel"].name.startswith("envharness-")
    subprocess.run([*pip, "--find-links", str(written["wheel"].parent), str(written["package"])], check=True, timeout=900, cwd=tmp_path)
    script = (
        "import gymnasium as gym, lake_envs\n"
        f"env = gym.make({env_id!r})\n"
        "obs, info = env.reset(seed=0)\n"
        "print(info['level']['goal_distance'], type(env.unwrapped).__name__)\n"
        f"print(gym.make('lake_envs:{env_id}').reset(seed=1)[1]['level']['goal_distance'] <= 2)\n"
    )
    out = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path)
    first, second = out.stdout.split("\n")[:2]
    assert float(first.split()[0]) <= 2 and first.split()[1] == "FrozenLakeEnv" and second == "True"
    located = subprocess.run([str(venv / "bin" / "python"), "-c", "import envharness; print(envharness.__file__)"], capture_output=True,
                             text=True, check=True, cwd=tmp_path)  # fmt: skip
    assert str(venv) in located.stdout  # the installed wheel, not the checkout
