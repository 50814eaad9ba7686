"""What HumanEvalFix costs: judging one submission, and building the whole task set.

Judges submissions on the subprocess backend, side by side in one run: for each of a sample
of HumanEvalFix levels, the level's buggy module and its canonical solution through the
check judge (two sandbox runs: the agent's calls, then the trusted test), taking turns with
CodeRepair-v0's probe judge on its own tasks for scale. Then, with ``--build``, builds the
task set from scratch (every mutant judged in the sandbox) into a temporary cache and times it.
Targets (issue 30): one judgment at most 1 s at the median; the build at most 5 min on 2 cores.
Run: ``python benchmarks/perf/humaneval_judge.py --build``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _common import write_result

from envharness.envs.code_repair import judge_task
from envharness.envs.code_tasks import TASKS
from envharness.envs.humaneval import build_task_set, task_set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, default=60, help="HumanEvalFix levels judged (every k-th of the task set)")
    parser.add_argument("--build", action="store_true", help="also build the whole task set from scratch and time it")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "humaneval_judge.json"))
    args = parser.parse_args()

    levels = task_set().tasks
    sample = levels[:: max(1, len(levels) // args.levels)][: args.levels]
    check_times: list[float] = []
    probe_times: list[float] = []
    for index, task in enumerate(sample):
        for source in (task.source, task.trusted):
            started = time.perf_counter()
            judge_task(task, {task.path: source}, fresh=True)
            check_times.append(time.perf_counter() - started)
        small = TASKS[index % len(TASKS)]  # CodeRepair-v0's judge, taking turns, for scale
        started = time.perf_counter()
        judge_task(small, {small.path: small.source}, fresh=True)
        probe_times.append(time.perf_counter() - started)
    figures: dict[str, object] = {
        "judgments": len(check_times),
        "check_judge_median_s": statistics.median(check_times),
        "check_judge_p90_s": sorted(check_times)[int(0.9 * len(check_times))],
        "probe_judge_median_s": statistics.median(probe_times),
        "check_over_probe_median": statistics.median(check_times) / statistics.median(probe_times),
    }
    print(f"HumanEvalFix judge: median {figures['check_judge_median_s']:.3f} s, 90th percentile {figures['check_judge_p90_s']:.3f} s")
    print(f"  over {len(check_times)} judgments (buggy and canonical modules of {len(sample)} levels), subprocess backend")
    print(f"CodeRepair-v0 judge, same run: median {figures['probe_judge_median_s']:.3f} s (ratio {figures['check_over_probe_median']:.2f})")
    if args.build:
        built = build_task_set()
        figures |= {
            "build_s": built.seconds,
            "levels": len(built.tasks),
            "problems": len({t.problem for t in built.tasks}),
            "refused": [f"{r.problem}: {r.why}" for r in built.refused],
        }
        print(
            f"build: {built.seconds:.0f} s for {figures['levels']} levels of {figures['problems']} problems, {len(built.refused)} refused"
        )
    write_result(args.out, "humaneval_judge", {"levels": len(sample), "build": args.build}, figures)


if __name__ == "__main__":
    main()
