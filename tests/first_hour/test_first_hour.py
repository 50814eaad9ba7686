"""A newcomer's first hour, end to end, in fresh virtual environments and only through the CLI.

Installs the project (not editable) with the sb3 extra into a fresh venv, then, from a
directory outside the checkout: wraps MiniGrid with transforms, trains SB3 PPO briefly on
``spec.build()``, records the saved model with ``envrigger collect``, diagnoses it to an
HTML report, runs the loop, exports the library, installs the export into a second fresh
venv (which never sees the checkout) and ``gym.make``\\ s an exported id there. The docs
walk the same path (docs/quickstart.md, "The first hour"). The installs add ``--no-compile``:
pip's byte-compiling of every installed module (torch's thousands) is most of an install's
time and changes nothing this test checks; Python compiles what is imported as it imports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]

TRAIN = textwrap.dedent(
    """
    import envharness
    from stable_baselines3 import PPO

    spec = envharness.HarnessSpec.from_json(open("doorkey.json").read())
    model = PPO("MlpPolicy", spec.build(), n_steps=256, batch_size=64, n_epochs=2, seed=0, device="cpu")
    model.learn(1024)
    model.save("ppo.zip")
    """
)


def venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path / "bin"


def run(bin_dir: Path, *args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    # A clean environment: nothing from this test run's interpreter or checkout leaks in.
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(cwd)), "COLUMNS": "100"}
    done = subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_first_hour_through_the_cli_in_fresh_venvs(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    user = venv(tmp_path / "user-venv")
    # CPU torch first, as the quickstart says, so the sb3 extra does not pull a CUDA build.
    run(user, "python", "-m", "pip", "install", "--quiet", "--no-compile", "torch==2.13.0", cwd=work)
    run(user, "python", "-m", "pip", "install", "--quiet", "--no-compile", f"{PROJECT}[sb3]", cwd=work)
    located = run(user, "python", "-c", "import envharness, envrigger; print(envharness.__file__, envrigger.__file__)", cwd=work)
    assert str(PROJECT) not in located.stdout  # the installed copy, not the checkout

    run(user, "envharness", "wrap", "MiniGrid-DoorKey-6x6-v0", "DropField:field=mission", "Flatten", "-o", "doorkey.json", cwd=work)
    run(user, "envharness", "check", "doorkey.json", "--episodes", "3", cwd=work)
    (work / "train.py").write_text(TRAIN)
    run(user, "python", "train.py", cwd=work)

    collected = run(
        user, "envrigger", "collect", "doorkey.json", "--policy", "PPO:ppo.zip", "-n", "20", "-w", "2", "-o", "runs/ppo", cwd=work
    )
    assert "20" in collected.stdout
    run(user, "envrigger", "diagnose", "runs/ppo", "-f", "html", "-o", "report.html", cwd=work)
    report = (work / "report.html").read_text()
    assert "<html" in report and "envrigger diagnosis: runs/ppo" in report

    loop = run(
        user, "envrigger", "run", "doorkey.json", "--learner", "ppo", "--arms", "original,rigger", "--rounds", "2",
        "--budget-steps", "4096", "--collect-episodes", "30", "--val-episodes", "10", "--eval-episodes", "20",
        "--candidates", "3", "-w", "2", "-o", "runs/loop", cwd=work, timeout=1800,
    )  # fmt: skip
    assert "held-out" in loop.stdout
    final = json.loads((work / "runs" / "loop" / "final.json").read_text())
    assert set(final["arms"]) == {"original", "rigger"}
    # Export asks for --force when the rigger arm ended below the original; a newcomer's short run may.
    export = ["envrigger", "export", "runs/loop", "--to", "dist", "--package", "first_hour_envs"]
    run(user, *export, *(["--force"] if final.get("warnings") else []), cwd=work)
    registry = json.loads((work / "dist" / "registry.json").read_text())
    env_id = registry["environments"][0]["id"]

    colleague = venv(tmp_path / "colleague-venv")
    run(
        colleague,
        "python",
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-compile",
        "--find-links",
        "dist/wheels",
        "dist/first_hour_envs",
        cwd=work,
    )
    script = (
        "import gymnasium as gym, first_hour_envs, envharness\n"
        f"env = gym.make({env_id!r})\n"
        "obs, info = env.reset(seed=3)\n"
        "obs, reward, terminated, truncated, info = env.step(env.action_space.sample())\n"
        "print(type(env.unwrapped).__name__, obs.ndim, info['verdict'].reason, envharness.__file__)\n"
    )
    shown = run(colleague, "python", "-c", script, cwd=tmp_path).stdout.split()
    assert shown[0] == "DoorKeyEnv" and shown[1] == "1"  # the MiniGrid env, with the flattened observation of the spec
    assert str(tmp_path / "colleague-venv") in shown[-1]  # envharness came from the exported wheel
