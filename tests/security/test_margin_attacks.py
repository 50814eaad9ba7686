"""A hostile review of today's credit margin, LLM credit accounting, ``--mutate``, credit_replay.py and variant_check's ``--label``.

The promises under attack (docs/envrigger.md, "Credit from the original env"; the scripts' docstrings):

1. ``--credit-margin Z`` (``LoopConfig.credit_margin``): the curriculum copy is thrown away only when the
   original-only copy is ahead by more than Z standard errors of the paired difference; at Z = 0 a tie keeps
   the curriculum and any loss throws it away; with Z > 0 a loss beyond the noise is still undone and a
   fallback leaves the arm exactly the shadow's (or the fork's) weights; every chunk record has ``se``;
   a bad Z is refused in one line, exit 2, on every path (the option, ``--resume``, a hand-edited loop.json);
2. LLM learners (``--learner skills``): every model call the endpoint served is counted exactly once, as the
   arm's own training or as the credit record's ``spent``;
3. ``--mutate learnability`` orders which admitted components are mutated, and nothing else;
4. ``benchmarks/credit_replay.py`` classifies every seed of a kept benchmark, and bad input exits 2 in one line;
5. ``benchmarks/variant_check.py --label``: a label is a folder name; a bad one exits 2 before anything runs,
   and two different variants never share a folder or a result file.

Grouped by root-cause class:

- BOUNDS: margin values at and beyond the config's bounds, through every door a value comes in by;
- RULE: the keep rule at the margin's exact edge, at zero, for a copy that loses everything, after a fallback,
  on the original-select arm, and when the scoring's store is not what the rule expects (env errors, a lost episode);
- SPEND: model calls of LLM learners over several chunks, fork and shadow, fallbacks then keeps, within the margin;
- DETERMINISM: the same config gives the same chunk records (``se`` included), whole or resumed;
- MUTATE: learnability ordering is only an ordering;
- REPLAY: credit_replay.py on bad, altered, partial and unusual kept benchmarks;
- LABELS: variant_check.py's folder names.

Small FrozenLake / TextWorld configs (tests/security/credit_cases.py); LLM agents are scripted chat servers.
"""

from __future__ import annotations

import json
import math
import sqlite3
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import faulty_envs  # noqa: F401 - registers Crashy-v0
import numpy as np
import pytest
from credit_cases import CREDITED, LAKE, TW, agent, needs_textworld, rounds_of, walker
from pydantic import ValidationError

import envrigger.loop.credit as credit_module
from envharness import HarnessSpec
from envrigger.agents.scripted import ChatServer
from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.config import CREDIT_SEED
from envrigger.loop.credit import Credit, credited_training
from envrigger.loop.learners import make_learner
from envrigger.loop.library import Library
from envrigger.loop.round import _learnability
from envrigger.loop.samplers import Curriculum
from envrigger.loop.train import Arm
from envrigger.stats import paired_se

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import credit_replay  # noqa: E402
import variant_check  # noqa: E402

Design = dict[str, list[bool]]  # "curriculum"/"original" -> each scoring level's outcome, in seed order, per chunk


def in_process(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    from envharness.cli import run_cli
    from envharness.errors import UserError
    from envrigger.cli import app

    code = run_cli(app, args, "envrigger", known=(UserError, FileNotFoundError, ValueError, OSError))  # as envrigger.cli.main
    return code, capsys.readouterr().err.strip().splitlines()


def rig(monkeypatch: pytest.MonkeyPatch, designs: list[Design]) -> None:
    """Chunk j's scoring is played for real, then its outcomes (and success) are ``designs[j]``'s, level by level."""
    real = credit_module.evaluate

    def rigged(policy: Any, base: Any, seeds: Any, out: Path, config: Any, *rest: Any, **named: Any) -> dict[str, Any]:
        scored = real(policy, base, seeds, out, config, *rest, **named)
        _, j, name = out.name.split("-")
        wins = designs[int(j)][name]
        assert len(wins) == len(seeds)
        outcomes = dict(zip(seeds, wins, strict=True))
        return {**scored, "outcomes": outcomes, "success": sum(wins) / len(seeds)}

    monkeypatch.setattr(credit_module, "evaluate", rigged)


def behind(lost: int, n: int = 10) -> Design:
    """The original copy wins every one of ``n`` levels; the curriculum loses the first ``lost`` of them."""
    return {"curriculum": [i >= lost for i in range(n)], "original": [True] * n}


def tabular_chunk(
    tmp_path: Path, margin: float, baseline: str = "shadow", chunks: int = 1, spec: HarnessSpec = LAKE, offset: int = 0
) -> tuple[Arm, Any, dict[str, Any]]:
    """One credited round of a Q-learner on ``spec``: the arm, the shadow (or None) and the credit record."""
    config = LoopConfig(
        **{**CREDITED, "spec": spec, "budget_steps": 300, "credit_margin": margin, "credit_chunks": chunks, "credit_baseline": baseline}
    )
    probe = spec.build()
    arm = Arm("rigger", make_learner("qlearning", probe, 0))
    shadow = make_learner("qlearning", probe, 0) if baseline == "shadow" else None
    _, record = credited_training(
        tmp_path / "credit", arm, [spec], [], Curriculum(1, np.random.default_rng(0)), config, 1, set(), Credit(1.0),
        alone_offset=offset, shadow=shadow,
    )  # fmt: skip
    probe.close()
    return arm, shadow, record


def q_table(learner: Any, where: Path) -> Any:
    return json.loads(learner.save(where).read_text())["table"]


# --- BOUNDS: a margin outside [0, 10] is refused through every door ---------------------------------------------------


@pytest.mark.parametrize("value", [-1.0, -1e-300, float("nan"), float("inf"), 10.000001, "abc"])
def test_the_config_refuses_a_margin_outside_its_bounds(value):
    with pytest.raises(ValidationError):
        LoopConfig(spec=LAKE, credit_margin=value)


@pytest.mark.parametrize("value", ["-1", "nan", "11", "inf"])
def test_the_margin_option_refuses_a_bad_value_in_one_line_and_writes_nothing(tmp_path, capsys, value):
    code, err = in_process(["run", "FrozenLake-v1", "--credit-margin", value, "-o", str(tmp_path / "run")], capsys)
    assert code == 2 and len(err) == 1 and "--credit-margin" in err[0], err
    assert not (tmp_path / "run").exists()


def test_resume_refuses_a_margin_option_rather_than_ignoring_it(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    saved = json.loads(LoopConfig(**CREDITED).model_dump_json())
    (run / "loop.json").write_text(json.dumps(saved))
    code, err = in_process(["run", "--resume", str(run), "--credit-margin", "1"], capsys)
    assert code == 2 and len(err) == 1 and "--credit-margin" in err[0], err
    assert json.loads((run / "loop.json").read_text()) == saved and not (run / "library.db").exists()


@pytest.mark.parametrize("value", ["-1", "NaN", "1e400", '"one"'])
def test_a_hand_edited_loop_json_with_a_bad_margin_is_refused_in_one_line_that_names_the_field(tmp_path, capsys, value):
    # A user edits loop.json (the docs say every threshold is a LoopConfig field) and resumes: the refusal must say
    # which field is wrong, as the option's refusal does, and nothing may be written.
    run = tmp_path / "run"
    run.mkdir()
    text = json.dumps(json.loads(LoopConfig(**CREDITED).model_dump_json())).replace('"credit_margin": 0.0', f'"credit_margin": {value}')
    assert f'"credit_margin": {value}' in text
    (run / "loop.json").write_text(text)
    code, err = in_process(["run", "--resume", str(run)], capsys)
    assert code == 2 and len(err) == 1, err
    assert not (run / "library.db").exists() and not (run / "levels.json").exists()
    assert "credit_margin" in err[0] or "--credit-margin" in err[0], err  # "1 validation error for LoopConfig" names nothing


def test_a_run_saved_before_the_margin_and_mutate_resumes_with_no_margin_and_random_mutations():
    saved = json.loads(LoopConfig(**CREDITED).model_dump_json())
    del saved["credit_margin"], saved["mutate"]
    config = LoopConfig.saved(saved)
    assert config.credit_margin == 0.0 and config.mutate == "random"


# --- RULE: the keep rule at and around the margin -------------------------------------------------------------------


@pytest.mark.parametrize(("lost", "margin"), [(1, 1.0), (5, 3.0), (9, 9.0)])
def test_a_loss_of_exactly_the_margin_keeps_the_curriculum_and_a_hair_more_throws_it_away(tmp_path, monkeypatch, lost, margin):
    # 10 levels, the curriculum loses `lost` of them and wins none the other loses: the difference is -lost/10 and
    # its paired standard error is exactly lost/10 / margin (1, 3 and 9 are where that is a whole number).
    design = behind(lost)
    rig(monkeypatch, [design])
    _, _, record = tabular_chunk(tmp_path / "at", margin)
    (chunk,) = record["chunks"]
    assert chunk["se"] == pytest.approx(paired_se([float(x) for x in design["curriculum"]], [float(x) for x in design["original"]]))
    assert chunk["original"] - chunk["curriculum"] == pytest.approx(margin * chunk["se"])
    assert chunk["kept"] == "curriculum"  # a difference of exactly the margin is within it
    _, _, record = tabular_chunk(tmp_path / "beyond", margin * 0.999)
    assert record["chunks"][0]["kept"] == "original"


@pytest.mark.parametrize(
    ("design", "kept"),
    [
        ({"curriculum": [True] * 5 + [False] * 5, "original": [False] * 5 + [True] * 5}, "curriculum"),  # a tie
        (behind(1), "original"),  # one level behind
        ({"curriculum": [True] * 10, "original": [True] * 9 + [False]}, "curriculum"),  # ahead
    ],
)
def test_with_no_margin_a_tie_keeps_the_curriculum_and_any_loss_throws_it_away(tmp_path, monkeypatch, design, kept):
    rig(monkeypatch, [design])
    _, _, record = tabular_chunk(tmp_path, 0.0)
    assert record["chunks"][0]["kept"] == kept and "se" in record["chunks"][0]


@pytest.mark.parametrize("baseline", ["shadow", "fork"])
def test_a_copy_that_loses_every_level_is_thrown_away_even_at_the_largest_margin(tmp_path, monkeypatch, baseline):
    # The paired differences are all -1: no noise at all (se 0), so no margin may excuse it.
    rig(monkeypatch, [behind(10)])
    _, _, record = tabular_chunk(tmp_path, 10.0, baseline)
    assert record["chunks"][0]["kept"] == "original" and record["chunks"][0]["se"] == 0.0


def test_a_fallback_under_a_margin_leaves_the_arm_exactly_the_shadows_weights_in_a_learner_of_its_own(tmp_path, monkeypatch):
    rig(monkeypatch, [behind(10), {"curriculum": [True] * 10, "original": [True] * 10}])  # lose, then tie
    arm, shadow, record = tabular_chunk(tmp_path, 2.0, "shadow", chunks=1)
    assert record["chunks"][0]["kept"] == "original"
    assert arm.learner is not shadow and q_table(arm.learner, tmp_path / "a") == q_table(shadow, tmp_path / "s")


def test_a_fallback_under_a_margin_with_the_fork_leaves_the_arm_the_fork_that_trained_alone(tmp_path, monkeypatch):
    loaded: list[Any] = []
    real = credit_module.load_learner

    def spy(*args: Any, **named: Any) -> Any:
        loaded.append(real(*args, **named))
        return loaded[-1]

    monkeypatch.setattr(credit_module, "load_learner", spy)
    rig(monkeypatch, [behind(10), behind(0)])
    arm, _, record = tabular_chunk(tmp_path, 2.0, "fork", chunks=2)
    assert [c["kept"] for c in record["chunks"]] == ["original", "curriculum"]
    assert len(loaded) == 2 and loaded[0] is not loaded[1]
    # After chunk 0's fallback the arm is the first fork; chunk 1 kept the curriculum, i.e. that same learner trained on.
    assert arm.learner is loaded[0]


def test_the_original_select_arm_keeps_the_first_copy_within_the_margin_and_records_its_noise(tmp_path, monkeypatch):
    from envrigger.loop.arms.select import SELECT_OFFSET

    rig(monkeypatch, [behind(1)])
    _, _, record = tabular_chunk(tmp_path / "z1", 1.0, "fork", offset=SELECT_OFFSET)
    assert record["chunks"][0]["kept"] == "curriculum" and record["chunks"][0]["se"] == pytest.approx(0.1)
    _, _, record = tabular_chunk(tmp_path / "z0", 0.0, "fork", offset=SELECT_OFFSET)
    assert record["chunks"][0]["kept"] == "original"


def test_an_env_that_crashes_on_scoring_levels_is_a_lost_level_for_both_copies_not_a_dead_round(tmp_path):
    first = CREDIT_SEED + 10_000_000  # round 1, chunk 0's first scoring seed
    crashy = HarnessSpec(env_id="Crashy-v0", env_kwargs={"crash_seeds": list(range(first, first + 4))})
    _, _, record = tabular_chunk(tmp_path, 1.0, "shadow", spec=crashy)
    (chunk,) = record["chunks"]
    assert chunk["curriculum"] <= 0.6 and chunk["original"] <= 0.6  # 4 of 10 levels crashed for both
    assert math.isfinite(chunk["se"]) and chunk["kept"] in ("curriculum", "original")


def test_a_store_that_lost_an_episode_does_not_kill_a_round_without_a_margin(tmp_path, monkeypatch):
    # With no margin the rule reads the two success rates only, as before today; the standard error it does not need
    # must not turn a scoring store without one seed's episode into a KeyError that kills the run.
    real = credit_module.evaluate

    def lossy(policy: Any, base: Any, seeds: Any, out: Path, config: Any, *rest: Any, **named: Any) -> dict[str, Any]:
        scored = real(policy, base, seeds, out, config, *rest, **named)
        outcomes = dict(scored["outcomes"])
        outcomes.pop(seeds[-1])
        return {**scored, "outcomes": outcomes}

    monkeypatch.setattr(credit_module, "evaluate", lossy)
    _, _, record = tabular_chunk(tmp_path, 0.0)
    assert record["chunks"][0]["kept"] in ("curriculum", "original")


# --- SPEND: every call the endpoint served is counted once ----------------------------------------------------------


def skills_round(tmp_path: Path, baseline: str, margin: float, designs: list[Design], monkeypatch: pytest.MonkeyPatch):
    rig(monkeypatch, designs)
    with ChatServer(walker()) as server:
        params = {"agent": agent(server.url)}
        config = LoopConfig(
            spec=TW, learner="skills", learner_params=params, budget_steps=100, backend="serial", credit_episodes=10,
            credit_chunks=len(designs), credit_baseline=baseline, credit_margin=margin,
        )  # fmt: skip
        probe = TW.build()
        rigger = Arm("rigger", make_learner("skills", probe, 0, **params))
        shadow = make_learner("skills", probe, 0, **params) if baseline == "shadow" else None
        _, record = credited_training(
            tmp_path / "credit", rigger, [TW], [], Curriculum(1, np.random.default_rng(0)), config, 1, set(), Credit(1.0), shadow=shadow
        )
        probe.close()
        served = sum(r["path"].rstrip("/") == "/v1/chat/completions" for r in server.requests)
    return rigger, shadow, record, served


@needs_textworld
def test_a_fork_round_of_three_chunks_fallback_keep_fallback_counts_every_call_once(tmp_path, monkeypatch):
    designs = [behind(10), behind(0), behind(10)]
    rigger, _, record, served = skills_round(tmp_path, "fork", 0.0, designs, monkeypatch)
    assert [c["kept"] for c in record["chunks"]] == ["original", "curriculum", "original"]
    own, credit = rigger.learner.spent["model_calls"], record["spent"]["model_calls"]
    assert own > 0 and credit > 0 and own + credit == served


@needs_textworld
def test_a_shadow_round_with_a_loss_within_the_margin_and_one_beyond_counts_every_call_once(tmp_path, monkeypatch):
    designs = [behind(1), behind(10), behind(0)]  # kept within the margin, thrown away, kept
    rigger, shadow, record, served = skills_round(tmp_path, "shadow", 1.0, designs, monkeypatch)
    assert [c["kept"] for c in record["chunks"]] == ["curriculum", "original", "curriculum"]
    own, credit = rigger.learner.spent["model_calls"], record["spent"]["model_calls"]
    assert own > 0 and credit > 0 and own + credit == served
    assert rigger.learner is not shadow


def test_a_learner_that_keeps_no_spend_gets_no_spent_in_its_credit_record(tmp_path, monkeypatch):
    rig(monkeypatch, [behind(10), behind(0)])
    _, _, record = tabular_chunk(tmp_path, 0.0, "fork", chunks=2)
    assert "spent" not in record


# --- DETERMINISM: the same config, the same chunk records -------------------------------------------------------------


class Killed(Exception):
    pass


def test_the_same_margin_config_gives_the_same_chunk_records_whole_twice_or_resumed(tmp_path):
    config = LoopConfig(
        **{
            **CREDITED,
            "rounds": 2,
            "budget_steps": 1500,
            "credit_chunks": 2,
            "credit_margin": 1.0,
            "arms": ["original", "original-select", "rigger"],
        }
    )
    run_loop(tmp_path / "first", config)
    run_loop(tmp_path / "second", config)

    def die(summary: Any) -> None:
        raise Killed(summary["round"])

    with pytest.raises(Killed):
        run_loop(tmp_path / "resumed", config, on_round=die)
    run_loop(tmp_path / "resumed")
    first = rounds_of(tmp_path / "first")
    assert first == rounds_of(tmp_path / "second") == rounds_of(tmp_path / "resumed")
    chunks = [c for r in first for arm in ("rigger", "original-select") for c in r["arms"][arm]["train"]["credit"]["chunks"]]
    assert len(chunks) == 8
    for c in chunks:  # every record obeys the rule it states
        assert c["kept"] == ("curriculum" if c["curriculum"] - c["original"] + 1.0 * c["se"] >= -1e-9 else "original"), c


# --- MUTATE: learnability is an order, nothing more -------------------------------------------------------------------


def test_learnability_counts_only_trained_components_and_peaks_at_half():
    found = _learnability({"never": (0, 0), "always": (5, 5), "half": (5, 10), "none": (0, 7)})
    assert found == {"always": 0.0, "half": 0.25, "none": 0.0}
    assert _learnability(None) == {}


def test_learnability_with_nothing_known_proposes_exactly_what_random_does(tmp_path):
    from envrigger.diagnose import diagnose
    from envrigger.loop.propose import propose
    from envrigger.rollout import rollout

    base = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")
    report = diagnose(rollout(base, "random", seeds=range(12), out=tmp_path / "random"))
    admitted = [
        ("a", base.extended({"name": "StepBudget", "params": {"max_steps": 120}}), "timeout"),
        ("b", base.extended({"name": "RemoveWalls", "params": {"count": 2}}), "timeout"),
    ]
    for seed in range(3):
        plain = propose(report, base, np.random.default_rng(seed), admitted=admitted, mutations=2)
        empty = propose(report, base, np.random.default_rng(seed), admitted=admitted, mutations=2, learnability={})
        ranked = propose(report, base, np.random.default_rng(seed), admitted=admitted, mutations=2, learnability={"b": 0.2})
        assert [c.hash for c in plain] == [c.hash for c in empty]
        assert [c.hash for c in plain if c.origin == "catalog"] == [c.hash for c in ranked if c.origin == "catalog"]


def test_an_unknown_mutate_mode_is_refused(tmp_path, capsys):
    with pytest.raises(ValidationError):
        LoopConfig(spec=LAKE, mutate="regret")
    code, err = in_process(["run", "FrozenLake-v1", "--mutate", "regret", "-o", str(tmp_path / "run")], capsys)
    assert code == 2 and len(err) == 1 and not (tmp_path / "run").exists()


# --- REPLAY: benchmarks/credit_replay.py ----------------------------------------------------------------------------


def chunk(curriculum: float, original: float, se: float | None = None) -> dict[str, Any]:
    kept = "curriculum" if curriculum >= original else "original"
    return {
        "steps": 100,
        "curriculum": curriculum,
        "original": original,
        "kept": kept,
        "shares": {},
        **({"se": se} if se is not None else {}),
    }


def kept_benchmark(where: Path, seeds: dict[int, list[dict[str, Any]]], config: dict[str, Any] | None = None, arm: str = "rigger") -> Path:
    """A kept benchmark: seeds.json and, per seed, a library.db whose round 1 has these rigger (or ``arm``) chunks."""
    where.mkdir(parents=True, exist_ok=True)
    saved = {**json.loads(LoopConfig(**{**CREDITED, "credit_episodes": 50}).model_dump_json()), **(config or {})}
    (where / "seeds.json").write_text(json.dumps({"config": saved, "seeds": len(seeds)}))
    for seed, chunks in seeds.items():
        library = Library(where / f"seed-{seed}" / "library.db")
        train = {"credit": {"chunks": chunks}} if chunks else {}
        library.complete_round(1, {"round": 1, "arms": {arm: {"train": train}}})
        library.close()
    return where


def replayed(where: Path, margin: str, capsys: pytest.CaptureFixture[str]) -> dict[int, Any]:
    assert credit_replay.main([str(where), "--margin", margin, "--json"]) == 0
    return {int(k): v for k, v in json.loads(capsys.readouterr().out).items()}


def refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The script's exit for bad input: SystemExit(2) and a last stderr line that says what is wrong (no traceback)."""
    with pytest.raises(SystemExit) as exit_info:
        credit_replay.main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and err and "Traceback" not in "\n".join(err), err
    return err[-1]


def test_replay_sorts_seeds_and_a_chunk_exactly_at_the_margin_is_within_it(tmp_path, capsys):
    where = kept_benchmark(
        tmp_path / "b",
        {
            0: [chunk(0.5, 0.4)],  # the curriculum won: unchanged
            1: [chunk(0.04, 0.06)],  # one level in 50: within one se whatever the pattern
            2: [chunk(0.2, 0.5)],  # 15 levels in 50: beyond one se whatever the pattern
            3: [],  # credit off
        },
    )
    verdicts = replayed(where, "1", capsys)
    assert {s: v["verdict"] for s, v in verdicts.items()} == {0: "unchanged", 1: "changed", 2: "unchanged", 3: "unchanged"}
    # 10 levels: one level behind with one disagreement has se exactly 0.1; the engine keeps a chunk exactly at the margin
    at = kept_benchmark(tmp_path / "at", {0: [chunk(0.0, 0.1)]}, {"credit_episodes": 10})
    assert replayed(at, "1", capsys)[0]["verdict"] == "changed"


def test_the_replays_bounds_contain_the_engines_standard_error_for_every_pattern():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(10, 60))
        a, b = rng.random(n) < rng.random(), rng.random(n) < rng.random()
        se = paired_se(a.astype(float).tolist(), b.astype(float).tolist())
        low, high = credit_replay.se_bounds(a.sum() / n, b.sum() / n, n)
        assert low - 1e-12 <= se <= high + 1e-12, (a.sum(), b.sum(), n)


@pytest.mark.parametrize("margin", ["-1", "nan", "inf"])
def test_replay_refuses_a_margin_the_engine_would_refuse(tmp_path, capsys, margin):
    # A negative or NaN margin makes every seed "unchanged": a wrong answer the margin variants would act on.
    where = kept_benchmark(tmp_path / "b", {0: [chunk(0.04, 0.06)]})
    refused([str(where), f"--margin={margin}"], capsys)


def test_replay_refuses_a_seeds_json_that_is_not_json_in_one_line(tmp_path, capsys):
    where = kept_benchmark(tmp_path / "b", {0: [chunk(0.04, 0.06)]})
    (where / "seeds.json").write_text("{not json")
    assert "seeds.json" in refused([str(where)], capsys)


def test_replay_refuses_a_seeds_json_without_its_config_in_one_line(tmp_path, capsys):
    where = kept_benchmark(tmp_path / "b", {0: [chunk(0.04, 0.06)]})
    (where / "seeds.json").write_text(json.dumps({"seeds": 1}))
    assert "seeds.json" in refused([str(where)], capsys)


def test_replay_refuses_a_hand_edited_credit_episodes_below_two(tmp_path, capsys):
    where = kept_benchmark(tmp_path / "b", {0: [chunk(0.0, 1.0)]}, {"credit_episodes": 1})
    refused([str(where)], capsys)


def test_replay_refuses_a_library_that_is_not_a_database_in_one_line(tmp_path, capsys):
    where = kept_benchmark(tmp_path / "b", {0: [chunk(0.04, 0.06)]})
    (where / "seed-0" / "library.db").write_bytes(b"this is not sqlite" * 100)
    assert "library.db" in refused([str(where)], capsys)


def test_replay_refuses_an_altered_library_in_one_line(tmp_path, capsys):
    # Someone "fixes" a chunk's rate by hand: the checksum no longer matches, and the verdict must not stand on it.
    where = kept_benchmark(tmp_path / "b", {0: [chunk(0.04, 0.06)]})
    db = sqlite3.connect(where / "seed-0" / "library.db")
    text = db.execute("SELECT summary_json FROM rounds WHERE round = 1").fetchone()[0]
    db.execute("UPDATE rounds SET summary_json = ? WHERE round = 1", (text.replace("0.06", "0.5"),))
    db.commit()
    db.close()
    assert "altered" in refused([str(where)], capsys)


def test_replay_does_not_crash_on_a_seed_folder_whose_name_is_not_a_number(tmp_path, capsys):
    where = kept_benchmark(tmp_path / "b", {0: [chunk(0.04, 0.06)]})
    (where / "seed-0.bak").mkdir()
    (where / "seed-0.bak" / "library.db").write_bytes((where / "seed-0" / "library.db").read_bytes())
    try:
        code = credit_replay.main([str(where), "--json"])
    except SystemExit as done:
        code = done.code
    assert code in (0, 2)


def test_replay_names_a_seed_of_the_benchmark_that_has_no_library(tmp_path, capsys):
    # seeds.json says 3 seeds; seed 2 crashed before its library was written. Silence would leave it neither
    # rerun (it is not changed or maybe) nor reusable (there is no kept run): it must be named.
    where = kept_benchmark(tmp_path / "b", {0: [chunk(0.5, 0.4)], 1: [chunk(0.5, 0.4)]}, {"seed": 0})
    saved = json.loads((where / "seeds.json").read_text())
    (where / "seeds.json").write_text(json.dumps({**saved, "seeds": 3}))
    (where / "seed-2").mkdir()
    try:
        code = credit_replay.main([str(where), "--json"])
    except SystemExit as done:
        code = done.code
    out, err = capsys.readouterr()
    assert code == 2 or "2" in json.loads(out), (code, out, err)


def test_replay_of_a_run_kept_with_a_margin_knows_a_smaller_margin_changes_it(tmp_path, capsys):
    # A kept run that already used --credit-margin 1 kept a chunk one level behind in 50 (within one se). Replayed
    # with --margin 0 that chunk throws the curriculum away: the seed is changed, not unchanged.
    kept = {**chunk(0.04, 0.06), "kept": "curriculum", "se": 0.02}
    where = kept_benchmark(tmp_path / "b", {0: [kept]}, {"credit_margin": 1.0})
    assert replayed(where, "0", capsys)[0]["verdict"] != "unchanged"


def test_replay_sees_the_original_select_arms_chunks_which_the_margin_also_turns(tmp_path, capsys):
    # credited_training applies config.credit_margin to the original-select arm too; a benchmark with that arm
    # changes under a margin when its selection chunk was lost within it.
    where = kept_benchmark(
        tmp_path / "b", {0: [chunk(0.04, 0.06)]}, {"arms": ["original", "original-select", "rigger"]}, arm="original-select"
    )
    assert replayed(where, "1", capsys)[0]["verdict"] != "unchanged"


def test_replay_refuses_a_folder_without_seeds_json(tmp_path, capsys):
    (tmp_path / "seed-0").mkdir()
    assert "seeds.json" in refused([str(tmp_path)], capsys)


# --- LABELS: benchmarks/variant_check.py --label --------------------------------------------------------------------


class Started(Exception):
    """The loops were about to start: the label was accepted."""


class NoLoops:
    """A process pool that plays no loop: each task is 'finished' at once and its directory recorded."""

    tasks: list[tuple[str, str]] = []

    def __init__(self, *args: Any, **named: Any) -> None:
        pass

    def __enter__(self) -> NoLoops:
        return self

    def __exit__(self, *args: Any) -> bool:
        return False

    def submit(self, fn: Any, task: tuple[str, str]) -> Future:
        NoLoops.tasks.append(task)
        done: Future = Future()
        done.set_result(task[0])
        return done


@pytest.mark.parametrize("label", ["", ".", "..", "a/b", "/tmp/x", "plain", "a" * 300, "x\n"])
def test_a_label_that_is_not_a_plain_folder_name_is_refused_before_any_loop(tmp_path, monkeypatch, capsys, label):
    def start(*args: Any, **named: Any) -> Any:
        raise Started(label)

    monkeypatch.setattr(variant_check, "ProcessPoolExecutor", start)
    with pytest.raises(SystemExit) as exit_info:
        variant_check.main(["frozenlake", "--quick", "--set", "step_out=true", "--label", label, "-o", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "--label" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def fake_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> list[tuple[str, str]]:
    NoLoops.tasks = []
    monkeypatch.setattr(variant_check, "ProcessPoolExecutor", NoLoops)
    monkeypatch.setattr(variant_check, "validation", lambda where: {"validation": {"rigger": 0.5}, "admitted": [str(where)]})
    (tmp_path / "out" / "frozenlake").mkdir(parents=True, exist_ok=True)
    assert variant_check.main(["frozenlake", "--quick", "--seeds", "1", "-o", str(tmp_path / "out"), *args]) == 0
    return list(NoLoops.tasks)


def test_two_different_proposer_urls_never_share_a_variant_folder(tmp_path, monkeypatch, capsys):
    # The folder is reused by the next call (a run with loop.json resumes): two variants in one folder would report
    # the first's runs as the second's. A URL names no folder, so such a variant must be named (--label), and two
    # names are two folders.
    for url in ("http://a/b", "http://a_b"):
        with pytest.raises(SystemExit) as exit_info:
            fake_variant(tmp_path, monkeypatch, ["--set", f"proposer_base_url={url}"])
        assert exit_info.value.code == 2 and "--label" in capsys.readouterr().err
    first = fake_variant(tmp_path, monkeypatch, ["--set", "proposer_base_url=http://a/b", "--label", "first"])
    second = fake_variant(tmp_path, monkeypatch, ["--set", "proposer_base_url=http://a_b", "--label", "second"])
    folders = (
        {Path(t[0]).parent.name for t in first if "plain" not in t[0]},
        {Path(t[0]).parent.name for t in second if "plain" not in t[0]},
    )
    assert folders == ({"first"}, {"second"}), folders


def test_two_different_labels_never_share_a_result_file(tmp_path, monkeypatch, capsys):
    fake_variant(tmp_path, monkeypatch, ["--set", "step_out=true", "--label", "a=b"])
    fake_variant(tmp_path, monkeypatch, ["--set", "step_out=false", "--label", "a-b"])
    results = sorted((tmp_path / "out" / "frozenlake").glob("variant-*.json"))
    assert len(results) == 2, results
