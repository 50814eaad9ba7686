"""Wall time of one loop round by stage: collect, diagnose, propose, validate, train, evaluate.

Runs ``run_loop`` for two rounds of the rigger arm (the last round of a run trains and is
evaluated, but diagnoses nothing, so round 1 is the one with every stage) and prints round
1's stage times from the run's own ``stage_seconds``, each as a share of the round, once per
rollout backend (serial and the process pool with 2 workers, run one after the other with
the same seeds). ``evaluate`` is the round's validation-level evaluation that picks rounds.
Writes ``--out`` (default ``loop_round.json``). Run: ``python benchmarks/perf/loop_round.py``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envharness import HarnessSpec
from envrigger.loop import LoopConfig, run_loop
from envrigger.rollout import close_workers

sys.path.insert(0, str(Path(__file__).parent))
from _common import write_result  # noqa: E402

STAGES = ("train", "collect", "diagnose", "propose", "validate", "evaluate")


@dataclass
class Config:
    env_id: str = "MiniGrid-DoorKey-6x6-v0"  # the suite's navigation benchmark (5x5 has too few levels to hold out)
    learner: str = "ppo"
    budget_steps: int = 8_192
    collect_episodes: int = 40
    val_episodes: int = 40
    eval_episodes: int = 20
    candidates_per_round: int = 4
    backends: list[str] = field(default_factory=lambda: ["serial", "process"])
    workers: int = 2
    seed: int = 0


def one_round(config: Config, backend: str, scratch: Path) -> dict[str, Any]:
    loop = LoopConfig(
        spec=HarnessSpec(env_id=config.env_id),
        learner=config.learner,
        arms=["rigger"],
        rounds=2,
        budget_steps=config.budget_steps,
        collect_episodes=config.collect_episodes,
        val_episodes=config.val_episodes,
        eval_episodes=config.eval_episodes,
        candidates_per_round=config.candidates_per_round,
        seed=config.seed,
        backend=backend,
        workers=config.workers,
    )
    result = run_loop(scratch / backend, loop)
    first = result["rounds"][0]
    stages = dict(first["stage_seconds"]["rigger"])
    stages["evaluate"] = stages.pop("select")
    interaction = first["arms"]["rigger"]["interaction"]
    return {"round_seconds": first["wall_time"], "stages": stages, "interaction": interaction, "candidates": first.get("candidates")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="loop_round.json")
    args = parser.parse_args(argv)
    config = Config()
    scratch = Path(tempfile.mkdtemp(prefix="loop-round-"))
    figures: dict[str, Any] = {}
    try:
        for backend in config.backends:
            figures[backend] = one_round(config, backend, scratch)
            close_workers()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"{config.env_id}, learner {config.learner}, {config.budget_steps:,} training steps, {config.candidates_per_round} candidates; "
        "round 1 of the rigger arm"
    )
    header = "".join(f"{b + ' (' + str(config.workers if b != 'serial' else 1) + ')':>22s}" for b in config.backends)
    print(f"  {'stage':10s}{header}")
    for stage in STAGES:
        cells = ""
        for backend in config.backends:
            row = figures[backend]
            seconds = row["stages"].get(stage, 0.0)
            cells += f"{seconds:12.1f} s ({seconds / row['round_seconds']:4.0%})"
        print(f"  {stage:10s}{cells}")
    print(f"  {'round':10s}" + "".join(f"{figures[b]['round_seconds']:12.1f} s       " for b in config.backends))
    if "serial" in figures and "process" in figures:
        ratio = figures["process"]["round_seconds"] / figures["serial"]["round_seconds"]
        figures["process_vs_serial_round"] = ratio
        print(f"  the process pool's round takes {ratio:.2f}x the serial round's time")
    write_result(args.out, "loop_round", asdict(config), figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
