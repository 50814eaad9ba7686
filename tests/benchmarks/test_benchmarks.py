"""benchmarks/heldout.py: the suite's definitions are valid, and the pipeline runs end to end and resumes."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from envrigger.loop import LevelSplit

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import heldout  # noqa: E402

ARMS = heldout.SUITE_ARMS  # the arms a benchmark trains unless --arms names others

needs_sb3 = pytest.mark.skipif(
    importlib.util.find_spec("stable_baselines3") is None, reason="needs the sb3 extra (Stable-Baselines3 and torch)"
)


def test_every_suite_benchmark_is_valid_and_has_unseen_levels_to_hold_out():
    suite = heldout.load_suite()
    assert len(suite) >= 5 and len({b.name for b in suite}) == len(suite)
    assert len({b.domain for b in suite}) == len(suite)
    for benchmark in suite:
        config = benchmark.config()
        assert config.arms == list(ARMS)  # every arm: replay, reshaping at all and targeted reshaping told apart
        probe = 200
        if benchmark.spec.env_id == "envharness/TextWorld-v0":
            # Each new game is generated (about a second): check the level pool on a tenth of the run's draws.
            config, probe = config.model_copy(update={"eval_episodes": config.eval_episodes // 6, "val_episodes": 10}), 20
        split = LevelSplit.make(benchmark.spec, config, probe=probe)  # refuses an env with too few levels
        assert split.disjoint and len(split.heldout_levels) >= 0.8 * config.eval_episodes, benchmark.name


def test_every_benchmark_gives_its_learner_only_parameters_it_takes_full_and_quick():
    from envrigger.loop.learners import PPO_DEFAULTS
    from envrigger.loop.learners.textq import TEXTQ_DEFAULTS

    takes = {"ppo": set(PPO_DEFAULTS), "textq": set(TEXTQ_DEFAULTS)}
    variants = sorted(p for p in (Path(heldout.__file__).parent / "variants").iterdir() if p.is_dir())
    assert variants  # benchmarks/variants/transfer at least
    for benchmark in [*heldout.load_suite(), *(b for folder in variants for b in heldout.load_suite(folder))]:
        for quick in (False, True):
            assert set(benchmark.config(quick).learner_params) <= takes[benchmark.learner], (benchmark.name, quick)
    transfer = heldout.load_suite(Path(heldout.__file__).parent / "variants" / "transfer")
    assert all(b.config().transfer_steps > 0 and b.arms == ["original", "rigger"] for b in transfer)


def test_an_unknown_benchmark_name_is_a_clear_error():
    with pytest.raises(SystemExit, match="no benchmark named nope"):
        heldout.load_suite(only=["nope"])


@needs_sb3
def test_the_pipeline_writes_its_table_figure_and_facts_and_resumes(tmp_path, monkeypatch):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "tiny.json").write_text(
        json.dumps(
            {
                "name": "tiny",
                "domain": "hazards",
                "title": "a tiny smoke benchmark",
                "spec": {"env_id": "MiniGrid-Dynamic-Obstacles-Random-6x6-v0"},
            }
        )
    )
    monkeypatch.setattr(heldout, "QUICK", {**heldout.QUICK, "rounds": 1, "budget_steps": 256, "eval_episodes": 10, "val_episodes": 10})
    out = tmp_path / "out"
    assert heldout.main(["--quick", "--seeds", "2", "--jobs", "2", "--suite", str(suite), "-o", str(out)]) == 0  # the two seeds at once
    results = json.loads((out / "results.json").read_text())
    entry = results["benchmarks"][0]
    # Every arm, so that replay, reshaping at all and reshaping the diagnosis targets are told apart.
    assert set(entry["result"]["arms"]) == set(ARMS) and entry["result"]["seeds"] == [0, 1]
    assert set(entry["result"]["difference"]) == set(ARMS) - {"rigger"}
    assert results["meta"]["versions"]["gymnasium"] and results["meta"]["machine"]["cpus"] and results["meta"]["quick"] is True
    assert all(0.0 <= a["success"]["ci"][0] <= a["success"]["ci"][1] <= 1.0 for a in entry["result"]["arms"].values())
    report = (out / "results.md").read_text()
    assert "| **rigger − plr** (paired) |" in report and (out / "tiny.png").stat().st_size > 10_000
    assert "| tiny | " in report and "Aims (on the means): +9 points over original on" in report
    assert "This call trained with --jobs 2 and took" in report
    # The ablation table: the four paired differences with their intervals, and every arm's collapsed seeds.
    row = next(line for line in report.splitlines() if line.startswith("| tiny | 2 | "))
    plr = entry["result"]["difference"]["plr"]
    assert f"{100 * plr['mean']:+.1f} [{100 * plr['ci'][0]:+.1f}, {100 * plr['ci'][1]:+.1f}]" in row
    assert row.endswith(" | " + ", ".join(str(entry["result"]["arms"][a]["collapsed"]) for a in ARMS) + " |")
    assert "Aims (on the intervals): rigger − plr above zero on" in report
    collapsed = {row["seed"] for row in entry["per_seed"] if row["heldout"]["original"] < 0.2}
    assert f"| original | {entry['result']['arms']['original']['success']['mean']:.3f} |" in report
    assert re.search(rf"^\| original \|.* \| {len(collapsed)} of 2 \|$", report, re.M)  # seeds where the arm collapsed
    # Every arm x seed is kept: running again reads the finished runs instead of training.
    before = {p: p.stat().st_mtime for p in out.glob("tiny/seed-*/final.json")}
    assert heldout.main(["--quick", "--seeds", "2", "--jobs", "1", "--suite", str(suite), "-o", str(out)]) == 0
    assert {p: p.stat().st_mtime for p in out.glob("tiny/seed-*/final.json")} == before
    assert json.loads((out / "results.json").read_text())["benchmarks"][0]["result"] == entry["result"]
    # A second benchmark run on its own joins the report; --report trains nothing.
    (suite / "tiny2.json").write_text((suite / "tiny.json").read_text().replace('"tiny"', '"tiny2"'))
    assert heldout.main(["--report", "--quick", "--suite", str(suite), "-o", str(out)]) == 0
    assert not (out / "tiny2").exists() and [
        b["benchmark"]["name"] for b in json.loads((out / "results.json").read_text())["benchmarks"]
    ] == ["tiny"]
    # --html: an index of the benchmarks, each with its page of master seeds, and a page per seed.
    assert heldout.main(["--report", "--html", "--quick", "--suite", str(suite), "-o", str(out)]) == 0
    index = (out / "report.html").read_text()
    mean = 100 * entry["result"]["difference"]["original"]["mean"]
    assert 'href="tiny/report.html"' in index and f"{mean:+.1f} [" in index
    assert 'href="seed-0/report.html"' in (out / "tiny" / "report.html").read_text()
    assert "Candidates and gates" in (out / "tiny" / "seed-1" / "report.html").read_text()


def test_jobs_below_one_is_refused_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        heldout.main(["--jobs", "0", "-o", str(tmp_path / "out")])
    assert refused.value.code == 2 and "--jobs: got 0; give 1 or more processes" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("arms", "message"),
    [("original,nope", "--arms: got 'original,nope'; give distinct arms from"), ("original,plr-random", "add rigger to --arms")],
)
def test_bad_arms_are_refused_in_one_line_before_anything_is_written(tmp_path, capsys, arms, message):
    with pytest.raises(SystemExit) as refused:
        heldout.main(["--arms", arms, "-o", str(tmp_path / "out")])
    assert refused.value.code == 2 and message in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_every_hard_tier_candidate_is_valid_winnable_and_has_unseen_levels_to_hold_out():
    from envrigger.loop.solvability import search_levels

    hard = heldout.load_suite(Path(heldout.__file__).parent / "hard")
    assert len(hard) >= 3 and len({b.domain for b in hard}) == len(hard)
    for benchmark in hard:
        config = benchmark.config()
        split = LevelSplit.make(benchmark.spec, config, probe=100)
        assert split.disjoint and len(split.heldout_levels) >= 0.8 * config.eval_episodes, benchmark.name
        assert search_levels(benchmark.spec, [8_000_000, 8_000_001]).count(True) >= 1, benchmark.name


def test_a_suite_folder_without_benchmarks_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        heldout.main(["--suite", str(tmp_path), "-o", str(tmp_path / "out")])
    assert refused.value.code == 2 and "--suite: " in capsys.readouterr().err and not (tmp_path / "out").exists()


@needs_sb3
def test_the_learner_search_scores_every_setting_on_probe_levels_and_chooses_by_mean_minus_spread(tmp_path):
    import learner_search

    from envrigger.loop import LoopConfig

    out = tmp_path / "search"
    args = ["--quick", "--only", "cartpole", "--seeds", "2", "--probe", "12", "--jobs", "2", "-o", str(out)]
    assert learner_search.main(args) == 0
    result = json.loads((out / "search.json").read_text())
    assert len(result["rows"]) == len(learner_search.SETTINGS) * 2
    table = result["benchmarks"]["cartpole"]["table"]
    chosen = result["benchmarks"]["cartpole"]["chosen"]
    assert table[chosen]["score"] == max(row["score"] for row in table.values())
    assert all(row["score"] == pytest.approx(row["mean"] - row["sd"]) for row in table.values())
    # The probe levels are neither held-out nor validation levels of the benchmark's runs.
    (benchmark,) = heldout.load_suite(only=["cartpole"])
    config: LoopConfig = benchmark.config()
    split = LevelSplit.make(config.spec, config)
    from envrigger.loop.levels import Seeds

    probe = Seeds(config.spec, 0)
    first = result["probe"]["cartpole"]["first_probe_seed"]
    assert first >= learner_search.PROBE_SEED and probe.level(first) not in split.reserved
    probe.close()
    assert "| cartpole | as is |" in (out / "search.md").read_text()


@needs_sb3
def test_a_variant_is_measured_on_validation_levels_only_paired_by_seed(tmp_path, capsys):
    import variant_check

    out = tmp_path / "variants"
    # The variant's rollouts go through the process backend: a loop in a worker of its own starts processes (as textq's do).
    changes = ["--set", "step_out=true", "--set", "backend=process", "--set", "rollout_batch=1"]
    args = ["frozenlake", "--quick", *changes, "--arms", "original,rigger", "--seeds", "2", "-o", str(out)]
    assert variant_check.main(args) == 0
    result = json.loads((out / "frozenlake" / "variant-backend=process,rollout_batch=1,step_out=true.json").read_text())
    assert [r["seed"] for r in result["rows"]] == [100, 101]
    assert result["variant"] == {"step_out": True, "backend": "process", "rollout_batch": 1}
    assert all(set(r["plain"]["validation"]) == {"original", "rigger"} for r in result["rows"])
    assert not list(out.glob("**/heldout-*"))  # no held-out level was played by either run
    assert "rigger, variant - plain:" in capsys.readouterr().out
    capsys.readouterr()
    # A typo is refused (not run as a plain loop under another name), and so is a value out of bounds: exit 2, one line.
    for change, message in (("step_out", "FIELD=VALUE"), ("stepout=true", "no LoopConfig field stepout"), ("rounds=0", "--set rounds: ")):
        with pytest.raises(SystemExit) as refused:
            variant_check.main(["frozenlake", "--set", change, "-o", str(tmp_path / "refused")])
        assert refused.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    with pytest.raises(SystemExit) as refused:  # a label is a folder name
        variant_check.main(["frozenlake", "--set", "step_out=true", "--label", "../elsewhere", "-o", str(tmp_path / "refused")])
    assert refused.value.code == 2 and "--label: got '../elsewhere'" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()


def test_the_minigrid_step_benchmark_checks_the_observations_and_times_both_ways(tmp_path, capsys):
    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks" / "perf"))
    import minigrid_step

    assert minigrid_step.main(["--steps", "300", "--repeats", "1", "--out", str(tmp_path / "m.json")]) == 0
    figures = json.loads((tmp_path / "m.json").read_text())["figures"]
    assert set(figures) == set(minigrid_step.ENVS)
    assert all(f["us_per_step"]["stock"] > 0 and f["us_per_step"]["fast"] > 0 for f in figures.values())
    assert "identical observations" in capsys.readouterr().out


def test_a_run_without_the_rigger_arm_names_its_differences_by_the_arm_it_has(tmp_path, monkeypatch):
    # The hard tier's dr runs train original and dr only: their report must not call dr's gain "rigger − original".
    suite = tmp_path / "suite"
    suite.mkdir()
    spec = {"env_id": "MiniGrid-Dynamic-Obstacles-Random-6x6-v0"}
    (suite / "tiny.json").write_text(json.dumps({"name": "tiny", "domain": "hazards", "title": "a tiny smoke benchmark", "spec": spec}))
    monkeypatch.setattr(heldout, "QUICK", {**heldout.QUICK, "rounds": 1, "budget_steps": 256, "eval_episodes": 10, "val_episodes": 10})
    out = tmp_path / "out"
    assert heldout.main(["--quick", "--seeds", "2", "--arms", "original,dr", "--suite", str(suite), "-o", str(out)]) == 0
    report = (out / "results.md").read_text()
    assert "| dr − original (95% CI) |" in report and "| dr env steps ÷ original |" in report
    assert "rigger − original (95% CI)" not in report


def test_the_credit_replay_names_the_kept_seeds_a_margin_could_change(tmp_path, capsys):
    # benchmarks/credit_replay.py: the margin variants rerun the seeds it calls changed or maybe and reuse the others.
    import credit_replay

    kept = Path(__file__).parents[2] / "benchmarks" / "results" / "shadow-stepin-hard"
    assert credit_replay.main([str(kept / "doorkey8"), "--json"]) == 0
    verdicts = {int(k): v for k, v in json.loads(capsys.readouterr().out).items()}
    assert [s for s, v in verdicts.items() if v["verdict"] == "changed"] == [1, 2, 5, 6, 8, 9]
    assert {s for s, v in verdicts.items() if v["verdict"] == "unchanged"} == {0, 3, 4, 7}
    # seed 8's round-3 fallback: the shadow ahead by one level in 50, within one standard error whatever the levels
    assert verdicts[8]["at"] == {"round": 3, "arm": "rigger", "chunk": 0, "curriculum": 0.04, "original": 0.06}
    assert credit_replay.main([str(kept / "multiroom"), "--margin", "1"]) == 0  # the shadow never won a MultiRoom chunk
    assert "unchanged: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9" in capsys.readouterr().out
    assert credit_replay.main([str(kept / "doorkey8"), "--margin", "0"]) == 0  # no margin: every kept run is itself
    assert "changed: none" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        credit_replay.main([str(tmp_path)])
    assert exit_info.value.code == 2 and "holds no seeds.json" in capsys.readouterr().err
    low, high = credit_replay.se_bounds(0.04, 0.06, 50)
    assert low == pytest.approx(0.02) and high == pytest.approx(0.0451, abs=1e-4)  # one disagreement, or five
