"""One master seed of every suite benchmark, on an earlier revision and on a later one, one after the other: time and results.

The loop-cost figure of issue 33: ``benchmarks/heldout.py --seeds 1 --jobs 2`` runs in a git
worktree of ``--baseline`` (default: 91bc247, the code before the loop was made cheaper) and
then in one of ``--now`` (default: HEAD, so that editing the checkout meanwhile changes
nothing), each with its own code first on ``PYTHONPATH``, nothing else running between them, and
both on the suite's benchmark files with the same four arms written out (original, dr, plr,
rigger: the arms of the kept results, which the later suite extends to seven). Before either, the TextWorld games are generated into the cache, so neither
side pays for them. Prints each side's wall time, their ratio, and every arm's held-out
success and env steps per benchmark on both sides, marking any that differ (the gates did
not change, so they should all be equal). Beside the wall time it reports the CPU time of
every process of each side's run, which other work on the machine changes much less. Writes ``--out`` (default ``loop_cost.json``).
Takes about an hour on 2 cores. Run: ``python benchmarks/perf/loop_cost.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Config:
    baseline: str = "91bc247"  # the last commit before the loop was made cheaper (batched rollouts, MiniGrid's view)
    now: str = "HEAD"
    jobs: int = 2
    seeds: int = 1
    arms: tuple[str, ...] = ("original", "dr", "plr", "rigger")  # the arms of the suite's kept results, trained by both


def warm_textworld() -> None:
    """Generate every TextWorld game the suite's textworld benchmark can play, so neither side's time includes it."""
    from envharness.envs.textworld_cache import warm_cache

    kwargs = json.loads((ROOT / "benchmarks" / "suite" / "textworld.json").read_text())["spec"]["env_kwargs"]
    warm_cache(kwargs["challenge"], kwargs["levels"], kwargs["games_per_level"], workers=2)


def same_arms(suite: Path) -> None:
    """The suite's benchmark files with the arms written out, so that both revisions train the same arms."""
    suite.mkdir()
    for path in sorted((ROOT / "benchmarks" / "suite").glob("*.json")):
        (suite / path.name).write_text(json.dumps({**json.loads(path.read_text()), "arms": list(Config.arms)}))


def one_side(tree: Path, suite: Path, out: Path, config: Config) -> dict[str, Any]:
    """Run the suite from ``tree`` with ``tree``'s own packages; its wall time and each benchmark's per-arm results."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [
        sys.executable,
        str(tree / "benchmarks" / "heldout.py"),
        "--suite",
        str(suite),
        "--seeds",
        str(config.seeds),
        "--jobs",
        str(config.jobs),
        "-o",
        str(out),
    ]
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the run and every process it waited for
    cpu = (after.ru_utime + after.ru_stime) - (used.ru_utime + used.ru_stime)
    results: dict[str, Any] = {}
    for final_path in sorted(out.glob("*/seed-*/final.json")):
        final = json.loads(final_path.read_text())
        results[f"{final_path.parent.parent.name}/{final_path.parent.name}"] = {
            arm: {"heldout": a["heldout"]["success"], "round": a["round"], "env_steps": a["interaction"]["total"]}
            for arm, a in final["arms"].items()
        }
    return {"seconds": seconds, "cpu_seconds": cpu, "results": results}


def _resolve(rev: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], check=True, capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=Config.baseline, help="the revision to compare with (default %(default)s)")
    parser.add_argument("--now", default=Config.now, help="the revision measured against it (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=Config.jobs)
    parser.add_argument("--out", default="loop_cost.json")
    args = parser.parse_args(argv)
    revisions = {side: _resolve(rev) for side, rev in (("baseline", args.baseline), ("now", args.now))}
    config = Config(baseline=revisions["baseline"], now=revisions["now"], jobs=args.jobs)
    scratch = Path(tempfile.mkdtemp(prefix="loop-cost-"))
    for side, rev in revisions.items():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(scratch / side), rev], check=True)
    try:
        warm_textworld()
        same_arms(scratch / "suite")
        sides = {side: one_side(scratch / side, scratch / "suite", scratch / f"out-{side}", config) for side in revisions}
    finally:
        for side in revisions:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(scratch / side)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    ratio = sides["now"]["seconds"] / sides["baseline"]["seconds"]
    cpu_ratio = sides["now"]["cpu_seconds"] / sides["baseline"]["cpu_seconds"]
    print(f"one master seed of every suite benchmark, --jobs {config.jobs} (CPU time: every process of the run, summed)")
    for side, label in (("baseline", f"baseline ({config.baseline[:7]})"), ("now", f"now ({config.now[:7]})     ")):
        print(f"  {label}: {sides[side]['seconds'] / 60:6.1f} min wall, {sides[side]['cpu_seconds'] / 60:6.1f} min CPU")
    print(f"  now / baseline: {ratio:.2f}x the wall time, {cpu_ratio:.2f}x the CPU time")
    differ = []
    for run, arms in sides["baseline"]["results"].items():
        now = sides["now"]["results"].get(run, {})
        for arm, before in arms.items():
            after = now.get(arm)
            same = after == before
            differ += [] if same else [f"{run} {arm}"]
            shown = "same" if same else f"now {after}"
            print(f"  {run:22s} {arm:10s} held-out {before['heldout']:.3f}  env steps {before['env_steps']:>9,}  {shown}")
    print(f"  {'every result identical' if not differ else 'differ: ' + ', '.join(differ)}")
    write_result(args.out, "loop_cost", asdict(config), {**sides, "ratio": ratio, "cpu_ratio": cpu_ratio, "differ": differ})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
