"""envrigger collect and convert from the command line."""

from __future__ import annotations

import json

import pytest

from envharness import HarnessSpec
from envharness.cli import run_cli
from envrigger.cli import app
from envrigger.data import TrajectoryStore


def cli(*args: str) -> int:
    return run_cli(app, list(args), "envrigger", known=(ValueError, FileNotFoundError))


def test_collect_from_a_spec_file_with_workers(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(HarnessSpec(env_id="MiniGrid-Empty-5x5-v0", transforms=[{"name": "MoveGoal", "params": {"max_dist": 2}}]).to_json())
    assert cli("collect", str(spec), "--policy", "reference", "-n", "6", "-w", "2", "-o", str(tmp_path / "run")) == 0
    store = TrajectoryStore(tmp_path / "run")
    assert len(store) == 6 and all(e.success for e in store.iter_episodes())
    assert "success rate" in capsys.readouterr().out


def test_collect_batched_with_digests_only(tmp_path):
    assert (
        cli("collect", "CartPole-v1", "-n", "6", "--backend", "serial", "--batch", "3", "--store-obs", "none", "-o", str(tmp_path / "r"))
        == 0
    )
    steps = [s for _, steps in TrajectoryStore(tmp_path / "r").iter_episode_steps() for s in steps]
    assert steps and all(s.obs is None and s.obs_digest for s in steps)


def test_collect_appends_and_convert_round_trips_through_jsonl(tmp_path):
    run = tmp_path / "run"
    assert cli("collect", "FrozenLake-v1", "-n", "3", "--backend", "serial", "-o", str(run)) == 0
    assert cli("collect", "FrozenLake-v1", "-n", "2", "--seed", "3", "--backend", "serial", "-o", str(run)) == 0
    assert [e.seed for e in TrajectoryStore(run).iter_episodes()] == [0, 1, 2, 3, 4]
    assert cli("convert", str(run), str(tmp_path / "out.jsonl")) == 0
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert [json.loads(line)["seed"] for line in lines] == [0, 1, 2, 3, 4]
    assert cli("convert", str(tmp_path / "out.jsonl"), str(tmp_path / "copy")) == 0
    assert len(TrajectoryStore(tmp_path / "copy")) == 5


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["collect", "missing.json", "-o", "x"], "does not exist"),
        (["collect", "CartPole-v1", "--backend", "gpu", "-o", "x"], "backend"),
        (["collect", "CartPole-v1", "--policy", "genius", "-o", "x"], "policy"),
        (["collect", "NoSuchEnv-v0", "-o", "x"], "NoSuchEnv-v0"),
        (["collect", "CartPole-v1"], "--output"),
        (["convert", "a", "b"], "one side must be"),
        (["convert", "nothing.jsonl", "run"], "no such file"),
        (["convert", "not-a-run", "out.jsonl"], "does not exist"),
        (["collect", "CartPole-v1", "--batch", "4", "--backend", "process", "-o", "x"], "serial backend only"),
        (["collect", "CartPole-v1", "--store-obs", "most", "-o", "x"], "store_obs"),
        (["collect", "CartPole-v1", "--backend", "ray", "--ray-address", "no-port", "-o", "x"], "not a Ray address"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_code_2(args, fragment, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli(*args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err


@pytest.mark.parametrize("case", ["policy file that is not a learner", "output that is a file"])
def test_collect_refuses_bad_input_in_one_line_and_writes_nothing(case, tmp_path, capsys):
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "afile").write_text("x")
    out = tmp_path / ("run" if case.startswith("policy") else "afile")
    policy = str(tmp_path / "list.json") if case.startswith("policy") else "random"
    assert cli("collect", "FrozenLake-v1", "--policy", policy, "-n", "2", "--backend", "serial", "-o", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("envrigger: error:")
    assert not (tmp_path / "run").exists() and (tmp_path / "afile").read_text() == "x"


def test_the_console_scripts_exit_0_every_time_after_reading_parquet(tmp_path):
    """A run read back through Python bytes made Arrow's threads abort the process at exit (134) most times."""
    import subprocess
    import sys

    script = "import sys; from envrigger.cli import main; sys.argv[0] = 'envrigger'; main()"
    codes = []
    for i in range(6):
        run = tmp_path / f"run{i}"
        for args in (["collect", "CartPole-v1", "-n", "2", "--backend", "serial", "-o", str(run)], ["diagnose", str(run)]):
            done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)
            codes.append((done.returncode, done.stderr.strip()[-200:]))
    assert all(code == 0 for code, _ in codes), codes


def test_convert_refuses_to_replace_a_fifo_with_a_file(tmp_path, capsys):
    import os
    import stat

    run = tmp_path / "run"
    assert cli("collect", "FrozenLake-v1", "-n", "2", "--backend", "serial", "-o", str(run)) == 0
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    assert run_cli(app, ["convert", str(run), str(fifo)], "envrigger") == 2
    assert "not a regular file" in capsys.readouterr().err and stat.S_ISFIFO(fifo.stat().st_mode)


@pytest.mark.parametrize("command", [["collect"], ["diagnose"], ["run"], ["ledger", "eval"], ["library", "list"]])
def test_every_subcommands_help_says_it_takes_import(command, capsys):
    assert run_cli(app, [*command, "--help"], "envrigger") == 0
    assert "--import MODULE" in " ".join(capsys.readouterr().out.split())


def test_policy_help_and_error_name_the_class_forms(tmp_path, capsys):
    assert run_cli(app, ["collect", "--help"], "envrigger") == 0
    assert "module:Class or file.py:Class" in " ".join(capsys.readouterr().out.split())
    assert run_cli(app, ["collect", "CartPole-v1", "--policy", "nothing-like-this", "-n", "1", "-o", str(tmp_path / "r")], "envrigger") == 2
    error = capsys.readouterr().err
    assert "module:Class or file.py:Class" in error and len(error.strip().splitlines()) == 1


def test_a_round_line_names_what_it_admitted_and_what_the_library_becomes(capsys):
    from envrigger.cli import _show_round
    from envrigger.loop.results import RoundSummary

    summary = {
        "round": 1,
        "arms": {"rigger": {"validation": {"success": 0.5, "ci": [0.4, 0.6], "episodes": 10}}},
        "findings": ["loop"],
        "candidates": 4,
        "admitted": [7],  # component ids, as the round stores them
        "admitted_labels": ['RemoveWalls{"count": 2}'],
        "rejected_by": {"learnability": 3},
        "library_size": 0,
    }
    _show_round(RoundSummary.model_validate(summary))
    out = " ".join(capsys.readouterr().out.split())
    assert "4 candidates" in out and 'admitted 1: RemoveWalls{"count": 2}' in out
    assert "rejected 3 (3 at learnability)" in out and "library 0 -> 1 component for the next round" in out
