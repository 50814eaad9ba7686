"""Master seeds: independent learners per seed, an interval across seeds, parallel runs, resuming with more seeds, a failing seed named."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from loop_cases import SMALL

from envharness import HarnessSpec
from envrigger.data import TrajectoryError
from envrigger.loop import LoopConfig, run_loop


def test_seeds_train_independent_learners_and_the_interval_is_across_seeds(tmp_path):
    from envrigger.loop import run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    result = run_seeds(tmp_path / "multi", config, seeds=3)
    dirs = [tmp_path / "multi" / f"seed-{seed}" for seed in (0, 1, 2)]
    assert result["seeds"] == [0, 1, 2]
    assert [json.loads((d / "loop.json").read_text())["seed"] for d in dirs] == [0, 1, 2]
    assert len({(d / "rigger-round-1.json").read_text() for d in dirs}) == 3  # each seed trains from scratch
    finals = [run_loop(d)["final"]["arms"] for d in dirs]  # (resuming a finished run returns its result)
    rigger = [f["rigger"]["heldout"]["success"] for f in finals]
    original = [f["original"]["heldout"]["success"] for f in finals]
    assert result["arms"]["rigger"]["success"]["mean"] == pytest.approx(np.mean(rigger)) and result["arms"]["rigger"]["success"]["n"] == 3
    assert result["difference"]["original"]["mean"] == pytest.approx(np.mean(rigger) - np.mean(original))
    low, high = result["arms"]["rigger"]["success"]["ci"]
    assert low <= result["arms"]["rigger"]["success"]["mean"] <= high
    assert run_seeds(tmp_path / "multi", None) == result  # a finished multi-seed run resumes to the same result


def test_seeds_in_parallel_processes_give_the_same_result_as_one_by_one(tmp_path):
    from envrigger.loop import SeedsRun, run_many, run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    alone = run_seeds(tmp_path / "alone", config, seeds=3)
    lake8 = config.model_copy(update={"spec": HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})})
    runs = [SeedsRun(out=tmp_path / "together", config=config, seeds=3), SeedsRun(out=tmp_path / "other", config=lake8, seeds=1)]
    together, other = run_many(runs, jobs=2)
    assert together == alone  # same held-out success, rounds and spend per arm and seed
    for seed in range(3):
        assert (tmp_path / "together" / f"seed-{seed}" / "final.json").read_text() == (
            tmp_path / "alone" / f"seed-{seed}" / "final.json"
        ).read_text()
    assert (
        other["seeds"] == [0]
        and json.loads((tmp_path / "other" / "seed-0" / "loop.json").read_text())["spec"]["env_kwargs"]["map_name"] == "8x8"
    )


def test_resuming_with_more_seeds_adds_the_next_ones_and_keeps_the_finished(tmp_path):
    from envrigger.loop import run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    first = run_seeds(tmp_path / "multi", config, seeds=2)
    kept = {seed: (tmp_path / "multi" / f"seed-{seed}" / "final.json").stat().st_mtime_ns for seed in (0, 1)}
    more = run_seeds(tmp_path / "multi", None, seeds=3)
    assert first["seeds"] == [0, 1] and more["seeds"] == [0, 1, 2]
    assert {seed: (tmp_path / "multi" / f"seed-{seed}" / "final.json").stat().st_mtime_ns for seed in (0, 1)} == kept
    assert json.loads((tmp_path / "multi" / "seeds.json").read_text())["seeds"] == 3
    assert run_seeds(tmp_path / "multi", None, seeds=1) == more  # asking for fewer never drops finished seeds


def test_a_kept_record_of_finished_seeds_resumes_and_adds_seeds(tmp_path):
    """What benchmarks/results keeps of a seed (loop.json, library.db, final.json) is enough to extend the run later."""
    from envrigger.loop import run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    first = run_seeds(tmp_path / "multi", config, seeds=1)
    kept = {"loop.json", "library.db", "final.json"}
    for path in (tmp_path / "multi" / "seed-0").iterdir():  # the learners, rounds and stores are not kept
        if path.name not in kept:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    more = run_seeds(tmp_path / "multi", None, seeds=2)
    assert first["seeds"] == [0] and more["seeds"] == [0, 1]
    assert (tmp_path / "multi" / "seed-1" / "final.json").is_file() and not (tmp_path / "multi" / "seed-0" / "round-1").exists()


def test_a_failing_seed_in_parallel_is_named_and_the_others_finish_and_resume(tmp_path):
    from envrigger.loop import run_seeds

    config = LoopConfig(**{**SMALL, "rounds": 1, "candidates_per_round": 1, "collect_episodes": 20, "eval_episodes": 20})
    multi = tmp_path / "multi"
    multi.mkdir()
    (multi / "seed-1").write_text("not a directory")  # this seed's run cannot start
    with pytest.raises(TrajectoryError, match=r"1 master seed\(s\) failed: .*seed-1 \(exit code 1\).*run the same command again"):
        run_seeds(multi, config, seeds=2, jobs=2)
    assert (multi / "seed-0" / "final.json").is_file()  # the other seed ran to the end
    (multi / "seed-1").unlink()
    result = run_seeds(multi, None, jobs=2)  # resumes: seed 0 is read back, seed 1 runs
    assert result["seeds"] == [0, 1] and (multi / "seed-1" / "final.json").is_file()
    with pytest.raises(TrajectoryError, match="--jobs: got 0"):
        run_seeds(multi, None, jobs=0)


def test_a_multi_seed_run_saved_before_todays_defaults_resumes_with_the_settings_it_started_with(tmp_path):
    from envrigger.loop.seeds import _plan_seeds

    old = json.loads(LoopConfig(**SMALL).model_dump_json())
    for field in ("credit_baseline", "step_in"):  # seeds.json from before 2026-12-06 has neither
        del old[field]
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "seeds.json").write_text(json.dumps({"config": {**old, "credit_chunks": 2}, "seeds": 2}))
    config, seeds = _plan_seeds(tmp_path, None, 2)
    assert (config.credit_baseline, config.step_in, config.credit_chunks, seeds) == ("fork", False, 2, 2)
    assert (LoopConfig(**SMALL).credit_baseline, LoopConfig(**SMALL).step_in) == ("shadow", True)
