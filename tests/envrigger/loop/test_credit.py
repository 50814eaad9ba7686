"""Credit from the original env: a component that makes the learner worse on the original env loses its share and is retired.

The planted component relabels FrozenLake's actions (left <-> right, up <-> down): a tabular
learner that trains on it learns the wrong action for the same square, which the paired
chunks measure on fresh original-env levels. The engine's promise is that such a
component cannot keep training the rigger arm.
"""

from __future__ import annotations

import json

from envharness import HarnessSpec
from envrigger.loop import LoopConfig
from envrigger.loop.credit import Credit, _chunks
from envrigger.loop.library import Library
from envrigger.loop.run import run_loop

LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "4x4", "is_slippery": False})
HARMFUL = LAKE.extended({"name": "RemapActions", "params": {"mapping": {"0": 2, "2": 0, "1": 3, "3": 1}}})
CONFIG = dict(
    spec=LAKE,
    learner="qlearning",
    arms=["original", "rigger"],
    rounds=2,
    budget_steps=6000,
    collect_episodes=20,
    eval_episodes=20,
    val_episodes=20,
    candidates_per_round=1,
    backend="serial",
    min_rollouts=10,
    max_rollouts=20,
    allow_seen_levels=True,
    credit_chunks=3,
    credit_episodes=10,
    credit_retire=0.05,
)


def plant(path, spec):
    path.mkdir(parents=True)
    library = Library(path / "library.db")
    library.admit(spec, finding="repeated_action", rationale="planted", gates=[], seeds=[], agent_id="test")
    library.close()
    return library


def test_a_component_that_hurts_on_the_original_env_is_retired_and_its_harm_undone(tmp_path):
    plant(tmp_path / "run", HARMFUL)
    result = run_loop(tmp_path / "run", LoopConfig(**CONFIG))
    first = result["rounds"][0]["arms"]["rigger"]
    credit = first["train"]["credit"]
    harmful = HARMFUL.hash()
    assert credit["scores"][harmful] < 0 and harmful in credit["retired"]
    lost = [c for c in credit["chunks"] if c["kept"] == "original"]
    assert lost and all(c["curriculum"] < c["original"] for c in lost)  # the worse copy was thrown away
    # Retired for the rest of the run: round 2 does not train on it.
    second = result["rounds"][1]["arms"]["rigger"]["train"]
    assert harmful not in second.get("components", []) and len(second["picks"]) == len(second["components"]) + 1
    # Every arm trained the same steps; the thrown-away copies and the scoring are the rigger arm's own interaction.
    original, rigger = result["final"]["arms"]["original"]["interaction"], result["final"]["arms"]["rigger"]["interaction"]
    assert abs(rigger["train"] - original["train"]) < 100 and rigger["credit"] > 0  # whole episodes per chunk
    assert rigger["total"] == rigger["train"] + rigger["collect"] + rigger["validate"] + rigger["credit"]


def test_credit_survives_a_resume(tmp_path):
    plant(tmp_path / "run", HARMFUL)
    run_loop(tmp_path / "run", LoopConfig(**{**CONFIG, "rounds": 1}))
    saved = json.loads((tmp_path / "run" / "loop.json").read_text())
    saved["rounds"] = 2
    (tmp_path / "run" / "loop.json").write_text(json.dumps(saved))
    (tmp_path / "run" / "final.json").unlink()  # a finished run resumes as itself; without its end it trains on
    resumed = run_loop(tmp_path / "run")
    assert HARMFUL.hash() in resumed["rounds"][0]["credit_state"]["retired"]
    assert HARMFUL.hash() not in resumed["rounds"][1]["arms"]["rigger"]["train"]["components"]


def test_chunks_split_a_budget_exactly_and_weights_stay_bounded():
    assert _chunks(25, 2) == [13, 12] and sum(_chunks(50_000, 3)) == 50_000
    credit = Credit(retire_at=0.5)
    credit.add({"good": 1.0}, 0.4)
    credit.add({"bad": 1.0}, -0.3)
    assert credit.weight("good") == 4.0 and credit.weight("bad") == 0.25 and credit.weight("new") == 1.0
    credit.add({"none": 0.0}, -1.0)  # a piece with no share of the chunk takes none of its blame
    assert "none" not in credit.scores


def test_original_select_keeps_the_better_of_two_original_only_copies_and_pays_for_the_second(tmp_path):
    # The ablation of the credit's selection: what rigger gains by keeping the better copy, without any reshaping.
    config = {**CONFIG, "arms": ["original", "original-select"], "rounds": 1}
    result = run_loop(tmp_path / "run", LoopConfig(**config))
    plain, select = (result["rounds"][0]["arms"][arm] for arm in ("original", "original-select"))
    # equal training steps (a tabular learner finishes its last episode, so each chunk may run a few steps over)
    assert config["budget_steps"] <= plain["train"]["steps"] and abs(select["train"]["steps"] - plain["train"]["steps"]) < 60
    chunks = select["train"]["credit"]["chunks"]
    assert len(chunks) == 3 and all({"curriculum", "original", "kept"} <= set(c) for c in chunks)
    assert select["train"]["envs"] == ["original"]  # nothing reshaped
    assert select["interaction"]["credit"] > 0 and select["interaction"]["total"] > plain["interaction"]["total"]
    levels = json.loads((tmp_path / "run" / "levels-round-1.json").read_text())
    assert levels["original-select:credit"]  # the scoring levels, checked against the held-out set like every other use


def test_original_select_without_chunks_is_refused_in_one_line():
    import pytest

    with pytest.raises(ValueError, match="original-select keeps the better of two copies per credit chunk; give --credit-chunks 1"):
        LoopConfig(**{**CONFIG, "arms": ["original", "original-select"], "credit_chunks": 0})


def test_shadow_baseline_falls_back_to_exactly_the_original_arm(tmp_path):
    # --credit-baseline shadow: each chunk's original-only copy is a learner trained on the original env alone since
    # the run began, on the original arm's seeds and chunks. It is the original arm, weight for weight; and a round
    # whose last chunk the curriculum lost leaves the rigger arm holding those very weights.
    # Slippery, so that which training seeds each chunk plays changes what is learned.
    lake = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "4x4", "is_slippery": True})
    plant(tmp_path / "run", lake.extended(*HARMFUL.transforms))
    config = LoopConfig(**{**CONFIG, "spec": lake, "credit_baseline": "shadow", "credit_retire": 1.0})
    result = run_loop(tmp_path / "run", config)
    run = tmp_path / "run"
    fell_back = 0
    for summary in result["rounds"]:
        number = summary["round"]
        original = json.loads((run / f"original-round-{number}.json").read_text())["table"]
        assert json.loads((run / f"rigger-shadow-round-{number}.json").read_text())["table"] == original
        if summary["arms"]["rigger"]["train"]["credit"]["chunks"][-1]["kept"] == "original":
            fell_back += 1
            assert json.loads((run / f"rigger-round-{number}.json").read_text())["table"] == original
            assert summary["arms"]["rigger"]["validation"] == summary["arms"]["original"]["validation"]
    assert fell_back  # the harmful curriculum lost the last chunk of some round
    # The original arm trained in the same chunks, at the same steps as ever.
    chunks = [c["steps"] for c in result["rounds"][0]["arms"]["rigger"]["train"]["credit"]["chunks"]]
    assert sum(chunks) == CONFIG["budget_steps"] and len(chunks) == 3
    assert result["rounds"][0]["arms"]["original"]["train"]["steps"] >= CONFIG["budget_steps"]


def test_a_resumed_shadow_trains_on_as_an_uninterrupted_one(tmp_path):
    lake = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "4x4", "is_slippery": True})
    settings = {**CONFIG, "spec": lake, "credit_baseline": "shadow", "credit_retire": 1.0}
    for where in ("whole", "resumed"):
        plant(tmp_path / where, lake.extended(*HARMFUL.transforms))
    run_loop(tmp_path / "whole", LoopConfig(**settings))
    run_loop(tmp_path / "resumed", LoopConfig(**{**settings, "rounds": 1}))
    saved = json.loads((tmp_path / "resumed" / "loop.json").read_text())
    saved["rounds"] = 2
    (tmp_path / "resumed" / "loop.json").write_text(json.dumps(saved))
    (tmp_path / "resumed" / "final.json").unlink()
    run_loop(tmp_path / "resumed")
    for name in ("original-round-2", "rigger-shadow-round-2", "rigger-round-2"):
        whole, resumed = (json.loads((tmp_path / w / f"{name}.json").read_text()) for w in ("whole", "resumed"))
        assert whole["table"] == resumed["table"], name


def test_a_run_saved_before_the_shadow_was_the_default_resumes_with_the_fork(tmp_path):
    # loop.json from before 2026-12-06 has no credit_baseline or step_in: it started with the fork, and goes on with it.
    lake = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "4x4", "is_slippery": True})
    settings = {**CONFIG, "spec": lake, "credit_retire": 1.0, "credit_baseline": "fork", "step_in": False}
    for where in ("whole", "old"):
        plant(tmp_path / where, lake.extended(*HARMFUL.transforms))
    run_loop(tmp_path / "whole", LoopConfig(**settings))
    run_loop(tmp_path / "old", LoopConfig(**{**settings, "rounds": 1}))
    saved = json.loads((tmp_path / "old" / "loop.json").read_text())
    del saved["credit_baseline"], saved["step_in"]
    (tmp_path / "old" / "loop.json").write_text(json.dumps({**saved, "rounds": 2}))
    (tmp_path / "old" / "final.json").unlink()
    run_loop(tmp_path / "old")
    assert not list((tmp_path / "old").glob("rigger-shadow-*"))  # no shadow was ever trained
    whole, old = (json.loads((tmp_path / w / "rigger-round-2.json").read_text()) for w in ("whole", "old"))
    assert whole["table"] == old["table"]
    assert LoopConfig(spec=lake).credit_baseline == "shadow"  # while a new run starts with today's default


def test_a_credit_margin_keeps_a_curriculum_behind_by_less_than_the_scoring_noise(tmp_path):
    # --credit-margin Z: the curriculum is thrown away only when the original-only copy is ahead by more than Z standard
    # errors of the paired difference over the chunk's scoring levels; a loss by a level or two of ten is noise and keeps it.
    lake = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "4x4", "is_slippery": True})
    plant(tmp_path / "run", lake.extended(*HARMFUL.transforms))
    config = LoopConfig(**{**CONFIG, "spec": lake, "credit_baseline": "shadow", "credit_retire": 1.0, "credit_margin": 1.0})
    result = run_loop(tmp_path / "run", config)
    chunks = [c for s in result["rounds"] for c in s["arms"]["rigger"]["train"]["credit"]["chunks"]]
    for chunk in chunks:
        behind = chunk["original"] - chunk["curriculum"]
        assert chunk["kept"] == ("curriculum" if behind <= chunk["se"] + 1e-9 else "original"), chunk
        assert 0 <= chunk["se"] <= 0.5  # ten binary outcomes a copy: the paired difference's standard error
    assert any(c["kept"] == "curriculum" and c["curriculum"] < c["original"] for c in chunks)  # kept within the noise
    assert any(c["kept"] == "original" for c in chunks)  # and thrown away beyond it: the harmful component still loses
    # The fallback of a kept chunk still leaves the arm with the shadow's weights, as without a margin.
    for summary in result["rounds"]:
        if summary["arms"]["rigger"]["train"]["credit"]["chunks"][-1]["kept"] == "original":
            number = summary["round"]
            rigger, original = (json.loads((tmp_path / "run" / f"{a}-round-{number}.json").read_text()) for a in ("rigger", "original"))
            assert rigger["table"] == original["table"]
    assert LoopConfig(spec=lake).credit_margin == 0.0  # off unless asked: a tie alone keeps the curriculum
