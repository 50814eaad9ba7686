"""A hostile review of today's ``envrigger run`` defaults: shadow baseline, one credit chunk, step-in on.

The promises under attack (docs/envrigger.md, "Credit from the original env"; docs/cli.md):

1. a run saved before the change (``loop.json`` or ``seeds.json`` without ``credit_baseline``
   and ``step_in``, or without ``credit_chunks``) goes on with the settings it started with,
   on every path that reads a saved config: ``--resume``, more ``--seeds``, a Ray task, the report;
2. ``--step-in/--no-step-in`` reach the saved config; ``--resume`` refuses any loop option in one
   line (exit 2) rather than ignoring it; a bad value is one line, exit 2, nothing written;
3. the default shadow works for every learner kind ``envrigger run`` credits (qlearning, textq,
   ppo, skills) and, with one chunk, leaves the original arm exactly as without credit;
   ``--learner none`` is never credited;
4. two runs with the same seed and today's defaults give the same results, resumed or not.

Grouped by root-cause class: old runs, command line, learner kinds, determinism. Small
FrozenLake and TextWorld configs; the LLM agent is a scripted OpenAI-compatible server.
"""

from __future__ import annotations

import html
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from credit_cases import CREDITED, LAKE, TW, agent, needs_textworld, rounds_of, walker

import envrigger.loop.credit as credit_module
from envharness import HarnessSpec
from envrigger.agents.scripted import ChatServer
from envrigger.loop import LoopConfig, run_loop, run_seeds
from envrigger.loop.config import SAVED_BEFORE
from envrigger.loop.credit import Credit, credited_training
from envrigger.loop.learners import make_learner
from envrigger.loop.samplers import Curriculum
from envrigger.loop.train import Arm

needs_sb3 = pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason="needs the sb3 extra")
ENVRIGGER = str(Path(sys.executable).with_name("envrigger"))

TINY: dict[str, Any] = CREDITED  # slippery 4x4: which seeds a chunk plays changes what is learned, so a wrong setting shows
# The fixed 8x8 lake with the band's floor at 0.2: the Q-learner wins too few episodes from the first easings to learn
# from, so step-in fires in round 1 (tests/envrigger/loop/test_run.py), and admitted components train in round 2.
STEPPY: dict[str, Any] = dict(
    spec=HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False}),
    learner="qlearning",
    arms=["original", "rigger"],
    rounds=2,
    budget_steps=4000,
    collect_episodes=30,
    eval_episodes=30,
    val_episodes=20,
    candidates_per_round=3,
    backend="serial",
    min_rollouts=20,
    max_rollouts=40,
    allow_seen_levels=True,
    band=(0.2, 0.99),
    heldout=False,
)
OLD = {"credit_chunks": 2, "credit_baseline": "fork", "step_in": False}  # envrigger run's defaults before 2026-12-06
NEW_FIELDS = ("credit_baseline", "step_in")  # what a loop.json written before 2026-12-06 lacks
CREDIT_FIELDS = ("credit_chunks", "credit_baseline", "step_in", "credit_retire", "credit_episodes")  # ... before credit


def old_file(config: LoopConfig, missing: tuple[str, ...] = NEW_FIELDS) -> dict[str, Any]:
    """``config`` as a run saved before the fields ``missing`` existed wrote it."""
    saved = json.loads(config.model_dump_json())
    for field in missing:
        del saved[field]
    return saved


class Killed(Exception):
    """The stand-in for a crash right after a round committed."""


def table(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())["table"]


def stepped_in(run: Path) -> bool:
    return any(t["origin"] == "step-in" for r in rounds_of(run) for t in r.get("tried", []))


def snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != "report.html"}


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user runs it."""
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
    return subprocess.run([ENVRIGGER, *args], capture_output=True, text=True, timeout=timeout, env=env)


def in_process(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    from envharness.cli import run_cli
    from envrigger.cli import app

    code = run_cli(app, args, "envrigger")
    return code, capsys.readouterr().err.strip().splitlines()


# --- old runs: every reader of a saved config keeps the settings the run started with --------------------------------


def test_an_old_run_resumed_from_the_command_line_keeps_the_fork_two_chunks_and_no_step_in(tmp_path):
    # A run saved before 2026-12-06 and killed in round 1 (its loop.json written, nothing committed), then
    # `envrigger run --resume`: it must train as it would have then, never as today's defaults would.
    today = run_loop(tmp_path / "today", LoopConfig(**STEPPY))  # the control: today's defaults step in and shadow
    assert stepped_in(tmp_path / "today") and (tmp_path / "today" / "rigger-shadow-round-1.json").is_file()
    assert len(today["rounds"][0]["arms"]["rigger"]["train"]["credit"]["chunks"]) == 1
    run_loop(tmp_path / "then", LoopConfig(**{**STEPPY, **OLD}))
    old = tmp_path / "old"
    old.mkdir()
    (old / "loop.json").write_text(json.dumps(old_file(LoopConfig(**{**STEPPY, **OLD}))))
    done = cli("run", "--resume", str(old))
    assert done.returncode == 0, done.stderr
    assert not stepped_in(old) and not list(old.glob("rigger-shadow-*"))
    assert [len(r["arms"]["rigger"]["train"]["credit"]["chunks"]) for r in rounds_of(old)] == [2, 2]
    for name in ("original-round-2.json", "rigger-round-2.json"):
        assert table(old / name) == table(tmp_path / "then" / name), name
    assert rounds_of(old) == rounds_of(tmp_path / "then")


def test_a_run_from_before_credit_resumes_with_no_credit_at_all(tmp_path):
    # loop.json without credit_chunks: the run began before credit existed, so no round of it is ever credited.
    then = {**TINY, "rounds": 2, "credit_chunks": 0, "credit_baseline": "fork", "step_in": False}
    run_loop(tmp_path / "whole", LoopConfig(**then))

    def die(summary: Any) -> None:  # the old run was killed once round 1 committed
        raise Killed(summary["round"])

    with pytest.raises(Killed):
        run_loop(tmp_path / "old", LoopConfig(**then), on_round=die)
    (tmp_path / "old" / "loop.json").write_text(json.dumps(old_file(LoopConfig(**then), CREDIT_FIELDS)))
    resumed = run_loop(tmp_path / "old")
    assert [r["round"] for r in resumed["rounds"]] == [1, 2]
    second = resumed["rounds"][1]["arms"]["rigger"]
    assert "credit" not in second["train"] and not second["interaction"].get("credit")
    assert "credit_state" not in resumed["rounds"][1] and not list((tmp_path / "old").glob("rigger-shadow-*"))
    for name in ("original-round-2.json", "rigger-round-2.json"):
        assert table(tmp_path / "old" / name) == table(tmp_path / "whole" / name), name
    assert resumed["final"].dump() == json.loads((tmp_path / "whole" / "final.json").read_text())


@pytest.mark.parametrize("era", ["before the shadow", "before credit"])
def test_an_old_multi_seed_run_given_more_seeds_starts_them_with_the_settings_it_began_with(tmp_path, era):
    # `envrigger run --resume RUN --seeds 2` on a seeds.json written before today: the new seed is a fresh loop, and it
    # must be the run's loop (its settings from seeds.json), not a loop with today's defaults.
    then = {**TINY, **OLD} if era == "before the shadow" else {**TINY, "credit_chunks": 0, "credit_baseline": "fork", "step_in": False}
    missing = NEW_FIELDS if era == "before the shadow" else CREDIT_FIELDS
    run_seeds(tmp_path / "run", LoopConfig(**then), 1)
    plan = json.loads((tmp_path / "run" / "seeds.json").read_text())
    (tmp_path / "run" / "seeds.json").write_text(json.dumps({**plan, "config": old_file(LoopConfig(**then), missing)}))
    (tmp_path / "run" / "seed-0" / "loop.json").write_text(json.dumps(old_file(LoopConfig(**then), missing)))
    result = run_seeds(tmp_path / "run", None, 2)
    assert result["seeds"] == [0, 1]
    started = json.loads((tmp_path / "run" / "seed-1" / "loop.json").read_text())
    assert {k: started[k] for k in OLD} == {k: then[k] for k in OLD}
    assert not list((tmp_path / "run").rglob("rigger-shadow-*"))
    alone = run_loop(tmp_path / "alone", LoopConfig(**{**then, "seed": 1}))
    assert json.loads((tmp_path / "run" / "seed-1" / "final.json").read_text()) == alone["final"].dump()


def test_an_old_seed_sent_as_a_ray_task_resumes_with_the_fork(tmp_path):
    # The Ray path without a cluster: seed_task is what a node runs, from the seed directory the driver packed.
    from envrigger.loop.ray_seeds import pack, seed_task

    then = LoopConfig(**{**TINY, **OLD})
    seed = tmp_path / "seed-0"
    seed.mkdir()
    (seed / "loop.json").write_text(json.dumps(old_file(then)))  # started, killed before round 1 committed
    packed = pack(seed)
    assert packed is not None
    back = tmp_path / "back"
    with tarfile.open(fileobj=io.BytesIO(seed_task(None, packed)), mode="r:gz") as archive:
        archive.extractall(back, filter="data")
    assert not list(back.glob("rigger-shadow-*"))
    assert [len(r["arms"]["rigger"]["train"]["credit"]["chunks"]) for r in rounds_of(back)] == [2]
    local = run_loop(tmp_path / "local", then)
    assert json.loads((back / "final.json").read_text()) == local["final"].dump()


def test_the_report_of_an_old_run_states_the_settings_it_ran_with(tmp_path):
    # report.html's "Configuration" is the reader's record of what the run did. For an old run it must say fork and no
    # step-in: a page without the fields reads, by today's documented defaults, as the shadow with step-in.
    from envrigger.report.run import write_run_report

    then = LoopConfig(**{**TINY, **OLD})
    run_loop(tmp_path / "old", then)
    (tmp_path / "old" / "loop.json").write_text(json.dumps(old_file(then)))
    page = html.unescape(write_run_report(tmp_path / "old").read_text())
    configuration = page[page.index('id="config"') :]
    assert '"credit_baseline": "fork"' in configuration and '"step_in": false' in configuration


def test_saved_keeps_what_a_file_says_and_fills_only_what_it_lacks():
    fresh = LoopConfig(**TINY)  # today's defaults, written out in full as a run started today saves them
    assert LoopConfig.saved(fresh.model_dump_json()) == fresh
    assert (fresh.credit_baseline, fresh.credit_chunks, fresh.step_in) == ("shadow", 1, True)
    explicit = LoopConfig(**{**TINY, "credit_chunks": 3, "credit_baseline": "shadow", "step_in": True})
    assert LoopConfig.saved(old_file(explicit, ())) == explicit
    # A file from between credit and the shadow: its own chunk count, and the fork and no step-in it ran with.
    between = LoopConfig.saved(old_file(LoopConfig(**{**TINY, "credit_chunks": 3})))
    assert (between.credit_baseline, between.credit_chunks, between.step_in) == ("fork", 3, False)
    data = old_file(fresh)
    LoopConfig.saved(data)
    assert "credit_baseline" not in data  # the caller's dict (seeds.json's config) is not written into
    assert SAVED_BEFORE == {
        "credit_chunks": 0,
        "credit_baseline": "fork",
        "step_in": False,
        "proposer_format": "text",
        "candidate_timeout_s": 300.0,
        "candidate_max_steps": None,
        "plr_score": "success",
    }


# --- command line -----------------------------------------------------------------------------------------------------

RUN_ARGS = ("FrozenLake-v1", "--learner", "qlearning", "--arms", "original,rigger", "--rounds", "1", "--budget-steps", "1000",
            "--collect-episodes", "5", "--eval-episodes", "10", "--val-episodes", "10", "--candidates", "1",
            "--backend", "serial", "--allow-seen-levels")  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "step_in"), [((), True), (("--no-step-in",), False), (("--step-in",), True)], ids=["default", "no-step-in", "step-in"]
)
def test_the_step_in_switch_of_a_real_run_reaches_its_saved_config(tmp_path, flags, step_in):
    done = cli("run", *RUN_ARGS, *flags, "-o", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    saved = json.loads((tmp_path / "run" / "loop.json").read_text())
    assert (saved["step_in"], saved["credit_baseline"], saved["credit_chunks"]) == (step_in, "shadow", 1)
    assert (tmp_path / "run" / "rigger-shadow-round-1.json").is_file() and (tmp_path / "run" / "report.html").is_file()


@pytest.fixture(scope="module")
def unfinished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fork run with one of its two rounds done: resumed, it would train round 2."""
    run = tmp_path_factory.mktemp("unfinished") / "run"
    run_loop(run, LoopConfig(**{**TINY, **OLD}))
    saved = json.loads((run / "loop.json").read_text())
    (run / "loop.json").write_text(json.dumps({**saved, "rounds": 2}))
    (run / "final.json").unlink()
    return run


@pytest.mark.parametrize(
    "option",
    [("--no-step-in",), ("--step-in",), ("--credit-baseline", "shadow"), ("--credit-baseline", "fork"),
     ("--credit-chunks", "1"), ("--credit-chunks", "0"), ("FrozenLake-v1",)],
    ids=" ".join,
)  # fmt: skip
def test_resume_refuses_a_loop_option_in_one_line_and_trains_nothing(unfinished, capsys, option):
    before = snapshot(unfinished)
    code, err = in_process(["run", "--resume", str(unfinished), *option], capsys)
    assert code == 2 and len(err) == 1, err
    assert "keeps the settings it started with" in err[0]
    assert snapshot(unfinished) == before and not (unfinished / "rigger-round-2.json").exists()


def test_the_refusal_names_the_option_the_user_typed(unfinished, capsys):
    # The user typed --no-step-in; a line telling them to drop "--step-in" names a flag they never gave.
    code, err = in_process(["run", "--resume", str(unfinished), "--no-step-in"], capsys)
    assert code == 2 and len(err) == 1
    assert "drop --no-step-in" in err[0], err[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("finished") / "run"
    run_loop(run, LoopConfig(**TINY))
    return run


@pytest.mark.parametrize(
    "option",
    [("--agent", "chat"), ("--model", "another"), ("--base-url", "http://127.0.0.1:9/v1"), ("--api-key-env", "OTHER_KEY"),
     ("--harness", "harness.json")],
    ids=lambda option: option[0],
)  # fmt: skip
def test_resume_refuses_the_agent_options_it_would_ignore(finished, capsys, option):
    # docs/cli.md: with --resume "a loop option ... is refused in one line (exit 2) rather than ignored; --seeds, --jobs
    # and --ray-address may be given". The agent's endpoint and model are the learner's settings (loop.json's
    # learner_params): given with --resume they are dropped without a word, and the run goes on with the saved agent.
    code, err = in_process(["run", "--resume", str(finished), *option], capsys)
    assert code == 2 and len(err) == 1 and "--resume" in err[0], (code, err)


def test_resume_of_a_single_run_with_more_seeds_is_not_silently_one_seed(finished, capsys):
    # `--resume RUN --seeds 3` adds seeds to a multi-seed run; on a single run it printed the single run's table (and
    # "one run of one master seed") with exit 0: the user asked for three seeds and was told nothing.
    code, err = in_process(["run", "--resume", str(finished), "--seeds", "3"], capsys)
    assert code == 2 and len(err) == 1 and "--seeds" in err[0], (code, err)


def test_help_shows_the_switch_pair_and_todays_defaults():
    done = cli("run", "--help")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0
    assert "--step-in / --no-step-in" in text and "[default: step-in]" in text
    assert re.search(r"--credit-baseline .*?\[default: shadow\]", text)
    assert re.search(r"--credit-chunks .*?\[default: 1; 0<=x<=20\]", text)


@pytest.mark.parametrize(
    ("args", "says"),
    [(("--credit-baseline", "bogus"), "--credit-baseline"), (("--credit-baseline", "Shadow"), "--credit-baseline"),
     (("--credit-chunks", "-1"), "--credit-chunks"), (("--credit-chunks", "21"), "--credit-chunks"),
     (("--credit-chunks", "one"), "--credit-chunks"), (("--step-in=no",), "--step-in"), (("--no-step-in=1",), "--no-step-in")],
    ids=["baseline-bogus", "baseline-Shadow", "chunks--1", "chunks-21", "chunks-one", "step-in=no", "no-step-in=1"],
)  # fmt: skip
def test_a_bad_value_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, says):
    code, err = in_process(["run", "FrozenLake-v1", *args, "-o", str(tmp_path / "run")], capsys)
    assert code == 2 and len(err) == 1 and says in err[0], err
    assert not (tmp_path / "run").exists()


# --- learner kinds under the default shadow ---------------------------------------------------------------------------

TEXTWORLD = HarnessSpec(
    env_id="envharness/TextWorld-v0", env_kwargs={"levels": [4, 5, 6, 7], "games_per_level": 4, "max_episode_steps": 15}
)
PPO_PARAMS = {"n_envs": 2, "n_steps": 64, "batch_size": 64, "n_epochs": 2}


def state(kind: str, path: Path) -> Any:
    """A saved learner's whole state, comparable with ``==``."""
    if kind == "qlearning":
        return json.loads(path.with_suffix(".json").read_text())
    if kind == "textq":
        with np.load(path.with_suffix(".npz")) as saved:
            return {k: saved[k].tolist() for k in saved.files}
    from envrigger.loop.learners import PPOLearner

    model = PPOLearner.load(path, LAKE.build()).model
    optimizer = model.policy.optimizer.state_dict()["state"]
    moments = {f"{i}.{k}": v.tolist() for i, s in optimizer.items() for k, v in s.items() if hasattr(v, "tolist")}
    return {"weights": {k: v.tolist() for k, v in model.policy.state_dict().items()}, "moments": moments, "steps": model.num_timesteps}


@pytest.mark.parametrize(
    ("kind", "settings"),
    [
        pytest.param("qlearning", {}, id="qlearning"),
        pytest.param("textq", {"spec": TEXTWORLD, "learner_params": {"bits": 12}, "budget_steps": 200}, marks=needs_textworld, id="textq"),
        # 300 is not a whole number of PPO rollouts (128): the one chunk and the plain call must still be one training.
        pytest.param("ppo", {"learner_params": PPO_PARAMS, "budget_steps": 300}, marks=needs_sb3, id="ppo"),
    ],
)
def test_by_default_every_credited_learner_has_a_shadow_and_an_original_arm_as_without_credit(tmp_path, kind, settings):
    # docs: "With the shadow, keep one chunk a round (the default): the original arm's training is then the very call it
    # makes without credit (same seeds, same steps, bit for bit)".
    base = {**TINY, "learner": kind, **settings, "heldout": False}
    config = LoopConfig(**base)
    assert (config.credit_baseline, config.credit_chunks, config.step_in) == ("shadow", 1, True)
    today = run_loop(tmp_path / "today", config)
    run_loop(tmp_path / "plain", LoopConfig(**{**base, "credit_chunks": 0}))
    original = state(kind, tmp_path / "today" / "original-round-1")
    assert state(kind, tmp_path / "plain" / "original-round-1") == original
    assert state(kind, tmp_path / "today" / "rigger-shadow-round-1") == original
    arms = today["rounds"][0]["arms"]
    (chunk,) = arms["rigger"]["train"]["credit"]["chunks"]
    assert arms["rigger"]["interaction"]["credit"] > 0
    assert min(arms["rigger"]["interaction"]["train"], arms["original"]["interaction"]["train"]) >= config.budget_steps
    if chunk["kept"] == "original":  # the arm fell back to the shadow: the original arm's weights and steps exactly
        assert state(kind, tmp_path / "today" / "rigger-round-1") == original
        assert arms["rigger"]["interaction"]["train"] == arms["original"]["interaction"]["train"]


def force(monkeypatch: pytest.MonkeyPatch, winner: str) -> None:
    """Every credit chunk's scoring is played; ``winner`` ("curriculum" or "original") is made to solve more."""
    real = credit_module.evaluate

    def rigged(policy: Any, base: Any, seeds: Any, out: Path, config: Any, *rest: Any, **named: Any) -> dict[str, Any]:
        scored = real(policy, base, seeds, out, config, *rest, **named)
        return {**scored, "success": 0.5 if out.name.endswith(winner) else 0.45}

    monkeypatch.setattr(credit_module, "evaluate", rigged)


def lessons(path: Path) -> list[dict[str, Any]]:
    return json.loads(Path(str(path) + ".skills.json").read_text())["skills"]


def skills_chunk(where: Path) -> tuple[Arm, Any, dict[str, Any], int]:
    """One credit chunk of a skills learner against its shadow, on a scripted model: the arm, the shadow, the record, calls served."""
    with ChatServer(walker()) as server:
        params = {"agent": agent(server.url)}
        config = LoopConfig(spec=TW, learner="skills", learner_params=params, budget_steps=100, backend="serial", credit_episodes=10)
        probe = TW.build()
        rigger, shadow = Arm("rigger", make_learner("skills", probe, 0, **params)), make_learner("skills", probe, 0, **params)
        sampler = Curriculum(1, np.random.default_rng(0))
        _, record = credited_training(where, rigger, [TW], [], sampler, config, 1, set(), Credit(1.0), shadow=shadow)
        probe.close()
        served = sum(r["path"].rstrip("/") == "/v1/chat/completions" for r in server.requests)
    return rigger, shadow, record, served


@needs_textworld
def test_a_skills_chunk_the_curriculum_loses_hands_the_arm_a_copy_of_the_shadow(tmp_path, monkeypatch):
    # Before today the skills learner only ran with the fork or no credit; the shadow's fallback loads the shadow's save
    # back: a chunk the curriculum loses must leave the rigger arm with the shadow's lessons, in a learner of its own.
    force(monkeypatch, "original")
    rigger, shadow, record, _ = skills_chunk(tmp_path / "credit")
    assert [c["kept"] for c in record["chunks"]] == ["original"]
    assert rigger.learner is not shadow and rigger.learner.skills == shadow.skills and shadow.skills


@needs_textworld
@pytest.mark.parametrize("winner", ["curriculum", "original"])
def test_a_skills_chunk_counts_what_the_thrown_away_copy_and_the_scoring_cost_the_endpoint(tmp_path, monkeypatch, winner):
    # An LLM learner's training costs model calls. Whichever copy a chunk throws away, its calls are the arm's credit
    # spend (as its env steps are credit interaction), with the scoring's; the arm's own `spent` is only what trained it.
    force(monkeypatch, winner)
    rigger, shadow, record, served = skills_chunk(tmp_path / "credit")
    assert [c["kept"] for c in record["chunks"]] == [winner]
    credit_calls, own, shadows = record["spent"]["model_calls"], rigger.learner.spent["model_calls"], shadow.spent["model_calls"]
    assert own > 0 and shadows > 0 and credit_calls > 0
    if winner == "original":  # the arm holds a copy of the shadow: its spend is the shadow's chunk, the curriculum's is credit
        assert rigger.learner.spent == shadow.spent
    else:  # the shadow's chunk was thrown away: its calls and the scoring's are credit, the arm keeps its own
        assert credit_calls > shadows  # the scoring played 2 x 10 episodes on top
    assert own + credit_calls == served  # every call the endpoint served is counted once: the arm's, or the credit's


@needs_textworld
@pytest.mark.parametrize("winner", ["curriculum", "original"])
def test_a_skills_loop_with_todays_defaults_finishes_and_its_shadow_is_the_original_arm(tmp_path, monkeypatch, winner):
    # `envrigger run ENV --learner skills --agent chat ...` with no credit option: the shadow, one chunk. Whichever copy
    # the chunk keeps, the run finishes, the shadow holds the original arm's lessons, and a lost chunk leaves the
    # rigger arm exactly those lessons too.
    force(monkeypatch, winner)
    with ChatServer(walker()) as server:
        config = LoopConfig(
            spec=TW, learner="skills", learner_params={"agent": agent(server.url)}, arms=["original", "rigger"], rounds=1,
            budget_steps=100, collect_episodes=5, eval_episodes=10, val_episodes=10, candidates_per_round=1, min_rollouts=5,
            max_rollouts=5, allow_seen_levels=True, backend="serial", credit_episodes=10, heldout=False,
        )  # fmt: skip
        assert config.credit_baseline == "shadow"
        result = run_loop(tmp_path / "run", config)
    run = tmp_path / "run"
    assert result["rounds"][0]["arms"]["rigger"]["train"]["credit"]["chunks"][0]["kept"] == winner
    original = lessons(run / "original-round-1")
    assert original and lessons(run / "rigger-shadow-round-1") == original
    if winner == "original":
        assert lessons(run / "rigger-round-1") == original
    saved = (run / "rigger-shadow-round-1.skills.json").read_text()
    assert "sk-" not in saved and "OPENAI_API_KEY=" not in saved


@needs_textworld
def test_an_untrained_agent_is_never_credited_under_todays_defaults(tmp_path):
    # --learner none: the loop plays the agent but never trains it, so there is nothing to credit and no shadow.
    with ChatServer(walker()) as server:
        config = LoopConfig(
            spec=TW, learner="none", learner_params={"agent": agent(server.url)}, arms=["original", "rigger"], rounds=1,
            budget_steps=100, collect_episodes=5, eval_episodes=10, val_episodes=10, candidates_per_round=1, min_rollouts=5,
            max_rollouts=5, allow_seen_levels=True, backend="serial", heldout=False,
        )  # fmt: skip
        result = run_loop(tmp_path / "run", config)
    arms = result["rounds"][0]["arms"]
    assert "credit" not in arms["rigger"]["train"] and not arms["rigger"]["interaction"].get("credit")
    assert "credit_state" not in result["rounds"][0]
    assert not list((tmp_path / "run").glob("rigger-shadow-*")) and not (tmp_path / "run" / "round-1" / "credit").exists()


# --- determinism ------------------------------------------------------------------------------------------------------


def test_the_same_seed_with_todays_defaults_gives_the_same_run_whole_or_resumed(tmp_path):
    config = LoopConfig(**{**STEPPY, "heldout": True})
    first = run_loop(tmp_path / "first", config)
    second = run_loop(tmp_path / "second", config)

    def die(summary: Any) -> None:
        raise Killed(summary["round"])

    with pytest.raises(Killed):
        run_loop(tmp_path / "resumed", config, on_round=die)
    resumed = run_loop(tmp_path / "resumed")
    assert stepped_in(tmp_path / "first") and (tmp_path / "first" / "rigger-shadow-round-2.json").is_file()
    final = json.loads((tmp_path / "first" / "final.json").read_text())
    for other in ("second", "resumed"):
        assert json.loads((tmp_path / other / "final.json").read_text()) == final, other
        assert rounds_of(tmp_path / other) == rounds_of(tmp_path / "first"), other
        for name in ("original-round-2.json", "rigger-round-2.json", "rigger-shadow-round-2.json"):
            assert table(tmp_path / other / name) == table(tmp_path / "first" / name), (other, name)
    assert first["final"] == second["final"] == resumed["final"]
