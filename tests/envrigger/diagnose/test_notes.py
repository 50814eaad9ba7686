"""What the diagnosis says about behaviours that are not findings, and about logs whose steps carry no state.

A behaviour seen in every failure and no success of a small run is "inconclusive with N
episodes", never "as common in successes as in failures"; a log without observations or
positions (one state digest for every step) gets no loop, revisit or no-op finding, and a note.
"""

from __future__ import annotations

import json
import subprocess
import sys

from envrigger.data.jsonl import import_jsonl
from envrigger.diagnose import diagnose


def write(path, episodes):
    path.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    return path


def pacing(success: bool, n: int = 12) -> dict:
    """An episode in two rooms: a failure paces between them; a success walks on through new rooms."""
    rooms = [f"room {i % 2}" for i in range(n)] if not success else [f"room {i}" for i in range(n)]
    steps = [{"action": "go", "observation": room} for room in rooms]
    steps[-1].update(terminated=True, reward=1.0 if success else 0.0)
    return {"verdict": {"success": success}, "steps": steps}


def test_a_behaviour_in_every_failure_of_a_small_run_is_inconclusive_not_style(tmp_path):
    run = import_jsonl(write(tmp_path / "log.jsonl", [pacing(i >= 5) for i in range(10)]), tmp_path / "run")
    result = diagnose(run)
    notes = {f.name: f.stats["reading"] for f in result.style_notes}
    assert notes.get("loop") == "inconclusive" or notes.get("revisit") == "inconclusive", notes
    shown = subprocess.run([sys.executable, "-m", "envrigger.cli", "diagnose", str(tmp_path / "run")], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "inconclusive with 10 episodes" in shown.stdout and "100% of failures, 0% of successes" in shown.stdout
    assert "explain no failure" not in shown.stdout.split("inconclusive")[1].split("\n")[0]


def test_a_log_without_observations_gets_no_state_findings_and_says_why(tmp_path):
    episodes = []
    for i in range(40):
        steps = [{"action": a} for a in (["left", "right"] * 8 if i % 2 else ["left", "up", "right"])]
        steps[-1].update(terminated=True)
        episodes.append({"verdict": {"success": i % 2 == 0}, "steps": steps})
    result = diagnose(import_jsonl(write(tmp_path / "log.jsonl", episodes), tmp_path / "run"))
    names = {f.name for f in result.findings} | {f.name for f in result.style_notes}
    assert not names & {"loop", "revisit", "noop_action"}, names
    assert any("the log has no observations or positions" in note for note in result.notes), result.notes
    with_obs = [{**e, "steps": [{**s, "observation": f"o{k % 3}"} for k, s in enumerate(e["steps"])]} for e in episodes]
    seen = diagnose(import_jsonl(write(tmp_path / "obs.jsonl", with_obs), tmp_path / "run2"))
    assert not any("no observations" in note for note in seen.notes)  # with states, the state detectors run


def test_each_finding_says_what_to_try_on_this_env(tmp_path):
    from envrigger.report import render_html
    from envrigger.rollout import rollout

    run = rollout("MiniGrid-LavaGapS5-v0", "random", episodes=60, out=tmp_path / "run")
    shown = subprocess.run([sys.executable, "-m", "envrigger.cli", "diagnose", str(tmp_path / "run")], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    tries = shown.stdout.split("what to try")[1]
    assert "terminal_cause:lava: AddLava, MoveAgent" in " ".join(tries.split())
    assert "BlockVerb" not in tries and "ToolCost" not in tries  # TextWorld's and code repair's transforms are not offered on MiniGrid
    page = render_html(diagnose(run), run)
    assert "What to try: AddLava, MoveAgent" in page and "<details><summary>All statistics (JSON)" in page


class WallPresser:
    """Four episodes in five it presses ``forward`` into the wall until time runs out; the fifth it plays well."""

    name = "wall-presser"

    def __init__(self, env):
        from envrigger.policies.reference import MiniGridPlanner

        self.planner, self.pressing = MiniGridPlanner(env), True

    def reset(self, seed):
        self.pressing = seed % 5 != 0

    def act(self, obs, info):
        return 2 if self.pressing else self.planner.act(obs, info)


def test_an_agent_pressing_forward_into_a_wall_is_one_finding_with_its_symptoms_and_what_to_try(tmp_path):
    from envrigger.report import render_html
    from envrigger.rollout import rollout

    run = rollout("MiniGrid-Empty-Random-6x6-v0", WallPresser, episodes=50, out=tmp_path / "run")
    result = diagnose(run)
    one_behaviour = {"noop_action", "repeated_action", "revisit", "timeout"}
    holding = [f for f in result.findings if one_behaviour & ({f.name} | set(f.symptoms))]
    assert len(holding) == 1, [(f.name, f.symptoms) for f in result.findings]  # said once, not four times
    (finding,) = holding
    assert one_behaviour <= {finding.name, *finding.symptoms} and finding.severity == 1.0
    assert result.finding("timeout") is finding and result.finding("revisit") is finding  # found by any of its names
    shown = subprocess.run([sys.executable, "-m", "envrigger.cli", "diagnose", str(tmp_path / "run")], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout.split("what to try")[0]
    weakness_cells = [line.split("│")[2].strip() for line in table.splitlines() if line.count("│") >= 6]
    assert sum(cell in one_behaviour for cell in weakness_cells) == 1, weakness_cells  # one row names it
    tries = " ".join(shown.stdout.split("what to try")[1].split())
    assert f"{finding.name}: " in tries and "StepBudget" in tries  # the timeout's remedies come with the merged finding
    page = render_html(result, run)
    assert "One behaviour, seen 4 ways on the same episodes" in page and 'id="timeout"' in page
