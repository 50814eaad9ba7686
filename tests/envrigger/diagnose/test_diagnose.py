"""envrigger diagnose finds planted weaknesses with the right rate and evidence, and nothing spurious."""

from __future__ import annotations

import json

import pytest
from planted_walkers import GivesUpWhenFar, SometimesLava, doomed

from envharness import HarnessSpec
from envharness.cli import run_cli
from envrigger.cli import app
from envrigger.data import TrajectoryStore
from envrigger.data.jsonl import import_jsonl
from envrigger.diagnose import DiagnoseConfig, diagnose
from envrigger.policies.reference import TabularPlanner
from envrigger.rollout import rollout
from envrigger.stats import wilson


class Oscillator:
    """On a p-fraction of episodes, steps right-left-right-left between two cells."""

    name = "oscillator"

    def __init__(self, env, p):
        self.planner, self.p = TabularPlanner(env), p

    def reset(self, seed):
        self.oscillating, self.t = doomed(seed, self.p), 0

    def act(self, obs, info):
        self.t += 1
        return (2 if self.t % 2 else 0) if self.oscillating else self.planner.act(obs, info)


SEEDS = range(200)


@pytest.fixture(scope="module")
def lava_run(tmp_path_factory):
    spec = HarnessSpec(env_id="MiniGrid-LavaGapS6-v0")
    return rollout(
        spec, lambda env: SometimesLava(env, 0.3), seeds=SEEDS, backend="process", workers=2, out=tmp_path_factory.mktemp("d") / "lava"
    )


def test_lava_deaths_are_found_with_the_planted_rate(lava_run):
    report = diagnose(lava_run)
    planted = sum(doomed(s, 0.3) for s in SEEDS)
    lava = report.finding("terminal_cause:lava")
    assert lava is not None and lava.episodes == planted and lava.total == len(SEEDS)
    assert lava.rate_ci[0] <= 0.3 <= lava.rate_ci[1]
    assert lava.severity == 1.0 and report.findings[0].name == "terminal_cause:lava"
    episodes = {e.episode_id: e for e in lava_run.iter_episodes()}
    for evidence in lava.evidence:
        episode = episodes[evidence.episode_id]
        assert episode.reason == "lava" and doomed(episode.seed, 0.3)
        assert evidence.end == episode.length - 1 and evidence.excerpt[-1]["t"] == evidence.end


def test_oscillation_is_found_as_a_loop_with_step_ranges(tmp_path):
    run = rollout(
        HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False}),
        lambda env: Oscillator(env, 0.25),
        seeds=SEEDS,
        out=tmp_path / "osc",
    )
    report = diagnose(run)
    loop = report.finding("loop")
    planted = sum(doomed(s, 0.25) for s in SEEDS)
    assert loop is not None and loop.episodes == planted and loop.severity == 1.0
    seeds = {e.episode_id: e.seed for e in run.iter_episodes()}
    for evidence in loop.evidence:
        assert doomed(seeds[evidence.episode_id], 0.25)
        assert evidence.end - evidence.start >= 50  # the whole oscillation, not a fragment
        states = [s["state"] for s in evidence.excerpt]
        assert states[2:] and all(a == b for a, b in zip(states, states[2:]))
    timeout = report.finding("timeout")
    assert timeout is not None and timeout.episodes == planted


def test_failure_concentrated_where_the_goal_is_far_is_found_with_its_threshold(tmp_path):
    spec = HarnessSpec(env_id="MiniGrid-Empty-8x8-v0", transforms=[{"name": "MoveGoal", "params": {"min_dist": 1, "max_dist": 10}}])
    run = rollout(spec, GivesUpWhenFar, seeds=SEEDS, backend="process", workers=2, out=tmp_path / "far")
    report = diagnose(run)
    region = report.finding("feature_region:goal_distance")
    assert region is not None
    assert (region.stats["op"], region.stats["threshold"]) == (">", 6.0)
    assert region.stats["failure_rate_in"] == 1.0 and region.stats["failure_rate_out"] == 0.0
    assert region.title.startswith("fails when goal_distance > 6")
    assert region.severity == 1.0
    assert report.finding("timeout").episodes == region.episodes


def test_clean_reference_run_has_no_spurious_findings(tmp_path):
    spec = HarnessSpec(env_id="MiniGrid-DoorKey-8x8-v0", transforms=[{"name": "MoveGoal", "params": {"max_dist": 8}}])
    report = diagnose(rollout(spec, "reference", seeds=SEEDS, backend="process", workers=2, out=tmp_path / "clean"))
    assert report.success_rate == 1.0
    assert report.findings == []  # what a flawless planner does in every episode is style, not weakness
    assert report.finding("loop") is None and report.finding("revisit") is None


def test_blocked_actions_are_found_with_the_refusal_in_the_evidence(tmp_path):
    spec = HarnessSpec(env_id="FrozenLake-v1", transforms=[{"name": "BlockAction", "params": {"actions": [3], "reason": "no up"}}])
    report = diagnose(rollout(spec, "random", seeds=range(60), out=tmp_path / "blocked"))
    blocked = report.finding("blocked_action")
    assert blocked is not None and blocked.rate > 0.3
    assert all(any(step["blocked"] == "no up" for step in e.excerpt) for e in blocked.evidence)


def test_variance_across_seeds_of_the_same_level_is_found(lava_run, tmp_path):
    # LavaGapS6 has a handful of layouts; the planted policy fails ~30% of the time on each.
    levels = {e.level_id for e in lava_run.iter_episodes()}
    variance = diagnose(lava_run).finding("high_variance")
    assert variance is not None and variance.stats["levels"] == len(levels) == variance.stats["noisy_levels"]
    assert variance.rate == 1.0 and variance.severity == 1.0
    # The reference planner plays the same levels the same way every time: no variance.
    steady = diagnose(rollout(HarnessSpec(env_id="MiniGrid-LavaGapS6-v0"), "reference", seeds=SEEDS, out=tmp_path / "steady"))
    assert steady.finding("high_variance") is None


def test_tool_errors_from_an_external_harness_are_found(tmp_path):
    lines = []
    for i in range(40):
        flaky = i % 4 == 0
        steps = [
            {"action": {"tool": "run_tests"}, "info": {"tool_error": "timeout"} if flaky else {}},
            {"action": {"tool": "submit"}, "terminated": True},
        ]
        lines.append(
            {"episode_id": i, "verdict": {"success": not flaky}, "steps": steps, "costs": {"tool_errors": int(flaky), "retries": 0}}
        )
    source = tmp_path / "agent.jsonl"
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    report = diagnose(import_jsonl(source, tmp_path / "run"))
    tool = report.finding("tool_error")
    assert tool is not None and tool.episodes == 10 and tool.severity == 1.0
    assert tool.evidence[0].excerpt[0]["info"] == {"tool_error": "timeout"}


def test_reward_without_success_is_found(tmp_path):
    report = diagnose(rollout("CartPole-v1", "random", seeds=range(30), out=tmp_path / "cp"))
    finding = report.finding("reward_without_success")
    assert finding is not None and finding.rate == 1.0
    assert report.finding("terminal_cause:pole_fell").episodes == 30


def test_thresholds_are_configurable(lava_run):
    strict = diagnose(lava_run, DiagnoseConfig(min_rate=0.5))
    assert strict.finding("terminal_cause:lava") is None


def test_wilson_interval_brackets_the_rate():
    lo, hi = wilson(30, 100)
    assert lo < 0.3 < hi and round(hi - lo, 2) == 0.18


def test_cli_formats(lava_run, tmp_path, capsys):
    assert run_cli(app, ["diagnose", str(lava_run.path)], "envrigger") == 0
    console = capsys.readouterr().out
    assert "terminal_cause:lava" in console
    assert run_cli(app, ["diagnose", str(lava_run.path), "--format", "json", "-o", str(tmp_path / "d.json")], "envrigger") == 0
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["findings"][0]["name"] == "terminal_cause:lava" and data["findings"][0]["evidence"]
    # what to try travels with the finding in JSON, as the console and the HTML report show it
    assert "MoveAgent" in data["findings"][0]["what_to_try"]
    assert f"terminal_cause:lava: {', '.join(data['findings'][0]['what_to_try'][:5])}" in console
    assert run_cli(app, ["diagnose", str(lava_run.path), "--format", "html", "-o", str(tmp_path / "r.html")], "envrigger") == 0
    html = (tmp_path / "r.html").read_text()
    assert html.count("data:image/png;base64,") >= 1 and "terminal_cause:lava" in html and "<script" not in html


def test_html_report_escapes_what_the_agent_wrote(tmp_path):
    line = {
        "policy_id": "<script>alert(1)</script>",
        "verdict": {"success": False, "reason": "<b>bad</b>"},
        "steps": [{"action": "<img src=x onerror=alert(1)>", "info": {"tool_error": "<script>"}}],
    }
    source = tmp_path / "evil.jsonl"
    source.write_text("\n".join(json.dumps({**line, "episode_id": i}) for i in range(5)) + "\n")
    store = import_jsonl(source, tmp_path / "run")
    assert run_cli(app, ["diagnose", str(store.path), "-f", "html", "-o", str(tmp_path / "r.html")], "envrigger") == 0
    html = (tmp_path / "r.html").read_text()
    assert "<script>" not in html and "<img src=x" not in html and "&lt;script&gt;" in html


@pytest.mark.parametrize("problem", ["missing", "empty", "corrupt", "no-run-json"])
def test_bad_runs_give_one_line_and_exit_code_2(problem, tmp_path, capsys):
    path = tmp_path / "run"
    if problem == "empty":
        TrajectoryStore.create(path)
    elif problem == "corrupt":
        rollout("CartPole-v1", seeds=[0, 1], out=path)
        next((path / "episodes").glob("part-*")).write_bytes(b"not parquet at all")
    elif problem == "no-run-json":
        path.mkdir()
    assert run_cli(app, ["diagnose", str(path)], "envrigger") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err


def test_unknown_format_is_refused(lava_run, capsys):
    assert run_cli(app, ["diagnose", str(lava_run.path), "-f", "pdf"], "envrigger") == 2
    assert "--format" in capsys.readouterr().err


def test_diagnose_reads_a_run_imported_from_minari(tmp_path, monkeypatch):
    pytest.importorskip("minari", reason="Minari is an optional extra: pip install 'envharness[minari]'")
    from envrigger.data.minari import export_minari, import_minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    run = rollout(HarnessSpec(env_id="FrozenLake-v1"), "random", seeds=range(40), out=tmp_path / "a")
    export_minari(run, "envrigger/lake-v0")
    report = diagnose(import_minari("envrigger/lake-v0", tmp_path / "b"))
    assert report.episodes == 40 and report.findings and report.findings[0].severity > 0.5


def test_a_report_path_in_a_missing_directory_is_refused_in_one_line(tmp_path, capsys):
    store = rollout("CartPole-v1", seeds=[0, 1], out=tmp_path / "run")
    target = tmp_path / "nonexistent" / "dir" / "r.html"
    assert run_cli(app, ["diagnose", str(store.path), "-f", "html", "-o", str(target)], "envrigger") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and not target.parent.exists()
