"""A hostile review of ``--credit-baseline shadow``: each attack asserts what a user of the shadow relies on.

The promises under attack (docs/envrigger.md, "Credit from the original env"):

1. the shadow is the ``original`` arm, weight for weight, after every round, for every
   learner kind the loop trains with credit (qlearning, textq, ppo);
2. a chunk the curriculum loses leaves the rigger arm holding a *copy* of the shadow: later
   training of either never reaches the other;
3. a resumed run (from a finished round, or after a round that died half-way) trains the
   shadow, the original arm and the rigger arm exactly as an uninterrupted one;
4. the shadow's and the thrown-away copies' steps are the rigger arm's ``credit`` interaction
   (in ``total``) and its ``train`` steps are the original arm's;
5. a bad ``credit_baseline`` is refused in one line, and ``credit_chunks=0`` or arms without
   ``original`` (or without ``rigger``) behave as documented.

Grouped by root-cause class: aliasing, accounting, resume, config, learner kinds. The
credit's verdicts are forced (the scoring's success is overridden, its episodes still
played) so each attack reaches the branch it means to, in a few seconds on FrozenLake.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from credit_cases import CREDITED, LAKE

import envrigger.loop.credit as credit_module
from envharness import HarnessSpec
from envrigger.loop import LoopConfig
from envrigger.loop.credit import Credit, chunk_plan, chunked_training, credited_training
from envrigger.loop.learners import load_learner, make_learner
from envrigger.loop.library import Library
from envrigger.loop.run import run_loop
from envrigger.loop.samplers import Curriculum
from envrigger.loop.train import Arm

HARMFUL = LAKE.extended({"name": "RemapActions", "params": {"mapping": {"0": 2, "2": 0, "1": 3, "3": 1}}})
CONFIG: dict[str, Any] = {**CREDITED, "credit_chunks": 3, "credit_retire": 1.0, "credit_baseline": "shadow"}
needs_sb3 = pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason="needs the sb3 extra")
needs_textworld = pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="needs the textworld extra")


def table(learner: Any) -> dict[str, list[float]]:
    """A tabular learner's weights, comparable with ``==``."""
    return {k: v.tolist() for k, v in learner.q.table.items()}


def saved_table(path: Path) -> dict[str, list[float]]:
    return json.loads(path.read_text())["table"]


def plant(path: Path, spec: HarnessSpec = HARMFUL) -> None:
    path.mkdir(parents=True)
    library = Library(path / "library.db")
    library.admit(spec, finding="repeated_action", rationale="planted", gates=[], seeds=[], agent_id="test")
    library.close()


def force(monkeypatch: pytest.MonkeyPatch, verdicts: list[str]) -> list[dict[str, Any]]:
    """Make chunk j's scoring decide ``verdicts[j]`` ("curriculum" or "original" wins); returns every scoring played.

    The episodes are really played (their ``env_steps`` are what the credit charges); only the success is overridden.
    """
    real = credit_module.evaluate
    played: list[dict[str, Any]] = []

    def rigged(policy: Any, base: Any, seeds: Any, out: Path, config: Any, *rest: Any, **named: Any) -> dict[str, Any]:
        scored = real(policy, base, seeds, out, config, *rest, **named)
        _, j, name = out.name.split("-")
        winner = verdicts[int(j)]
        scored = {**scored, "success": 0.5 if name == winner else 0.45}  # a small difference: nothing is retired
        played.append({"chunk": int(j), "name": name, "env_steps": scored["env_steps"]})
        return scored

    monkeypatch.setattr(credit_module, "evaluate", rigged)
    return played


def count_training(monkeypatch: pytest.MonkeyPatch, shadow: Any) -> dict[str, list[int]]:
    """Every train_arm call of the credit module, by who trained: the shadow, the plain original arm or the curriculum."""
    real = credit_module.train_arm
    calls: dict[str, list[int]] = {"shadow": [], "original": [], "curriculum": []}

    def counted(arm: Arm, *args: Any, **kwargs: Any) -> dict[str, Any]:
        trained = real(arm, *args, **kwargs)
        who = "shadow" if arm.learner is shadow else "original" if arm.name == "original" else "curriculum"
        calls[who].append(trained["steps"] + trained["search_steps"])
        return trained

    monkeypatch.setattr(credit_module, "train_arm", counted)
    return calls


def one_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verdicts: list[str], **overrides: Any) -> dict[str, Any]:
    """One round of the rigger arm's credited training with a shadow, and the original arm's chunked training beside it."""
    config = LoopConfig(**{**CONFIG, **overrides})
    probe = LAKE.build()
    rigger = Arm("rigger", make_learner("qlearning", probe, config.seed))
    shadow = make_learner("qlearning", probe, config.seed)
    original = Arm("original", make_learner("qlearning", probe, config.seed))
    probe.close()
    counted = count_training(monkeypatch, shadow)
    played = force(monkeypatch, verdicts)
    sampler = Curriculum(2, np.random.default_rng([config.seed, 1, 1]))
    trained, record = credited_training(
        tmp_path / "credit", rigger, [LAKE, HARMFUL], [HARMFUL.hash()], sampler, config, 1, set(), Credit(1.0), shadow=shadow
    )
    plain = chunked_training(original, config, 1, set())
    return {
        "config": config,
        "rigger": rigger,
        "shadow": shadow,
        "original": original,
        "trained": trained,
        "record": record,
        "plain": plain,
        "played": played,
        "counted": counted,
    }


# --- aliasing ---------------------------------------------------------------------------------------------------------


def test_a_lost_chunk_hands_the_rigger_arm_a_copy_not_the_shadow_itself(tmp_path, monkeypatch):
    run = one_round(tmp_path, monkeypatch, ["original", "original", "original"])
    rigger, shadow, original = run["rigger"].learner, run["shadow"], run["original"].learner
    assert table(rigger) == table(shadow) == table(original)  # fell back to exactly the plain training
    assert rigger is not shadow and rigger.q is not shadow.q
    assert all(rigger.q.table[k] is not shadow.q.table[k] for k in shadow.q.table)
    # Training the rigger arm on further never reaches the shadow, and the other way round.
    before = table(shadow)
    rigger.train(lambda: HARMFUL.build(), 500, seed=1)
    assert table(shadow) == before and table(rigger) != before
    after_rigger = table(rigger)
    shadow.train(lambda: LAKE.build(), 500, seed=1)
    assert table(rigger) == after_rigger


def test_a_kept_chunk_after_a_lost_one_trains_the_rigger_copy_and_leaves_the_shadow_plain(tmp_path, monkeypatch):
    # Chunk 0 lost (the arm now holds a copy of the shadow), chunks 1 and 2 kept: the curriculum trains the copy, while
    # the shadow trains on the original env alone, exactly as the original arm does.
    run = one_round(tmp_path, monkeypatch, ["original", "curriculum", "curriculum"])
    assert [c["kept"] for c in run["record"]["chunks"]] == ["original", "curriculum", "curriculum"]
    assert table(run["shadow"]) == table(run["original"].learner)
    assert sum(run["trained"]["picks"][1:]) > 0  # the curriculum did train on the component
    assert table(run["rigger"].learner) != table(run["shadow"])


def test_the_fallback_copy_explores_on_from_where_the_shadow_stopped(tmp_path, monkeypatch):
    # A copy "weight for weight" must also carry the exploration state (epsilon, generator): otherwise the arm that
    # fell back would not train on as the original arm does from the same weights.
    run = one_round(tmp_path, monkeypatch, ["original", "original", "original"])
    rigger, shadow = run["rigger"].learner.q, run["shadow"].q
    assert rigger.epsilon == shadow.epsilon
    assert rigger.rng.bit_generator.state == shadow.rng.bit_generator.state
    assert rigger.rng is not shadow.rng


# --- accounting -------------------------------------------------------------------------------------------------------


def test_when_every_chunk_is_lost_the_rigger_arm_trains_exactly_the_original_arms_steps(tmp_path, monkeypatch):
    run = one_round(tmp_path, monkeypatch, ["original", "original", "original"])
    shadow_steps, curriculum_steps = sum(run["counted"]["shadow"]), sum(run["counted"]["curriculum"])
    scoring = sum(p["env_steps"] for p in run["played"])
    assert run["trained"]["steps"] == run["plain"]["steps"] == shadow_steps
    # What was thrown away (the curriculum's copies) and every scoring episode is the arm's credit interaction.
    assert run["record"]["steps"] == curriculum_steps + scoring


def test_when_every_chunk_is_kept_every_shadow_step_is_credit_interaction(tmp_path, monkeypatch):
    run = one_round(tmp_path, monkeypatch, ["curriculum", "curriculum", "curriculum"])
    shadow_steps, curriculum_steps = sum(run["counted"]["shadow"]), sum(run["counted"]["curriculum"])
    scoring = sum(p["env_steps"] for p in run["played"])
    assert shadow_steps >= run["config"].budget_steps  # the shadow really trained the whole round
    assert run["trained"]["steps"] == curriculum_steps
    assert run["record"]["steps"] == shadow_steps + scoring
    # Nothing is charged twice or lost: every env step taken this round is either train or credit.
    assert run["trained"]["steps"] + run["record"]["steps"] == shadow_steps + curriculum_steps + scoring


def test_the_shadow_trains_on_the_same_chunks_and_seeds_as_the_original_arm(tmp_path, monkeypatch):
    run = one_round(tmp_path, monkeypatch, ["curriculum", "original", "curriculum"])
    plan = chunk_plan(run["config"], run["shadow"], 1)
    assert len(run["counted"]["shadow"]) == len(plan) == 3
    assert run["counted"]["shadow"] == run["counted"]["original"]  # chunk for chunk, the same steps
    assert [s for _, s in plan] == [1000, 1000, 1000]
    assert table(run["shadow"]) == table(run["original"].learner)


def test_a_loop_charges_the_shadow_as_credit_and_keeps_the_totals_whole(tmp_path):
    plant(tmp_path / "run", HARMFUL)
    result = run_loop(tmp_path / "run", LoopConfig(**{**CONFIG, "heldout": False}))
    summary = result["rounds"][0]["arms"]
    rigger, original = summary["rigger"]["interaction"], summary["original"]["interaction"]
    assert rigger["credit"] > 0 and original.get("credit", 0) == 0  # the original arm is charged nothing for the shadow
    assert rigger["total"] == rigger["train"] + rigger["collect"] + rigger["validate"] + rigger["credit"] + rigger.get("search", 0)
    assert original["total"] == original["train"]
    # Qlearning finishes its last episode of each chunk, so a chunk may run a few steps over; no more than that.
    assert abs(rigger["train"] - original["train"]) < 3 * 100
    final = result["final"]["arms"]
    assert final["rigger"]["interaction"]["credit"] == rigger["credit"]


# --- resume -----------------------------------------------------------------------------------------------------------

TWO_ROUNDS = {**CONFIG, "rounds": 2, "heldout": False}
CHECKPOINTS = ("original-round-{n}.json", "rigger-shadow-round-{n}.json", "rigger-round-{n}.json")


class Killed(Exception):
    """The stand-in for a crash (or kill -9) half-way through a round."""


def same_checkpoints(a: Path, b: Path, rounds: int = 2) -> None:
    for n in range(1, rounds + 1):
        for name in CHECKPOINTS:
            assert saved_table(a / name.format(n=n)) == saved_table(b / name.format(n=n)), name.format(n=n)


@pytest.mark.parametrize(
    "where",
    [
        "round 1, after the shadow trained a chunk",  # nothing committed yet: the shadow starts afresh on resume
        "round 2, after the shadow trained a chunk",  # the in-memory shadow ran ahead of its checkpoint
        "round 2, checkpoints written, not committed",  # round 2's files exist; round 1's must be what resumes
    ],
)
def test_a_round_killed_half_way_resumes_as_an_uninterrupted_run(tmp_path, monkeypatch, where):
    for name in ("whole", "killed"):
        plant(tmp_path / name, HARMFUL)
    run_loop(tmp_path / "whole", LoopConfig(**TWO_ROUNDS))
    with monkeypatch.context() as patch:
        number = int(where.split(",")[0].split()[-1])
        if "committed" in where:
            real_commit = Library.complete_round

            def commit(self: Library, n: int, summary: dict[str, Any]) -> None:
                if n == number:
                    raise Killed(where)
                real_commit(self, n, summary)

            patch.setattr(Library, "complete_round", commit)
        else:
            real = credit_module.evaluate

            def evaluate(policy: Any, base: Any, seeds: Any, out: Path, *rest: Any, **named: Any) -> Any:
                if f"round-{number}" in out.parts and out.name == "score-1-original":
                    raise Killed(where)
                return real(policy, base, seeds, out, *rest, **named)

            patch.setattr(credit_module, "evaluate", evaluate)
        with pytest.raises(Killed):
            run_loop(tmp_path / "killed", LoopConfig(**TWO_ROUNDS))
    resumed = run_loop(tmp_path / "killed")
    assert [r["round"] for r in resumed["rounds"]] == [1, 2]
    same_checkpoints(tmp_path / "whole", tmp_path / "killed")


def test_a_run_killed_after_each_committed_round_trains_as_an_uninterrupted_one(tmp_path):
    # Three rounds; the process dies right after each round commits, and --resume picks up from that finished round.
    settings = {**TWO_ROUNDS, "rounds": 3}
    for name in ("whole", "stepped"):
        plant(tmp_path / name, HARMFUL)
    run_loop(tmp_path / "whole", LoopConfig(**settings))

    def die(summary: Any) -> None:
        raise Killed(summary["round"])

    with pytest.raises(Killed):
        run_loop(tmp_path / "stepped", LoopConfig(**settings), on_round=die)
    for _ in (2, 3):
        with pytest.raises(Killed):
            run_loop(tmp_path / "stepped", on_round=die)
    assert run_loop(tmp_path / "stepped")["final"].dump() == run_loop(tmp_path / "whole")["final"].dump()
    same_checkpoints(tmp_path / "whole", tmp_path / "stepped", rounds=3)
    whole, stepped = (Library(tmp_path / w / "library.db").rounds() for w in ("whole", "stepped"))
    for a, b in zip(whole, stepped, strict=True):
        for arm in ("original", "rigger"):
            assert a["arms"][arm]["interaction"] == b["arms"][arm]["interaction"], (a["round"], arm)
        assert a["arms"]["rigger"]["train"]["credit"] == b["arms"]["rigger"]["train"]["credit"], a["round"]


# --- config -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["Shadow", "none", "", "shadow ", 1])
def test_a_credit_baseline_other_than_fork_or_shadow_is_refused(value):
    with pytest.raises(ValueError, match="credit_baseline"):
        LoopConfig(**{**CONFIG, "credit_baseline": value})


def test_the_cli_refuses_a_bad_credit_baseline_in_one_line_and_writes_nothing(tmp_path, capsys):
    from envrigger.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["run", "FrozenLake-v1", "--credit-baseline", "forks", "-o", str(tmp_path / "run")])
    assert exited.value.code not in (0, None)
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--credit-baseline" in err and "fork" in err and "shadow" in err, err
    assert not (tmp_path / "run").exists()


def test_resume_with_a_loop_option_is_refused_in_one_line_not_silently_ignored(tmp_path, capsys):
    # A fork run resumed with --credit-baseline shadow: a resumed run keeps its loop.json, so the flag would be dropped
    # without a word and the user would believe the rest of the run is the shadow's. Refused, exit 2, nothing trained.
    from envrigger.cli import main

    plant(tmp_path / "run", HARMFUL)
    run_loop(tmp_path / "run", LoopConfig(**{**CONFIG, "credit_baseline": "fork", "heldout": False}))
    saved = json.loads((tmp_path / "run" / "loop.json").read_text())
    (tmp_path / "run" / "loop.json").write_text(json.dumps({**saved, "rounds": 2}))
    (tmp_path / "run" / "final.json").unlink()
    with pytest.raises(SystemExit) as exited:
        main(["run", "--resume", str(tmp_path / "run"), "--credit-baseline", "shadow"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "keeps the settings it started with" in err and "drop --credit-baseline" in err
    assert not (tmp_path / "run" / "rigger-round-2.json").is_file()  # nothing trained on


def test_shadow_with_no_credit_chunks_trains_as_without_credit(tmp_path):
    # --credit-chunks 0 turns the credit off: no shadow is made or saved, and every arm trains as with the fork.
    for baseline in ("fork", "shadow"):
        plant(tmp_path / baseline, HARMFUL)
        run_loop(tmp_path / baseline, LoopConfig(**{**CONFIG, "credit_chunks": 0, "credit_baseline": baseline, "heldout": False}))
    assert not list((tmp_path / "shadow").glob("rigger-shadow-*"))
    for arm in ("original", "rigger"):
        assert saved_table(tmp_path / "fork" / f"{arm}-round-1.json") == saved_table(tmp_path / "shadow" / f"{arm}-round-1.json")


def test_shadow_without_the_original_arm_still_trains_and_saves_the_shadow(tmp_path):
    plant(tmp_path / "alone", HARMFUL)
    plant(tmp_path / "both", HARMFUL)
    run_loop(tmp_path / "alone", LoopConfig(**{**CONFIG, "arms": ["rigger"], "heldout": False}))
    run_loop(tmp_path / "both", LoopConfig(**{**CONFIG, "heldout": False}))
    # The shadow does not need the original arm: it is the same training either way.
    assert saved_table(tmp_path / "alone" / "rigger-shadow-round-1.json") == saved_table(tmp_path / "both" / "rigger-shadow-round-1.json")
    assert saved_table(tmp_path / "alone" / "rigger-round-1.json") == saved_table(tmp_path / "both" / "rigger-round-1.json")


def test_shadow_without_the_rigger_arm_leaves_the_original_arm_as_without_credit(tmp_path):
    for baseline in ("fork", "shadow"):
        run_loop(tmp_path / baseline, LoopConfig(**{**CONFIG, "arms": ["original"], "credit_baseline": baseline, "heldout": False}))
    assert not list((tmp_path / "shadow").glob("rigger-shadow-*"))
    assert saved_table(tmp_path / "fork" / "original-round-1.json") == saved_table(tmp_path / "shadow" / "original-round-1.json")


def test_with_one_chunk_the_original_arm_trains_bit_for_bit_as_without_credit(tmp_path):
    # The documented reason to give --credit-chunks 1: the original arm's training is the very call it makes without credit.
    for baseline in ("fork", "shadow"):
        plant(tmp_path / baseline, HARMFUL)
        run_loop(tmp_path / baseline, LoopConfig(**{**CONFIG, "credit_chunks": 1, "credit_baseline": baseline, "heldout": False}))
    plain = saved_table(tmp_path / "fork" / "original-round-1.json")
    assert saved_table(tmp_path / "shadow" / "original-round-1.json") == plain
    assert saved_table(tmp_path / "shadow" / "rigger-shadow-round-1.json") == plain


def test_shadow_beside_original_select_keeps_both_baselines_apart(tmp_path):
    plant(tmp_path / "run", HARMFUL)
    config = {**CONFIG, "arms": ["original", "original-select", "rigger"], "heldout": False}
    result = run_loop(tmp_path / "run", LoopConfig(**config))
    run = tmp_path / "run"
    assert saved_table(run / "rigger-shadow-round-1.json") == saved_table(run / "original-round-1.json")
    select = result["rounds"][0]["arms"]["original-select"]
    assert len(select["train"]["credit"]["chunks"]) == 3 and select["interaction"]["credit"] > 0


def test_more_chunks_than_budget_steps_do_not_crash_and_train_the_budget(tmp_path, monkeypatch):
    run = one_round(tmp_path, monkeypatch, ["original"] * 20, credit_chunks=20, budget_steps=100)
    assert len(run["record"]["chunks"]) == 20
    assert run["trained"]["steps"] == run["plain"]["steps"] >= 100
    assert table(run["rigger"].learner) == table(run["shadow"]) == table(run["original"].learner)


# --- learner kinds ----------------------------------------------------------------------------------------------------

TEXTWORLD = HarnessSpec(
    env_id="envharness/TextWorld-v0", env_kwargs={"levels": [4, 5, 6, 7], "games_per_level": 4, "max_episode_steps": 15}
)
PPO_PARAMS = {"n_envs": 2, "n_steps": 64, "batch_size": 64, "n_epochs": 2}


def textq_state(path: Path) -> dict[str, Any]:
    with np.load(path.with_suffix(".npz")) as saved:
        return {k: saved[k].tolist() for k in saved.files}


def ppo_state(path: Path) -> dict[str, Any]:
    import torch

    from envrigger.loop.learners import PPOLearner

    model = PPOLearner.load(path, LAKE.build()).model
    weights = {k: v.clone() for k, v in model.policy.state_dict().items()}
    optimizer = model.policy.optimizer.state_dict()["state"]
    moments = {f"{i}.{k}": v.clone() for i, s in optimizer.items() for k, v in s.items() if isinstance(v, torch.Tensor)}
    return {"weights": weights, "moments": moments, "steps": model.num_timesteps}


def same_ppo(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return (
        a["steps"] == b["steps"]
        and a["weights"].keys() == b["weights"].keys()
        and all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])
        and a["moments"].keys() == b["moments"].keys()
        and all(torch.equal(a["moments"][k], b["moments"][k]) for k in a["moments"])
    )


@needs_textworld
def test_textq_shadow_is_the_original_arm_weight_for_weight(tmp_path):
    config = {
        **CONFIG,
        "spec": TEXTWORLD,
        "learner": "textq",
        "learner_params": {"bits": 12, "explore_steps": 200},
        "budget_steps": 200,
        "credit_chunks": 2,
        "heldout": False,
    }
    result = run_loop(tmp_path / "run", LoopConfig(**config))
    run = tmp_path / "run"
    original = textq_state(run / "original-round-1")
    assert textq_state(run / "rigger-shadow-round-1") == original  # weights, replay buffer, step counts
    if result["rounds"][0]["arms"]["rigger"]["train"]["credit"]["chunks"][-1]["kept"] == "original":
        assert textq_state(run / "rigger-round-1") == original


@needs_textworld
def test_a_textq_shadow_reloaded_from_its_checkpoint_trains_on_as_the_uninterrupted_one(tmp_path):
    # What --resume does to the shadow: round 2 starts from rigger-shadow-round-1 (save, then load) rather than from the
    # learner in memory. The next round's chunks must train the very same weights, buffer and counters.
    config = LoopConfig(**{**CONFIG, "spec": TEXTWORLD, "learner": "textq", "learner_params": {"bits": 12}, "budget_steps": 200})
    probe = TEXTWORLD.build()
    kept = Arm("original", make_learner("textq", probe, config.seed, bits=12))
    chunked_training(kept, config, 1, set())
    reloaded = Arm("original", load_learner("textq", kept.learner.save(tmp_path / "rigger-shadow-round-1"), probe))
    for arm, name in ((kept, "kept"), (reloaded, "reloaded")):
        chunked_training(arm, config, 2, set())
        arm.learner.save(tmp_path / name)
    probe.close()
    assert textq_state(tmp_path / "reloaded") == textq_state(tmp_path / "kept")


@needs_textworld
def test_a_textq_fallback_is_a_copy_that_shares_no_array_with_the_shadow(tmp_path, monkeypatch):
    config = LoopConfig(**{**CONFIG, "spec": TEXTWORLD, "learner": "textq", "learner_params": {"bits": 12}, "budget_steps": 200})
    probe = TEXTWORLD.build()
    make = lambda: make_learner("textq", probe, config.seed, bits=12)  # noqa: E731
    rigger, shadow, original = Arm("rigger", make()), make(), Arm("original", make())
    force(monkeypatch, ["original", "original", "original"])
    sampler = Curriculum(1, np.random.default_rng(0))
    credited_training(tmp_path / "credit", rigger, [TEXTWORLD], [], sampler, config, 1, set(), Credit(1.0), shadow=shadow)
    chunked_training(original, config, 1, set())
    assert np.array_equal(rigger.learner.weights, shadow.weights) and np.array_equal(shadow.weights, original.learner.weights)
    assert rigger.learner.steps == shadow.steps == original.learner.steps
    assert not np.shares_memory(rigger.learner.weights, shadow.weights)
    before = shadow.weights.copy()
    rigger.learner.train(lambda: TEXTWORLD.build(), 100, seed=5)
    assert np.array_equal(shadow.weights, before) and not np.array_equal(rigger.learner.weights, before)
    probe.close()


@needs_sb3
def test_ppo_shadow_is_the_original_arm_weight_for_weight_and_the_train_steps_are_equal(tmp_path):
    config = {**CONFIG, "learner": "ppo", "learner_params": PPO_PARAMS, "budget_steps": 256, "credit_chunks": 2, "heldout": False}
    plant(tmp_path / "run", HARMFUL)
    result = run_loop(tmp_path / "run", LoopConfig(**config))
    run = tmp_path / "run"
    original = ppo_state(run / "original-round-1")
    assert same_ppo(ppo_state(run / "rigger-shadow-round-1"), original)  # weights, Adam's moments and timesteps
    arms = result["rounds"][0]["arms"]
    assert arms["rigger"]["interaction"]["train"] == arms["original"]["interaction"]["train"] == 256  # whole rollouts: exact
    if arms["rigger"]["train"]["credit"]["chunks"][-1]["kept"] == "original":
        assert same_ppo(ppo_state(run / "rigger-round-1"), original)


@needs_sb3
def test_ppo_shadow_stays_the_original_arm_across_rounds_and_a_resume(tmp_path):
    # Round 2 follows a rigger round (collection, validation on the rigger arm's learner) and, in the resumed run, a
    # reload of every learner from its checkpoint: the shadow must still be the original arm, and both as uninterrupted.
    config = {**TWO_ROUNDS, "learner": "ppo", "learner_params": PPO_PARAMS, "budget_steps": 256, "credit_chunks": 2}
    for name in ("whole", "resumed"):
        plant(tmp_path / name, HARMFUL)
    run_loop(tmp_path / "whole", LoopConfig(**config))

    def die(summary: Any) -> None:
        raise Killed(summary["round"])

    with pytest.raises(Killed):
        run_loop(tmp_path / "resumed", LoopConfig(**config), on_round=die)
    run_loop(tmp_path / "resumed")
    whole = {name: ppo_state(tmp_path / "whole" / f"{name}-round-2") for name in ("original", "rigger-shadow", "rigger")}
    assert same_ppo(whole["rigger-shadow"], whole["original"])
    for name, state in whole.items():
        assert same_ppo(ppo_state(tmp_path / "resumed" / f"{name}-round-2"), state), name


@needs_sb3
def test_a_ppo_fallback_is_the_shadow_weight_for_weight_and_trains_on_apart(tmp_path, monkeypatch):
    import torch

    config = LoopConfig(**{**CONFIG, "learner": "ppo", "learner_params": PPO_PARAMS, "budget_steps": 256, "credit_chunks": 2})
    probe = LAKE.build()
    make = lambda: make_learner("ppo", probe, config.seed, **PPO_PARAMS)  # noqa: E731
    rigger, shadow, original = Arm("rigger", make()), make(), Arm("original", make())
    force(monkeypatch, ["original", "original"])
    sampler = Curriculum(2, np.random.default_rng(0))
    trained, record = credited_training(
        tmp_path / "credit", rigger, [LAKE, HARMFUL], [HARMFUL.hash()], sampler, config, 1, set(), Credit(1.0), shadow=shadow
    )
    plain = chunked_training(original, config, 1, set())
    for learner, name in ((rigger.learner, "rigger"), (shadow, "shadow"), (original.learner, "original")):
        learner.save(tmp_path / name)
    states = {name: ppo_state(tmp_path / name) for name in ("rigger", "shadow", "original")}
    assert same_ppo(states["shadow"], states["original"]) and same_ppo(states["rigger"], states["shadow"])
    assert trained["steps"] == plain["steps"] == 256
    assert rigger.learner.model is not shadow.model
    shared = {id(p) for p in shadow.model.policy.parameters()}
    assert not shared & {id(p) for p in rigger.learner.model.policy.parameters()}
    rigger.learner.train(lambda: HARMFUL.build(), 128, seed=3)
    after = shadow.model.policy.state_dict()
    assert all(torch.equal(after[k], states["shadow"]["weights"][k]) for k in after)
    probe.close()
