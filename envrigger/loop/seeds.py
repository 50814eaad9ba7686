"""Claims across training seeds: one loop per master seed, several at once, and the interval across them.

Contains :func:`run_seeds`, :func:`run_many` (several multi-seed runs, ``jobs`` seeds at a
time, each in a spawned process) and :func:`across_seeds` (mean, 95% t interval and
paired differences per arm).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from envharness.reading import read_json
from envharness.transforms.base import field_bounds
from envharness.values import shown
from envrigger.data import TrajectoryError
from envrigger.loop.config import FIX_SAVED, LoopConfig
from envrigger.loop.levels import LevelSplit
from envrigger.loop.results import AcrossSeeds, FinalResults, RoundSummary
from envrigger.loop.run import one_writer, run_loop, save_json
from envrigger.stats import t_interval

COLLAPSED = 0.2  # held-out success below this on a seed: the arm collapsed there


def across_seeds(runs: dict[int, FinalResults]) -> AcrossSeeds:
    """Held-out success per arm across training seeds: mean, 95% t interval, paired differences.

    ``runs`` maps each master seed to its final results (:attr:`LoopResult.final`, ``final.json``). The interval is across
    seeds (each seed trains every arm from scratch), never across episodes of one run; the
    difference of ``rigger`` (or the last arm) against each other arm is paired by seed.
    Steps to success are the mean length of the successful held-out episodes; env steps
    are each arm's totals over all rounds (training, plus collection and validation for
    the rigger arm), averaged over seeds.

    Example:
        >>> def run(rigger, original):
        ...     arm = lambda s: {"round": 1, "validation": s, "interaction": {"train": 100, "total": 100},
        ...                      "heldout": {"success": s, "ci": [s, s], "episodes": 10, "steps_to_success": 10.0}}
        ...     return FinalResults.model_validate({"arms": {"original": arm(original), "rigger": arm(rigger)},
        ...                                         "levels": {"disjoint": True, "heldout": 10, "validation": 10}})
        >>> result = across_seeds({0: run(0.9, 0.5), 1: run(0.7, 0.5), 2: run(0.8, 0.6)})
        >>> d = result["difference"]["original"]
        >>> round(d["mean"], 2), [round(x, 2) for x in d["ci"]]
        (0.27, [-0.02, 0.55])
        >>> result["arms"]["original"]["collapsed"], across_seeds({0: run(0.9, 0.1)})["arms"]["original"]["collapsed"]
        (0, 1)
    """
    seeds = sorted(runs)
    arms = list(runs[seeds[0]].arms)
    finals = {arm: [runs[seed].arms[arm] for seed in seeds] for arm in arms}
    missing = [(arm, seed) for arm in arms for seed, f in zip(seeds, finals[arm], strict=True) if f.heldout is None]
    if missing:
        raise ValueError(f"across_seeds: {missing[0][0]} at master seed {missing[0][1]} played no held-out level (heldout off)")
    held = {arm: [f.heldout for f in finals[arm] if f.heldout is not None] for arm in arms}
    success = {arm: np.array([h.success for h in held[arm]]) for arm in arms}
    out: dict[str, Any] = {"seeds": seeds, "arms": {}, "difference": {}}
    for arm in arms:
        solved = [h.steps_to_success for h in held[arm] if h.steps_to_success is not None]
        out["arms"][arm] = {
            "success": t_interval(success[arm], (0.0, 1.0)),  # a rate: its interval stays inside [0, 1]
            "steps_to_success": float(np.mean(solved)) if solved else None,
            "env_steps": {k: float(np.mean([f.interaction.get(k, 0) for f in finals[arm]])) for k in ("train", "total")},
            "rounds": [f.round for f in finals[arm]],
            "collapsed": int((success[arm] < COLLAPSED).sum()),  # seeds where this arm learned next to nothing held out
        }
    focus = "rigger" if "rigger" in arms else arms[-1]
    out["focus"] = focus
    for arm in arms:
        if arm != focus:
            entry = t_interval(success[focus] - success[arm], (-1.0, 1.0))
            mine, theirs = out["arms"][focus]["steps_to_success"], out["arms"][arm]["steps_to_success"]
            entry["steps_to_success_change"] = (mine - theirs) / theirs if mine is not None and theirs else None
            out["difference"][arm] = entry
    return AcrossSeeds.model_validate({**out, "schema_version": AcrossSeeds.CURRENT})


class SeedsRun(BaseModel):
    """One multi-seed run for :func:`run_many`: its directory, its config (None resumes it), master seeds, a log label."""

    out: Path
    config: LoopConfig | None = None
    seeds: int = Field(1, ge=1)
    label: str = ""


def run_seeds(
    out: str | Path,
    config: LoopConfig | None,
    seeds: int = 1,
    on_round: Callable[[RoundSummary], None] | None = None,
    log: Callable[[str], None] = lambda message: None,
    jobs: int = 1,
    ray_address: str | None = None,
) -> AcrossSeeds:
    """Run (or, without ``config``, resume) one loop per master seed in ``out/seed-S``; returns :func:`across_seeds`.

    Master seeds are ``config.seed .. config.seed + seeds - 1``; each trains every arm's
    learner from scratch, so their spread is what an interval across training seeds needs.
    Resuming (``config`` None) with a larger ``seeds`` adds the next master seeds to the run.
    With ``jobs`` > 1, that many seeds train at once, each in its own process (see
    :func:`run_many`); every seed's result is the same as when the seeds run one by one.
    With ``ray_address``, the seeds are tasks on that Ray cluster instead (see :func:`run_many`).
    """
    return run_many([SeedsRun(out=Path(out), config=config, seeds=seeds)], jobs, on_round, log, ray_address)[0]


def run_many(
    runs: list[SeedsRun],
    jobs: int = 1,
    on_round: Callable[[RoundSummary], None] | None = None,
    log: Callable[[str], None] = lambda message: None,
    ray_address: str | None = None,
) -> list[AcrossSeeds]:
    """Run (or resume) several multi-seed runs, ``jobs`` master seeds at a time; returns each run's :func:`across_seeds`.

    With ``jobs`` = 1 the seeds run here, one after another. Otherwise each seed is a fresh
    process (``spawn``, like a separate ``envrigger run``), started in seed order across the
    runs (seed 0 of every run first), so a result is the same whatever ``jobs`` is; their
    log lines carry the run's label and the seed, and ``on_round`` must then be a module-level
    function (it is called in the seed's process). A seed that fails does not stop the
    others already running; once they end, the error names every failed seed, and calling
    again resumes where each stopped.

    With ``ray_address`` (``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``) every unfinished
    seed is a task on that Ray cluster (:mod:`envrigger.loop.ray_seeds`: it declares the
    CPUs it uses, a finished seed is never sent, a seed on a node that dies runs again),
    ``jobs`` is the cluster's to decide and ``on_round`` is not called.
    """
    if jobs < 1:
        raise TrajectoryError(f"--jobs: got {jobs}; give 1 or more processes")
    with contextlib.ExitStack() as stack:
        plans = []
        for run in runs:
            stack.enter_context(one_writer(run.out))
            plans.append((run, *_plan_seeds(run.out, run.config, run.seeds)))
        tasks = []  # (directory, config for a new loop or None to resume, label), seed-major
        for offset in range(max(seeds for _, _, seeds in plans)):
            for run, config, seeds in plans:
                if offset < seeds:
                    seed, where = config.seed + offset, run.out / f"seed-{config.seed + offset}"
                    fresh = None if (where / "loop.json").is_file() else config.model_copy(update={"seed": seed})
                    tasks.append((where, fresh, f"{run.label}master seed {seed}: "))
        if ray_address:
            from envrigger.loop.ray_seeds import run_seeds_on_ray

            run_seeds_on_ray(tasks, ray_address, log)
        elif jobs == 1:
            for where, fresh, label in tasks:
                log(f"{label}{where}")
                run_loop(where, fresh, on_round=on_round, log=_prefixed(log, label))
        else:
            _parallel(tasks, jobs, on_round, log)
        results: list[AcrossSeeds] = []
        for run, config, seeds in plans:
            finals = {seed: FinalResults.load(run.out / f"seed-{seed}" / "final.json") for seed in range(config.seed, config.seed + seeds)}
            result = across_seeds(finals)
            save_json(run.out / "result.json", result.dump())
            results.append(result)
        return results


def _prefixed(log: Callable[[str], None], label: str) -> Callable[[str], None]:
    return lambda message: log(label + message)


def _plan_seeds(out: Path, config: LoopConfig | None, seeds: int) -> tuple[LoopConfig, int]:
    """The config and seed count of the multi-seed run in ``out``: saved in ``seeds.json`` when new, read back when resumed.

    Resuming with more ``seeds`` than the run was started with extends it by the next master seeds; fewer never shrinks it.
    """
    plan = out / "seeds.json"
    if config is None:
        if not plan.exists():
            raise TrajectoryError(f"--resume: {out} holds no multi-seed run (no seeds.json)")
        saved = read_json(plan, dict, fix=FIX_SAVED, error=TrajectoryError)
        count = saved.get("seeds")
        if type(count) is not int or count < 1:
            raise TrajectoryError(f"{plan}: seeds: got {shown(count)}; give the number of master seeds (1 or more); {FIX_SAVED}")
        config = LoopConfig.saved(saved.get("config"), where=f"{plan}: config")
        _check_seeds(config, max(seeds, count))
        if seeds > count:  # asked for more master seeds than the run has: add the next ones
            save_json(plan, {**saved, "seeds": seeds})
        return config, max(seeds, count)
    if plan.exists():
        raise TrajectoryError(f"{out} already holds a multi-seed run; resume it with `envrigger run --resume {out}`")
    _check_seeds(config, seeds)
    LevelSplit.make(config.spec, config)  # an env without enough levels is refused before anything is written
    out.mkdir(parents=True, exist_ok=True)
    save_json(plan, {"config": json.loads(config.model_dump_json()), "seeds": seeds})
    return config, seeds


def _check_seeds(config: LoopConfig, seeds: int) -> None:
    """Refuse master seeds past the largest a config may hold: each seed's config is a copy with its seed, and must read back."""
    largest = int(field_bounds(LoopConfig.model_fields["seed"])[1])
    last = config.seed + seeds - 1
    if last > largest:
        raise TrajectoryError(
            f"--seeds: master seeds {config.seed}..{last} go past {largest}, the largest master seed; "
            f"start from --seed {max(largest - seeds + 1, 0)} or lower, or ask for fewer seeds"
        )


def _seed_process(where: str, fresh: str | None, label: str, on_round: Callable[[RoundSummary], None] | None) -> None:
    """One master seed in its own process: the loop in ``where``, its log lines on stdout with ``label``."""
    config = None if fresh is None else LoopConfig.model_validate_json(fresh)
    run_loop(where, config, on_round=on_round, log=lambda m: print(label + m, flush=True))


def _parallel(tasks: list[tuple[Path, LoopConfig | None, str]], jobs: int, on_round: Any, log: Callable[[str], None]) -> None:
    """Run every task in a process of its own, at most ``jobs`` at once; raise naming the seeds that failed."""
    import multiprocessing
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")
    waiting, failed = list(tasks), list[str]()
    running: dict[Any, tuple[Any, Path]] = {}
    try:
        while waiting or running:
            while waiting and len(running) < jobs and not failed:
                where, fresh, label = waiting.pop(0)
                log(f"{label}{where} (in a process of its own)")
                process = context.Process(
                    target=_seed_process,
                    args=(str(where), None if fresh is None else fresh.model_dump_json(), label, on_round),
                    name=f"envrigger {where}",
                )
                process.start()
                running[process.sentinel] = (process, where)
            if not running:
                break
            for sentinel in wait(list(running)):
                process, where = running.pop(sentinel)
                process.join()
                if process.exitcode != 0:
                    failed.append(f"{where} (exit code {process.exitcode})")
    finally:
        for process, _ in running.values():  # interrupted: a seed is resumable, so stop the rest
            process.terminate()
            process.join()
    if failed:
        raise TrajectoryError(
            f"{len(failed)} master seed(s) failed: {'; '.join(failed)}; their errors are in the log above; "
            "run the same command again to resume every unfinished seed"
        )
