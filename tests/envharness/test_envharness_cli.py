"""The envharness CLI: catalog, wrap, check; bad arguments give one line and exit code 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envharness import HarnessSpec
from envharness.cli import app, run_cli
from envharness.transforms import TRANSFORMS


def cli(*args: str) -> int:
    return run_cli(app, list(args), "envharness")


def test_transforms_lists_the_whole_catalog_as_json(capsys):
    assert cli("transforms", "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(TRANSFORMS)
    assert all(r["kind"] in {"state", "rule", "observation", "link"} for r in rows)


def test_transforms_table_filters_by_kind(capsys):
    assert cli("transforms", "--kind", "link") == 0
    out = capsys.readouterr().out
    assert "Chain" in out and "MoveGoal" not in out


@pytest.mark.parametrize("width", [80, 200])
def test_transforms_table_breaks_no_word_at_any_terminal_width(width, monkeypatch, capsys):
    from envharness.cli import catalog, console

    monkeypatch.setattr(console, "width", width)
    assert cli("transforms") == 0
    out = capsys.readouterr().out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= width
    words = set(out.replace("│", " ").split())
    for row in catalog():  # every word of every cell appears whole, not folded across lines
        for text in (row["name"], row["summary"], row["works_on"], *row["parameters"], *row["targets"]):
            assert set(text.replace(",", " ").split()) <= {w.strip(",") for w in words}, text


REPRESENTATIVE_ENVS = {
    "MiniGrid": ("MiniGrid-DoorKey-5x5-v0", {}),
    "FrozenLake": ("FrozenLake-v1", {}),
    "Taxi": ("Taxi-v4", {}),
    "CliffWalking": ("CliffWalking-v1", {}),
    "CartPole": ("CartPole-v1", {}),
    "MountainCar": ("MountainCar-v0", {}),
    "Acrobot": ("Acrobot-v1", {}),
}


@pytest.mark.parametrize("name", sorted(n for n, cls in TRANSFORMS.items() if cls.capability))
def test_a_state_transform_works_on_exactly_the_envs_the_catalog_names(name):
    import gymnasium as gym
    import minigrid

    from envharness.adapters import adapter_for
    from envharness.cli import works_on

    minigrid.register_minigrid_envs()

    cls = TRANSFORMS[name]
    named = set(works_on(cls).split(", "))
    for family, (env_id, kwargs) in REPRESENTATIVE_ENVS.items():
        env = gym.make(env_id, **kwargs)
        assert (cls.capability in adapter_for(env).capabilities) == (family in named), (family, works_on(cls))
        env.close()


def test_wrap_writes_a_spec_that_builds(tmp_path, capsys):
    out = tmp_path / "spec.json"
    code = cli(
        "wrap",
        "MiniGrid-DoorKey-8x8-v0",
        "MoveGoal:max_dist=3",
        "BlockAction:actions=[4,5],reason=hands off",
        "ActionSlip:p=0.1",
        "-o",
        str(out),
    )
    assert code == 0
    spec = HarnessSpec.from_json(out.read_text())
    assert [t.name for t in spec.transforms] == ["MoveGoal", "BlockAction", "ActionSlip"]
    assert spec.transforms[1].params == {"actions": [4, 5], "reason": "hands off"}
    env = spec.build()
    assert env.reset(seed=0)[1]["level"]["goal_distance"] <= 3


def test_wrap_passes_env_kwargs(tmp_path):
    out = tmp_path / "spec.json"
    assert cli("wrap", "FrozenLake-v1", "StepBudget:max_steps=9", "-k", "is_slippery=false", "-k", "map_name=8x8", "-o", str(out)) == 0
    assert HarnessSpec.from_json(out.read_text()).env_kwargs == {"is_slippery": False, "map_name": "8x8"}


def test_check_builds_checks_and_rolls_out(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(HarnessSpec(env_id="FrozenLake-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 10}}]).to_json())
    assert cli("check", str(spec), "--episodes", "4") == 0
    out = capsys.readouterr().out
    assert "passed" in out and "timeout" in out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["wrap", "FrozenLake-v1", "MoveGoal:max_dist=999"], "MoveGoal.max_dist"),
        (["wrap", "CartPole-v1", "FrozenLakeMap:add_holes=2"], "FrozenLakeMap"),
        (["wrap", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
        (["wrap", "FrozenLake-v1", "Teleport"], "Teleport"),
        (["wrap", "FrozenLake-v1", "MoveGoal:max_dist"], "key=value"),
        (["wrap", "FrozenLake-v1", "-k", "size"], "--kwarg"),
        (["check", "missing.json"], "does not exist"),
        (["transforms", "--kind", "magic"], "--kind"),
        (["frobnicate"], "frobnicate"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_code_2(args, fragment, capsys):
    assert cli(*args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err


def test_bad_spec_file_is_reported_and_left_untouched(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text('{"env_id": "CartPole-v1", "transforms": [{"name": "StepBudget", "params": {"max_steps": -1}}]}')
    before = spec.read_bytes()
    assert cli("check", str(spec)) == 2
    assert "StepBudget.max_steps" in capsys.readouterr().err
    assert spec.read_bytes() == before


def test_failed_wrap_does_not_overwrite_an_existing_spec(tmp_path):
    out = tmp_path / "spec.json"
    assert cli("wrap", "CartPole-v1", "StepBudget:max_steps=5", "-o", str(out)) == 0
    before = out.read_bytes()
    assert cli("wrap", "CartPole-v1", "StepBudget:max_steps=0", "-o", str(out)) == 2
    assert out.read_bytes() == before


def test_console_script_exits_2_without_traceback():
    exe = shutil.which("envharness") or str(Path(sys.executable).parent / "envharness")
    done = subprocess.run([exe, "wrap", "CartPole-v1", "MoveGoal"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "MoveGoal" in done.stderr


@pytest.mark.parametrize(
    "case", ["not utf-8", "huge number", "output is a directory", "bool step limit", "negative seed", "output directory missing"]
)
def test_odd_input_gets_one_line_and_exit_code_2(case, tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_bytes(b'{"env_id": "CartPole-v1"}')
    args = {
        "not utf-8": ["check", str(tmp_path / "latin.json")],
        "huge number": ["wrap", "CartPole-v1", "StepBudget:max_steps=" + "9" * 5000],
        "output is a directory": ["wrap", "CartPole-v1", "-o", str(tmp_path)],
        "bool step limit": ["wrap", "CartPole-v1", "-k", "max_episode_steps=true"],
        "negative seed": ["check", str(spec), "--seed", "-5"],
        "output directory missing": ["wrap", "CartPole-v1", "-o", str(tmp_path / "no" / "such" / "spec.json")],
    }[case]
    (tmp_path / "latin.json").write_bytes('{"env_id": "Caf\u00e9"}'.encode("latin-1"))
    assert cli(*args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("envharness: error:")


def test_writing_output_to_a_device_or_fifo_writes_into_it_and_keeps_it(tmp_path):
    """-o /dev/null once replaced the machine's /dev/null with a regular file (as root, a rename over a device node)."""
    import os
    import stat
    import threading

    from envharness.cli import write_atomically

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_atomically(fifo, '{"ok": true}\n')
    reader.join(timeout=10)
    assert got == ['{"ok": true}\n'] and stat.S_ISFIFO(fifo.stat().st_mode)
    write_atomically(Path(os.devnull), "nothing\n")
    assert stat.S_ISCHR(Path(os.devnull).stat().st_mode)


def test_a_mistyped_output_directory_is_refused_not_created(tmp_path, capsys):
    assert cli("wrap", "CartPole-v1", "-o", str(tmp_path / "sepcs" / "spec.json")) == 2
    assert "mkdir -p" in capsys.readouterr().err and not (tmp_path / "sepcs").exists()


def test_output_files_get_the_mode_a_plain_open_gives_them(tmp_path):
    """mkstemp's 0600 once left report.html unreadable to the team's web server."""
    import os

    from envharness.cli import write_atomically

    old = os.umask(0o022)
    try:
        write_atomically(tmp_path / "report.html", "<html></html>")
        write_atomically(tmp_path / "deep" / "er" / "r.json", "{}", make_parents=True)
    finally:
        os.umask(old)
    assert (tmp_path / "report.html").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "deep" / "er" / "r.json").read_text() == "{}"
