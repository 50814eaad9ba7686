"""Diagnose by contrast: planted flaws on envs the other diagnose tests do not use, and flawless agents.

Each planted agent misbehaves on a seeded share of episodes (the same draw the test makes):
a CartPole controller that pushes the wrong way once the pole leans right, a Taxi driver
that makes an illegal pickup and still delivers, a CliffWalking walker that falls off the
cliff once and still arrives, a FrozenLake walker that gives up on large generated maps.
Flawless reference agents must give no finding at all: what they do on every episode
(walking right eleven times, pumping energy) is style, not weakness.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from envharness.cli import run_cli
from envrigger.cli import app
from envrigger.diagnose import diagnose
from envrigger.policies.reference import CartPoleController, TabularPlanner
from envrigger.report import render_html
from envrigger.rollout import rollout

SEEDS = range(200)


def doomed(seed: int, p: float) -> bool:
    return bool(np.random.default_rng([7, seed]).random() < p)


class LeansRightBlind:
    """Balances CartPole, except on a p-fraction of episodes, where it pushes left whenever the pole leans right."""

    name = "leans-right-blind"

    def __init__(self, env, p=0.3):
        self.good, self.p = CartPoleController(env), p

    def reset(self, seed):
        self.flawed = doomed(seed, self.p)

    def act(self, obs, info):
        return 0 if self.flawed and obs[2] > 0.01 else self.good.act(obs, info)


class IllegalPickup:
    """Drives the taxi to the goal, but on a p-fraction of episodes first tries a pickup where there is no passenger (-10)."""

    name = "illegal-pickup"

    def __init__(self, env, p=0.3):
        self.good, self.p = TabularPlanner(env), p

    def reset(self, seed):
        self.flawed, self.t = doomed(seed, self.p), 0

    def act(self, obs, info):
        self.t += 1
        return 4 if self.flawed and self.t == 1 else self.good.act(obs, info)


class CliffOnce:
    """Walks the shortest path, but on a p-fraction of episodes steps right and then down into the cliff (-100) first."""

    name = "cliff-once"

    def __init__(self, env, p=0.2):
        self.good, self.p = TabularPlanner(env), p

    def reset(self, seed):
        self.flawed, self.t = doomed(seed, self.p), 0

    def act(self, obs, info):
        self.t += 1
        if self.flawed and self.t <= 2:
            return (1, 2)[self.t - 1]
        return self.good.act(obs, info)


class GivesUpOnLargeMaps:
    """Solves generated FrozenLake maps up to 6x6; on larger ones it walks into the left wall until time runs out."""

    name = "gives-up-large"

    def __init__(self, env):
        self.good, self.large = TabularPlanner(env), False

    def act(self, obs, info):
        if "level" in info:  # the reset's info describes the level
            self.large = info["level"]["size"] > 6
        return 0 if self.large else self.good.act(obs, info)


def _planted(run, p):
    return {e.episode_id for e in run.iter_episodes() if doomed(e.seed, p)}


def _excerpts_show_their_ranges(report):
    for finding in report.findings:
        for e in finding.evidence:
            shown = {s["t"] for s in e.excerpt}
            assert e.excerpt and {e.start, e.end} <= shown, (finding.name, e.start, e.end, sorted(shown))


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    return rollout("CartPole-v1", LeansRightBlind, seeds=SEEDS, backend="process", workers=2, out=tmp_path_factory.mktemp("d") / "cp")


def test_a_state_conditional_failure_is_found_with_its_condition_in_the_envs_terms(cartpole_run):
    report = diagnose(cartpole_run)
    fell = report.finding("terminal_cause:pole_fell")
    failed = {e.episode_id for e in cartpole_run.iter_episodes() if not e.success}
    assert fell is not None and fell.episodes == len(failed) >= 20 and failed <= _planted(cartpole_run, 0.3)
    condition = fell.stats["condition"]
    # It falls to the right: the rule is about the pole leaning or turning right, named as CartPole names them.
    assert {c["feature"] for c in condition["clauses"]} <= {"pole_angle", "pole_angular_velocity"}
    assert all(c["op"] == ">" and c["threshold"] > 0 for c in condition["clauses"])
    assert condition["precision"] >= 0.9 and condition["recall"] >= 0.5 and condition["support"] >= 10
    assert fell.title.startswith("fails by pole fell, when pole_")
    # Classic-control evidence shows the decoded state, not a digest.
    assert all(isinstance(s["state"], list) and len(s["state"]) == 4 for e in fell.evidence for s in e.excerpt)
    _excerpts_show_their_ranges(report)


def test_costly_events_inside_successful_episodes_are_findings(tmp_path):
    taxi = rollout("Taxi-v4", IllegalPickup, seeds=SEEDS, out=tmp_path / "taxi")
    report = diagnose(taxi)
    assert report.success_rate == 1.0
    costly = report.finding("costly_event")
    # A planted pickup is illegal unless the passenger happens to wait where the taxi starts.
    illegal = {e.episode_id for e, steps in taxi.iter_episode_steps() if steps[0].reward == -10}
    assert illegal <= _planted(taxi, 0.3) and len(illegal) >= 0.9 * len(_planted(taxi, 0.3))
    assert costly is not None and costly.episodes == len(illegal) == costly.stats["in_successes"]
    assert {e.episode_id for e in costly.evidence} <= illegal
    assert all(any(s["reward"] == -10 for s in e.excerpt) for e in costly.evidence)
    assert 0.1 < costly.severity == costly.stats["share_of_return_lost"] < 0.6
    assert [f.name for f in report.findings] == ["costly_event"]
    _excerpts_show_their_ranges(report)

    cliff = rollout("CliffWalking-v1", CliffOnce, seeds=SEEDS, out=tmp_path / "cliff")
    report = diagnose(cliff)
    costly = report.finding("costly_event")
    assert costly is not None and costly.episodes == len(_planted(cliff, 0.2))
    assert costly.stats["mean_lost_when_flagged"] == pytest.approx(99.0)
    # The return gap flags the same episodes: one finding, naming the other.
    assert report.finding("return_gap") is None and costly.stats["also_explained_by"] == ["return_gap"]
    assert "repeated_action" in [f.name for f in report.style_notes]  # eleven steps right is how it walks, in every episode
    _excerpts_show_their_ranges(report)


@pytest.mark.parametrize("env_id", ["CliffWalking-v1", "MountainCar-v0", "Taxi-v4", "CartPole-v1"])
def test_a_flawless_agent_has_no_finding_at_all(env_id, tmp_path):
    report = diagnose(rollout(env_id, "reference", seeds=range(60), out=tmp_path / "ref"))
    assert report.success_rate == 1.0
    assert report.findings == []


def test_confounded_level_features_are_one_finding(tmp_path):
    run = rollout("envharness/GeneratedFrozenLake-v0", GivesUpOnLargeMaps, seeds=SEEDS, out=tmp_path / "lakes")
    report = diagnose(run)
    regions = [f for f in report.findings if f.name.startswith("feature_region:")]
    large = {e.episode_id for e in run.iter_episodes() if e.level_features["size"] > 6}
    assert len(regions) == 1, [f.title for f in regions]
    region = regions[0]
    assert region.stats["failure_rate_in"] == 1.0 and region.episodes == len(large)
    assert region.stats["also_explained_by"]  # the confounded features, named, not listed again
    _excerpts_show_their_ranges(report)


def test_a_behaviour_as_common_in_successes_is_a_style_note_not_a_finding(cartpole_run):
    report = diagnose(cartpole_run)
    repeated = report.finding("repeated_action")
    # Pushing one way many times is what the flawed episodes do, and what the good ones do not: a finding
    # (on the episodes where the pole falls, so one finding with the fall: a symptom of it, its contrast kept).
    assert repeated is not None
    stats = (
        repeated.stats
        if repeated.name == "repeated_action"
        else next(s for s in repeated.stats["symptoms"] if s["name"] == "repeated_action")
    )
    assert stats["contrast"]["lift_ci"][0] > 1
    for note in report.style_notes:
        contrast = note.stats["contrast"]
        assert contrast["lift_ci"] is None or contrast["lift_ci"][0] <= 1


def test_the_report_names_actions_and_conditions(cartpole_run, tmp_path, capsys):
    report = diagnose(cartpole_run)
    assert report.env_id == "CartPole-v1" and report.action_names == ["push_left", "push_right"]
    page = render_html(report, cartpole_run)
    assert "push_left" in page and "Condition: <b>pole_" in page
    assert run_cli(app, ["diagnose", str(cartpole_run.path)], "envrigger") == 0
    assert "when pole_" in capsys.readouterr().out.replace("\n", " ").replace("│", " ")
    data = json.loads(report.model_dump_json())
    assert data["findings"][0]["stats"].get("condition") or data["findings"][1]["stats"].get("condition")


def test_a_run_below_the_minimum_sample_says_so(tmp_path, capsys):
    rollout("CartPole-v1", "random", episodes=1, out=tmp_path / "one")
    assert run_cli(app, ["diagnose", str(tmp_path / "one")], "envrigger") == 0
    err = capsys.readouterr().err
    assert "only 1 episode: a finding needs at least 3" in err
    (tmp_path / "agent.jsonl").write_text("{}\n")
    assert run_cli(app, ["diagnose", str(tmp_path / "agent.jsonl")], "envrigger") == 2
    assert "is a file; diagnose reads a run directory" in capsys.readouterr().err
