"""A loop run: rounds that admit, train every arm and evaluate held out once; the same bits on every backend and after resume."""

from __future__ import annotations

import importlib.util
import json

import pytest
from loop_cases import DEFAULT_GATES, LAKE, SHORT_DOORKEY, SMALL

from envharness.adapters.base import digest
from envrigger.data import TrajectoryStore
from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.config import TRAIN_SEED
from envrigger.loop.library import Library
from envrigger.loop.results import SCHEMA_VERSION, FinalResults


def test_loop_admits_trains_every_arm_and_evaluates_held_out_once(tmp_path):
    result = run_loop(tmp_path / "run", LoopConfig(**SMALL))
    summaries, final = result["rounds"], result["final"]
    # the result returned is the one written: equal to final.json read back, at the current schema version
    assert result.final == FinalResults.load(tmp_path / "run" / "final.json")
    assert result.final.schema_version == SCHEMA_VERSION
    assert [s["round"] for s in summaries] == [1, 2]
    library = Library(tmp_path / "run" / "library.db")
    components = library.components()
    assert components and summaries[-1]["library_size"] == len(components)
    first = components[0]
    assert [g["gate"] for g in first.gates] == DEFAULT_GATES
    # The diagnosis read the rigger learner's own last training episodes on the original env: no extra interaction.
    evidence = list(TrajectoryStore(tmp_path / "run" / "round-1" / "evidence").iter_episodes())
    assert summaries[0]["evidence"] == {"training_episodes": 30, "collected": 0} and len(evidence) == 30
    assert all(TRAIN_SEED + 1_000_000 <= e.seed < TRAIN_SEED + 2_000_000 for e in evidence)
    assert not {e.seed for e in evidence} & set(first.seeds)
    spent = summaries[0]["arms"]
    validate_steps = sum(
        e.length for store in (tmp_path / "run" / "round-1" / "validate").iterdir() for e in TrajectoryStore(store).iter_episodes()
    )
    rigger = spent["rigger"]["interaction"]
    assert rigger["collect"] == 0
    assert rigger["validate"] > validate_steps  # the rollouts, plus the reference solver's play and replays
    assert rigger["credit"] > 0  # the credit chunks: the copies thrown away and their scoring
    assert rigger["total"] == rigger["train"] + rigger["collect"] + rigger["validate"] + rigger["credit"]
    # The last round's proposals would train nowhere: it neither diagnoses nor validates.
    assert "admitted" not in summaries[-1] and summaries[-1]["arms"]["rigger"]["interaction"]["validate"] == 0
    assert summaries[-1]["arms"]["rigger"]["train"]["picks"][1] > 0  # round 2 trains on round 1's admission
    original = spent["original"]["interaction"]
    assert original["collect"] == original["validate"] == 0 and original["total"] == original["train"]
    assert abs(rigger["train"] - original["train"]) < 200  # equal training budgets (whole episodes)
    # The held-out levels are looked at once, for the round each arm's validation score picked.
    for arm, r in final["arms"].items():
        scores = [s["arms"][arm]["validation"]["success"] for s in summaries]
        assert scores[r["round"] - 1] == max(scores) and r["validation"] == max(scores)
        assert r["heldout"]["episodes"] == 30
        assert r["interaction"]["total"] == sum(s["arms"][arm]["interaction"]["total"] for s in summaries)
    assert not (tmp_path / "run" / "round-1" / "heldout-rigger").exists() and (tmp_path / "run" / "heldout-rigger").is_dir()
    # The fixed lake has one level: every held-out episode is on a level the arms trained on, and the run says so.
    assert final["levels"] == {
        "disjoint": False,
        "heldout": 1,
        "validation": 1,
        "overlap": {"original:train": 1, "rigger:collect": 0, "rigger:credit": 1, "rigger:validate": 1, "rigger:train": 1},
        "heldout_digest": digest([LAKE.build().reset(seed=0)[1]["level_id"]]),  # the one level, named
    }
    assert all(r["heldout"]["seen_in_training"] == 1.0 for r in final["arms"].values())


def test_a_loop_round_trains_the_same_learner_bits_on_every_backend(tmp_path):
    config = {**SMALL, "rounds": 1, "candidates_per_round": 2, "collect_episodes": 20, "eval_episodes": 20, "arms": ["plr", "rigger"]}
    for backend in ("serial", "process"):
        run_loop(tmp_path / backend, LoopConfig(**{**config, "backend": backend, "workers": 2}))
    for name in ("rigger-round-1.json", "plr-round-1.json", "final.json"):
        assert (tmp_path / "serial" / name).read_text() == (tmp_path / "process" / name).read_text(), name


@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason="needs the sb3 extra (Stable-Baselines3 and torch)")
def test_ppo_arms_train_the_same_network_on_every_backend_batched_or_not_and_after_resume(tmp_path):
    import torch

    from envrigger.loop.learners import PPOLearner

    config = dict(
        spec=SHORT_DOORKEY,
        learner="ppo",
        learner_params={"n_envs": 2, "n_steps": 64, "batch_size": 64},
        rounds=2,
        budget_steps=256,
        collect_episodes=8,
        eval_episodes=20,
        val_episodes=10,
        candidates_per_round=1,
        min_rollouts=8,
        max_rollouts=8,
        arms=["original", "rigger"],
        workers=2,
    )
    # serial: PPO's rollouts in lockstep batches (the default); process: one episode at a time in the pool's workers.
    for backend, batch in (("serial", 32), ("process", 1)):
        run_loop(tmp_path / backend, LoopConfig(**{**config, "backend": backend, "rollout_batch": batch}))
    config_one = LoopConfig(**{**config, "backend": "serial", "rounds": 1})
    run_loop(tmp_path / "resumed", config_one)
    saved = json.loads((tmp_path / "resumed" / "loop.json").read_text())
    (tmp_path / "resumed" / "loop.json").write_text(json.dumps({**saved, "rounds": 2}))
    (tmp_path / "resumed" / "final.json").unlink()
    run_loop(tmp_path / "resumed")  # round 2 starts from round 1's saved learners
    probe = SHORT_DOORKEY.build()
    for arm in ("original", "rigger"):
        nets = [
            PPOLearner.load(tmp_path / run / f"{arm}-round-2", probe).model.policy.state_dict() for run in ("serial", "process", "resumed")
        ]
        for other in nets[1:]:
            assert all(torch.equal(nets[0][k], other[k]) for k in nets[0]), arm
        steps = [PPOLearner.load(tmp_path / "serial" / f"{a}-round-2", probe).model.num_timesteps for a in ("original", "rigger")]
        assert steps == [512, 512]  # equal training steps, exactly
    assert json.loads((tmp_path / "serial" / "final.json").read_text()) == json.loads((tmp_path / "process" / "final.json").read_text())


def test_the_long_stages_report_their_progress(tmp_path):
    """A 50k-step training stage printed one line and then nothing; the CLI now shows a bar fed by these calls."""
    import contextlib

    from envrigger.loop.levels import LevelSplit

    done: dict[str, int] = {}
    totals: dict[str, int] = {}

    @contextlib.contextmanager
    def stage(label, total):
        totals[label], done[label] = total, 0

        def advance(n):
            done[label] += n

        yield advance

    config = LoopConfig(**{**SMALL, "rounds": 1})
    run_loop(tmp_path / "run", config, stage=stage)
    assert list(totals) == ["drawing levels", "training original", "training rigger"]
    assert done["drawing levels"] == totals["drawing levels"] == LevelSplit.draws(config)
    for arm in ("original", "rigger"):  # the steps of ended episodes: the budget, give or take the last episode
        assert totals[f"training {arm}"] == 4000 and abs(done[f"training {arm}"] - 4000) <= 100


def test_a_run_with_heldout_off_picks_rounds_on_validation_and_plays_no_held_out_level(tmp_path):
    result = run_loop(tmp_path / "run", LoopConfig(**{**SMALL, "arms": ["original", "rigger"], "heldout": False}))
    final = result["final"]
    assert all(arm["heldout"] is None and arm["round"] in (1, 2) for arm in final["arms"].values())
    assert final["arms"]["rigger"]["validation"] == max(s["arms"]["rigger"]["validation"]["success"] for s in result["rounds"])
    assert not list((tmp_path / "run").glob("heldout-*"))  # nothing was rolled out on a held-out level


def test_step_out_runs_through_the_loop_and_names_what_the_learner_mastered(tmp_path):
    # A non-slippery lake with Q-learning: components that start next to the goal are soon won almost always.
    config = {**SMALL, "rounds": 3, "arms": ["rigger"], "step_out": True, "band": (0.05, 0.6), "heldout": False}
    result = run_loop(tmp_path / "run", LoopConfig(**config))
    mastered = [h for s in result["rounds"] for h in s.get("mastered", [])]
    library = Library(tmp_path / "run" / "library.db")
    components = {c.hash: c for c in library.components()}
    assert mastered and set(mastered) <= set(components)
    steps = [c for c in components.values() if c.origin == "step-out"]
    assert all(c.parent in mastered for c in steps)


def test_step_in_follows_a_start_won_too_rarely_with_its_nearer_rung_in_the_same_round(tmp_path):
    # The band's floor at 0.2: on this lake the Q-learner wins too few episodes from 1-6 and 1-3 steps out to
    # learn from; a start 1 step from the goal is its nearer rung, validated next and admitted like any candidate.
    config = {**SMALL, "rounds": 2, "arms": ["rigger"], "step_in": True, "band": (0.2, 0.99), "heldout": False}
    result = run_loop(tmp_path / "run", LoopConfig(**config))
    tried = result["rounds"][0]["tried"]
    stepped = [i for i, t in enumerate(tried) if t["origin"] == "step-in"]
    assert stepped
    for i in stepped:  # each follows a candidate the learnability gate refused, won on fewer than 20% of its rollouts
        before = tried[i - 1]
        assert not before["passed"] and before["gates"][-1]["gate"] == "learnability"
    library = Library(tmp_path / "run" / "library.db")
    nearer = [c for c in library.components() if c.origin == "step-in"]
    assert [c.spec.transforms[-1].params for c in nearer] == [{"min_dist": 1, "max_dist": 1}]
    assert "below the band" in nearer[0].rationale and {g["gate"] for g in nearer[0].gates} >= {"learnability", "no_shortcut"}
    plain = run_loop(tmp_path / "plain", LoopConfig(**{**config, "step_in": False}))
    assert all(t["origin"] != "step-in" for t in plain["rounds"][0]["tried"])


def test_a_mastered_component_sits_out_later_rounds_but_stays_in_the_library(tmp_path):
    # The same easy lake: what the rigger arm wins almost always in one round is not trained on in the next.
    config = {**SMALL, "rounds": 3, "arms": ["rigger"], "retire_mastered": True, "band": (0.05, 0.6), "heldout": False}
    result = run_loop(tmp_path / "run", LoopConfig(**config))
    library = {c.hash for c in Library(tmp_path / "run" / "library.db").components()}
    retired = set()
    for summary in result["rounds"]:
        trained = summary["arms"]["rigger"]["train"]
        assert not retired & set(trained["components"])  # a retired component was never trained on again
        assert set(summary.get("retired", [])) == retired
        for h, wins, picks in zip(trained["components"], trained["wins"][1:], trained["picks"][1:], strict=True):
            if picks >= 20 and wins > 0.6 * picks:
                retired.add(h)
    assert retired and retired <= library  # something was mastered, and it is still in the library
    assert any(s.get("retired") for s in result["rounds"])  # and a later round trained without it
