"""Choosing the hard tier: the original arm's learning curve on probe levels, before any arm is compared.

The hard tier is meant for envs where training on the original env teaches too little at the
budget, so that a curriculum has room to help. This script decides which candidates of
``benchmarks/hard`` qualify, looking only at what the ``original`` arm would do:

- each candidate trains PPO like the original arm (its learner settings, rounds and steps
  per round, the loop's training seeds) from ``--seeds`` learner seeds of its own (100, 101,
  ...; never a master seed);
- after every round the learner is scored on ``--probe`` probe levels: seeds from 8,000,000
  on whose levels are neither held-out nor validation (by level id, with the loop's own
  :class:`~envrigger.loop.LevelSplit`);
- the same probe levels are searched with the env's own step (the solvability search): the
  share of them that can be won within the step limit;
- a candidate qualifies when its mean probe success at the full budget is at most 0.3 and
  at least 90% of its probe levels are winnable.

Writes ``OUT/probe.json`` and ``OUT/probe.md``. Run: ``python benchmarks/hard_probe.py
[--only NAME ...] [--seeds 2] [--probe 100] [--jobs 2] [-o results/hard-probe]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from heldout import load_suite  # noqa: E402
from learner_search import LEARNER_SEED, PROBE_SEED  # noqa: E402  (the same probe levels and learner seeds)

HARD = Path(__file__).parent / "hard"
MAX_SUCCESS = 0.3  # the original arm's probe success at the budget may be at most this
MIN_WINNABLE = 0.9  # and at least this share of the probe levels must be winnable


def curve(task: dict[str, Any]) -> dict[str, Any]:
    """Train one learner like the original arm and score it on the probe levels after every round (in a process of its own)."""
    from envrigger.loop import LoopConfig
    from envrigger.loop.learners import make_learner
    from envrigger.loop.samplers import Fixed
    from envrigger.loop.train import Arm, train_arm
    from envrigger.rollout import backend_for, rollout

    config = LoopConfig.model_validate(task["config"])
    probe = config.spec.build()
    started = time.perf_counter()
    learner = make_learner(config.learner, probe, config.seed, **config.learner_params)
    arm = Arm("original", learner)
    points, steps = [], 0
    for number in range(1, config.rounds + 1):
        steps += train_arm(arm, [config.spec], Fixed(), config, number, set(task["reserved"]))["steps"]
        policy = arm.learner.policy()
        with tempfile.TemporaryDirectory() as scratch:
            store = rollout(
                config.spec, policy, seeds=task["probe_seeds"], out=Path(scratch) / "p", **backend_for(policy, "serial", None, 32)
            )
            success = store.episodes_table(["success"]).column("success").to_pylist()
        points.append({"train_steps": steps, "probe_success": sum(success) / len(success)})
    probe.close()
    return {"benchmark": task["benchmark"], "seed": task["seed"], "curve": points, "seconds": time.perf_counter() - started}


def winnable(task: dict[str, Any]) -> dict[str, Any]:
    """The share of the probe levels a search with the env's own step wins within the step limit."""
    from envharness.spec import HarnessSpec
    from envrigger.loop.solvability import search_levels

    found = search_levels(HarnessSpec.model_validate(task["spec"]), task["probe_seeds"])
    return {"benchmark": task["benchmark"], "searched": len(found), "winnable": found.count(True), "undecided": found.count(None)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="candidate names (default: every file in benchmarks/hard)")
    parser.add_argument("--seeds", type=int, default=2, help="learner seeds per candidate (default 2)")
    parser.add_argument("--probe", type=int, default=100, help="probe levels (default 100)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="learners trained at once (default 2)")
    parser.add_argument("-o", "--out", type=Path, default=Path("results") / "hard-probe")
    args = parser.parse_args(argv)
    from envrigger.loop import LevelSplit
    from envrigger.loop.levels import first_free

    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    tasks, searches = [], []
    candidates = load_suite(HARD, only=args.only)
    for benchmark in candidates:
        base = benchmark.config()
        split = LevelSplit.make(base.spec, base)
        seeds = first_free(base.spec, range(PROBE_SEED, PROBE_SEED + 20 * args.probe), split.reserved, args.probe)
        searches.append({"benchmark": benchmark.name, "spec": base.spec.model_dump(mode="json"), "probe_seeds": seeds})
        for seed in range(LEARNER_SEED, LEARNER_SEED + args.seeds):
            config = base.model_copy(update={"seed": seed})
            tasks.append({"benchmark": benchmark.name, "seed": seed, "config": json.loads(config.model_dump_json()),
                          "reserved": sorted(split.reserved), "probe_seeds": seeds})  # fmt: skip
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        searched = {row["benchmark"]: row for row in pool.map(winnable, searches)}
        rows = []
        for row in pool.imap_unordered(curve, tasks):
            rows.append(row)
            print(
                f"[{len(rows)}/{len(tasks)}] {row['benchmark']} seed {row['seed']}: "
                + ", ".join(f"{p['probe_success']:.2f}" for p in row["curve"])
            )
    lines = [
        "# The hard tier, chosen on the original arm's learning curve",
        "",
        f"`python benchmarks/hard_probe.py --seeds {args.seeds} --probe {args.probe}`: PPO trained like the original arm from "
        f"{args.seeds} learner seeds, scored after every round on {args.probe} probe levels that are neither held-out nor "
        f"validation; a candidate qualifies with mean probe success at the budget ≤ {MAX_SUCCESS} and ≥ {MIN_WINNABLE:.0%} of "
        "the probe levels winnable (the search with the env's own step).",
        "",
        "| candidate | env | budget per arm | probe success by round (mean over seeds) | at the budget: mean [min, max] | winnable | minutes per learner | qualifies |",
        "|---|---|---|---|---|---|---|---|",
    ]
    result: dict[str, Any] = {"seeds": args.seeds, "probe": args.probe, "candidates": {}}
    for benchmark in candidates:
        mine = [r for r in rows if r["benchmark"] == benchmark.name]
        by_round = [statistics.fmean(r["curve"][i]["probe_success"] for r in mine) for i in range(len(mine[0]["curve"]))]
        final = [r["curve"][-1]["probe_success"] for r in mine]
        found = searched[benchmark.name]
        share = found["winnable"] / found["searched"]
        qualifies = by_round[-1] <= MAX_SUCCESS and share >= MIN_WINNABLE
        minutes = statistics.fmean(r["seconds"] for r in mine) / 60
        result["candidates"][benchmark.name] = {"by_round": by_round, "final": final, "search": found, "qualifies": qualifies, "rows": mine}
        lines.append(
            f"| {benchmark.name} | {benchmark.spec.env_id} | {benchmark.rounds} × {benchmark.budget_steps:,} | "
            + " → ".join(f"{v:.2f}" for v in by_round)
            + f" | {by_round[-1]:.2f} [{min(final):.2f}, {max(final):.2f}] | {found['winnable']}/{found['searched']} | {minutes:.1f} | {'yes' if qualifies else 'no'} |"
        )
    result["wall_time"] = time.perf_counter() - started
    lines += [
        "",
        f"Wall time {result['wall_time'] / 60:.1f} min with --jobs {args.jobs} on {os.cpu_count()} CPUs (other work sharing them).",
    ]
    (args.out / "probe.json").write_text(json.dumps(result, indent=2))
    (args.out / "probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
