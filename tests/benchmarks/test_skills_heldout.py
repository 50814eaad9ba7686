"""benchmarks/skills_heldout.py, run as a user runs it: three arms on the same held-out levels, intervals, a table, resumable.

The scripted model (``--scripted``) on TextWorld with the loop's smallest budgets: the plumbing,
not a result. The first run on a machine generates TextWorld's pool of games into its cache
(about a minute); later runs read them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "skills_heldout.py"
TINY = ["--scripted", "--env", "textworld", "--rounds", "1", "--max-steps", "4", "--eval-episodes", "10", "--val-episodes", "10"]

needs_textworld = pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="needs the textworld extra")


def script(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)  # this checkout's packages, as pytest has them
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


@needs_textworld
def test_three_arms_on_the_same_heldout_levels_with_intervals_and_a_finished_seed_is_never_redone(tmp_path):
    out = tmp_path / "out"
    first = script(*TINY, "--seeds", "2", "-o", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "master seed 0: the loop" in first.stdout and "master seed 1: the loop" in first.stdout
    kept = [out / "textworld" / "seed-0" / "final.json", out / "textworld" / "none" / "seed-1" / "result.json"]
    before = [path.stat().st_mtime_ns for path in kept]

    again = script(*TINY, "--seeds", "2", "-o", str(out))  # the same command again: both seeds are read, not played
    assert again.returncode == 0, again.stderr[-3000:]
    assert ": the loop" not in again.stdout and ": the none arm" not in again.stdout
    assert [path.stat().st_mtime_ns for path in kept] == before

    results = json.loads((out / "results.json").read_text())
    (entry,) = results["envs"]
    result = entry["result"]
    assert result["seeds"] == [0, 1] and set(result["arms"]) == {"none", "original", "rigger"}
    for seed in entry["per_seed"]:  # the none arm played exactly the held-out levels of the loop's split, as the other two did
        split = json.loads((out / "textworld" / f"seed-{seed['seed']}" / "levels.json").read_text())
        assert seed["same_levels"] and seed["heldout_levels"] == split["heldout_levels"] and seed["disjoint"]
    for arm in result["arms"].values():
        lo, hi = arm["success"]["ci"]
        assert 0.0 <= lo <= arm["success"]["mean"] <= hi <= 1.0 and arm["success"]["n"] == 2
    assert set(result["difference"]) == {"original - none", "rigger - none", "rigger - original"}
    assert all(len(d["ci"]) == 2 and d["n"] == 2 for d in result["difference"].values())
    # What each arm spent: the trained arms' training calls are counted; the none arm trained on nothing.
    assert result["arms"]["original"]["model"]["train"]["model_calls"] >= 100 and result["arms"]["none"]["env_steps"]["train"] == 0
    assert result["arms"]["none"]["model"]["heldout"]["model_calls"] > 0
    assert results["meta"]["scripted"] and "OPENAI" not in json.dumps(results["meta"])

    table = (out / "results.md").read_text()
    assert "the plumbing, not a result" in table
    assert "| env | seeds | none | original | rigger | original − none | rigger − none | rigger − original |" in table
    assert "| textworld | 2 |" in table

    rebuilt = script("--report", "-o", str(out))  # from the finished seeds, playing nothing
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert json.loads((out / "results.json").read_text())["envs"][0]["result"] == result


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--scripted", "--seeds", "0"], "--seeds: got 0"),
        (["--scripted", "--budget-steps", "5"], "--budget-steps"),
        (["--scripted", "--env", "atari"], "--env"),
        (["--env", "textworld"], "give --base-url URL --model NAME"),
        (["--base-url", "http://127.0.0.1:9/v1"], "--base-url needs --model"),
        (["--base-url", "http://127.0.0.1:9/v1", "--model", "m"], "cannot reach an endpoint"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, args, says):
    done = script(*args, "-o", str(tmp_path / "out"), timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # nothing written
