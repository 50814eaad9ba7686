"""The learner's settings, chosen once per benchmark on probe levels, then the same for every arm.

PPO collapses on single seeds (the original arm of DoorKey-6x6 ranged 0.085-0.995 held-out
over five seeds), and a collapse in one arm and not another decides a paired difference
more than any curriculum does. So before arms are compared, each PPO benchmark of
``benchmarks/suite`` gets its PPO settings from this small search, and every arm then
trains with them:

- the candidates (:data:`SETTINGS`) are the benchmark's own settings and four changes of one
  knob each: more sub-envs, longer rollouts, more entropy, a lower learning rate;
- each trains like the ``original`` arm (the original env, the benchmark's rounds and steps
  per round, the loop's training seeds) from ``--seeds`` learner seeds of its own (100, 101,
  ...; never a master seed of the suite);
- each trained learner is scored on ``--probe`` *probe levels*: seeds from 8,000,000 on,
  skipping every seed whose level is held-out or validation (by level id, with the loop's
  own :class:`~envrigger.loop.LevelSplit`), so no choice looks at a level that later
  picks a round or is held out;
- the choice is the setting with the best mean probe success minus its standard
  deviation across seeds (reliability counts as much as the mean); ties go to the
  benchmark's own settings.

Writes ``OUT/search.json`` and ``OUT/search.md``; ``--write-suite`` stores each choice as
the benchmark's ``learner_params`` in its suite file. Benchmarks whose learner is not PPO
(TextWorld's ``textq``) are not searched. Run: ``python benchmarks/learner_search.py
[--only NAME ...] [--seeds 3] [--jobs 2] [-o results/learner-search]``.
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
from heldout import SUITE, load_suite  # noqa: E402

PROBE_SEED = 8_000_000  # above the suite's training seeds (4M + 1M per round, three rounds) and every other range
SETTINGS: dict[str, dict[str, Any]] = {
    "as is": {},
    "16 sub-envs": {"n_envs": 16},
    "256-step rollouts": {"n_steps": 256},
    "entropy 0.05": {"ent_coef": 0.05},
    "learning rate 1e-4": {"learning_rate": 1e-4},
}
LEARNER_SEED = 100


def train_and_probe(task: dict[str, Any]) -> dict[str, Any]:
    """Train one learner like the original arm and score it on the probe levels (runs in a process of its own)."""
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
    steps = sum(
        train_arm(arm, [config.spec], Fixed(), config, number, set(task["reserved"]))["steps"] for number in range(1, config.rounds + 1)
    )
    policy = learner.policy()
    with tempfile.TemporaryDirectory() as scratch:
        store = rollout(
            config.spec, policy, seeds=task["probe_seeds"], out=Path(scratch) / "probe", **backend_for(policy, "serial", None, 32)
        )
        success = store.episodes_table(["success"]).column("success").to_pylist()
    probe.close()
    return {**{k: task[k] for k in ("benchmark", "setting", "seed")}, "probe_success": sum(success) / len(success), "train_steps": steps,
            "seconds": time.perf_counter() - started}  # fmt: skip


def plan(benchmark: Any, seeds: int, probes: int, quick: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The search's tasks for one benchmark, and what they share (its probe seeds)."""
    from envrigger.loop import LevelSplit
    from envrigger.loop.levels import first_free

    base = benchmark.config()
    if quick:
        base = base.model_copy(update={"rounds": 1, "budget_steps": 512})
    split = LevelSplit.make(base.spec, base)
    probe_seeds = first_free(base.spec, range(PROBE_SEED, PROBE_SEED + 20 * probes), split.reserved, probes)
    tasks = []
    for name, change in SETTINGS.items():
        for seed in range(LEARNER_SEED, LEARNER_SEED + seeds):
            config = base.model_copy(update={"seed": seed, "learner_params": {**base.learner_params, **change}})
            tasks.append({"benchmark": benchmark.name, "setting": name, "seed": seed, "config": json.loads(config.model_dump_json()),
                          "reserved": sorted(split.reserved), "probe_seeds": probe_seeds})  # fmt: skip
    return tasks, {"probe_seeds": len(probe_seeds), "first_probe_seed": probe_seeds[0]}


def choose(rows: list[dict[str, Any]]) -> tuple[str, dict[str, dict[str, float]]]:
    """Each setting's mean, spread and score (mean - sd) across seeds, and the chosen setting (ties: as is)."""
    table = {}
    for name in SETTINGS:
        values = [r["probe_success"] for r in rows if r["setting"] == name]
        mean, sd = statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0
        table[name] = {"mean": mean, "sd": sd, "score": mean - sd, "min": min(values), "max": max(values)}
    best = max(table, key=lambda name: (round(table[name]["score"], 9), name == "as is"))
    return best, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="benchmark names (default: every PPO benchmark of the suite)")
    parser.add_argument("--seeds", type=int, default=3, help="learner seeds per setting (default 3)")
    parser.add_argument("--probe", type=int, default=100, help="probe levels each learner is scored on (default 100)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="learners trained at once (default 2)")
    parser.add_argument("-o", "--out", type=Path, default=Path("results") / "learner-search")
    parser.add_argument("--write-suite", action="store_true", help="store each benchmark's choice as its learner_params in its suite file")
    parser.add_argument("--quick", action="store_true", help="512 training steps per learner: a smoke test of the script, not a result")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error("--seeds: give 2 or more, so that a spread across seeds exists")
    if args.write_suite and args.quick:
        parser.error("--write-suite: a --quick search is a smoke test; run the full search to choose settings")
    benchmarks = [b for b in load_suite(only=args.only) if b.learner == "ppo"]
    if not benchmarks:
        parser.error("--only: none of these benchmarks trains PPO; the search covers PPO's settings")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tasks, probes = [], {}
    for benchmark in benchmarks:
        more, probes[benchmark.name] = plan(benchmark, args.seeds, args.probe, args.quick)
        tasks += more
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        rows = []
        for row in pool.imap_unordered(train_and_probe, tasks):
            rows.append(row)
            print(
                f"[{len(rows)}/{len(tasks)}] {row['benchmark']} {row['setting']} seed {row['seed']}: probe success {row['probe_success']:.2f}"
            )
    result: dict[str, Any] = {"settings": SETTINGS, "seeds": args.seeds, "probe": probes, "benchmarks": {}, "rows": rows}
    lines = [
        "# Learner settings, chosen on probe levels",
        "",
        f"`python benchmarks/learner_search.py --seeds {args.seeds} --probe {args.probe}`: PPO trained like the original arm "
        f"(each benchmark's full budget) from {args.seeds} learner seeds per setting, scored on {args.probe} probe levels "
        "that are neither held-out nor validation; chosen by mean − sd across seeds.",
        "",
        "| benchmark | setting | probe success (mean) | sd | min | max | mean − sd | chosen |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for benchmark in benchmarks:
        best, table = choose([r for r in rows if r["benchmark"] == benchmark.name])
        result["benchmarks"][benchmark.name] = {
            "chosen": best,
            "learner_params": {**benchmark.learner_params, **SETTINGS[best]},
            "table": table,
        }
        for name, row in table.items():
            mark = "**chosen**" if name == best else ""
            lines.append(
                f"| {benchmark.name} | {name} | {row['mean']:.3f} | {row['sd']:.3f} | {row['min']:.2f} | {row['max']:.2f} | {row['score']:.3f} | {mark} |"
            )
        if args.write_suite:
            path = SUITE / f"{benchmark.name}.json"
            data = json.loads(path.read_text())
            data["learner_params"] = result["benchmarks"][benchmark.name]["learner_params"]
            path.write_text(json.dumps(data, indent=2) + "\n")
    result["wall_time"] = time.perf_counter() - started
    lines += ["", f"Wall time {result['wall_time'] / 60:.1f} min with --jobs {args.jobs} on {os.cpu_count()} CPUs."]
    (args.out / "search.json").write_text(json.dumps(result, indent=2))
    (args.out / "search.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
