"""`envrigger run`: seeds at once with each seed's lines labelled; unknown arms, learners and jobs refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_the_cli_runs_seeds_at_once_and_labels_each_seeds_lines(tmp_path):
    args = ["--learner", "qlearning", "--allow-seen-levels", "--rounds", "1", "--budget-steps", "2000", "--collect-episodes", "10"]
    args += ["--eval-episodes", "10", "--val-episodes", "10", "--candidates", "1", "--backend", "serial", "--seeds", "2", "--jobs", "2"]
    out = subprocess.run(
        [sys.executable, "-m", "envrigger.cli", "run", "FrozenLake-v1", *args, "-o", str(tmp_path / "cli")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    for seed in (0, 1):
        assert f"master seed {seed}: round 1: training the rigger arm" in out.stdout
        assert (tmp_path / "cli" / f"seed-{seed}" / "final.json").is_file()
    assert json.loads((tmp_path / "cli" / "result.json").read_text())["seeds"] == [0, 1]
    refused = subprocess.run(
        [sys.executable, "-m", "envrigger.cli", "run", "FrozenLake-v1", "--jobs", "0", "-o", str(tmp_path / "zero")],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "--jobs" in refused.stderr and not (tmp_path / "zero").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--arms", "original,bogus"],
            "--arms: got 'original,bogus'; give distinct arms from original,original-select,dr,dr-any,plr,accel,plr-random,rigger-noreplay,rigger",
        ),
        (["--learner", "dqn"], "--learner: got 'dqn'; use one of qlearning, ppo"),
    ],
)
def test_run_refuses_unknown_arms_and_learners_in_one_line(tmp_path, args, message):
    out = subprocess.run(
        [sys.executable, "-m", "envrigger.cli", "run", "MiniGrid-DoorKey-6x6-v0", *args, "-o", str(tmp_path / "r")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
