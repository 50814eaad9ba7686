"""How fast `envrigger diagnose` reads a run, and how much memory it needs.

Writes synthetic runs of 1M and 10M transitions (episodes of 20-200 steps on a 10x10
grid: wandering, oscillation, no-ops, blocked actions, timeouts and lava deaths mixed in),
then diagnoses each in a fresh process pinned to one core, and prints transitions per
second, wall time and peak resident memory side by side, with the 10M/1M ratios and the
targets (10M in under 60 s, peak under 2 GiB).

Run: ``python benchmarks/diagnose_speed.py [--sizes 1000000 10000000] [--dir /tmp/diag-bench]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from envrigger.data import EPISODE_SCHEMA, STEP_SCHEMA, TrajectoryStore


@dataclass
class Config:
    sizes: tuple[int, ...] = (1_000_000, 10_000_000)
    steps_per_part: int = 500_000
    seed: int = 0
    target_seconds: float = 60.0
    target_peak_gib: float = 2.0


def synthetic_run(path: Path, transitions: int, config: Config) -> TrajectoryStore:
    """A run of about ``transitions`` steps, written part by part (never all in memory)."""
    rng = np.random.default_rng(config.seed)
    store = TrajectoryStore.create(path, meta={"synthetic": True})
    positions = np.array([json.dumps([x, y, d]) for x in range(10) for y in range(10) for d in range(4)], dtype=object)
    digests = np.array([f"{i:016x}" for i in range(400)], dtype=object)
    actions = np.array([str(a) for a in range(7)], dtype=object)
    written, episode_id = 0, 0
    while written < transitions:
        lengths = rng.integers(20, 201, size=config.steps_per_part // 110)
        lengths = (
            lengths[np.cumsum(lengths) <= min(config.steps_per_part, transitions - written)]
            if written + lengths.sum() > transitions
            else lengths
        )
        if len(lengths) == 0:
            lengths = np.array([transitions - written])
        n, k = int(lengths.sum()), len(lengths)
        ids = np.repeat(np.arange(episode_id, episode_id + k), lengths)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        t = np.arange(n) - starts
        kind = rng.integers(0, 5, size=k)  # 0 fine, 1 oscillates, 2 idles, 3 lava, 4 blocked
        state = rng.integers(0, 400, size=n)
        oscillating = np.repeat(kind == 1, lengths)
        state[oscillating] = np.where(t[oscillating] % 2 == 0, 17, 18)
        idle = np.repeat(kind == 2, lengths)
        state[idle] = 33
        action = rng.integers(0, 7, size=n)
        blocked = np.where(np.repeat(kind == 4, lengths) & (rng.random(n) < 0.3), "no forward", None)
        last = np.cumsum(lengths) - 1
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        success = kind == 0
        terminated[last[(kind == 0) | (kind == 3)]] = True
        truncated[last[(kind != 0) & (kind != 3)]] = True
        steps = pa.table(
            {
                "episode_id": ids,
                "t": t,
                "action": actions[action],
                "reward": np.where(terminated, 1.0, 0.0),
                "terminated": terminated,
                "truncated": truncated,
                "blocked": blocked,
                "obs_digest": digests[state],
                "obs": pa.nulls(n, pa.string()),
                "position": positions[state],
                "info": np.full(n, "{}", dtype=object),
            },
            schema=STEP_SCHEMA,
        )
        reason = np.where(kind == 0, "reached goal", np.where(kind == 3, "lava", "timeout"))
        goal = rng.integers(1, 15, size=k).astype(float)
        episodes = pa.table(
            {
                "episode_id": np.arange(episode_id, episode_id + k),
                "spec_hash": np.full(k, "synthetic"),
                "spec_json": np.full(k, '{"env_id":"synthetic"}'),
                "seed": np.arange(episode_id, episode_id + k),
                "policy_id": np.full(k, "synthetic"),
                "length": lengths,
                "return": success.astype(float),
                "success": success,
                "score": success.astype(float),
                "reason": reason,
                "terminal_cause": np.where(success, None, reason),
                "level_features": [[("goal_distance", g), ("n_lava", 3.0)] for g in goal],
                "level_id": np.array([f"level-{i % 50}" for i in range(episode_id, episode_id + k)]),
                "error": pa.nulls(k, pa.string()),
                "wall_time": np.zeros(k),
                **{c: pa.nulls(k, pa.int64()) for c in ("tokens", "model_calls", "tool_errors", "retries", "human_interventions")},
            },
            schema=EPISODE_SCHEMA,
        )
        store.append_tables(episodes, steps)
        written += n
        episode_id += k
    return store


CHILD = """
import json, os, resource, sys, time
os.sched_setaffinity(0, {0})
import pyarrow as pa
pa.set_cpu_count(1); pa.set_io_thread_count(1)
from envrigger.diagnose import diagnose
start = time.perf_counter()
report = diagnose(sys.argv[1])
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "peak": peak, "steps": report.steps, "findings": [f.name for f in report.findings]}))
"""


def measure(path: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(Config.sizes))
    parser.add_argument("--dir", type=Path, default=None, help="where to write the synthetic runs (default: a temp dir)")
    args = parser.parse_args()
    config = Config(sizes=tuple(args.sizes))
    root = args.dir or Path(tempfile.mkdtemp(prefix="diag-bench-"))
    import pyarrow

    print(
        f"python {platform.python_version()}, numpy {np.__version__}, pyarrow {pyarrow.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} cores (diagnosis pinned to 1), seed {config.seed}"
    )
    rows = []
    for size in config.sizes:
        path = root / f"run-{size}"
        if not (path / "run.json").exists():
            started = time.perf_counter()
            synthetic_run(path, size, config)
            print(f"wrote {size:,} transitions in {time.perf_counter() - started:.1f}s to {path}")
        result = measure(path)
        rows.append((size, result))
    print(f"\n{'transitions':>12} {'seconds':>8} {'transitions/s':>14} {'peak MiB':>9}  findings")
    for _size, r in rows:
        print(
            f"{r['steps']:>12,} {r['seconds']:>8.1f} {r['steps'] / r['seconds']:>14,.0f} {r['peak'] / 2**20:>9.0f}  {', '.join(r['findings'])}"
        )
    if len(rows) >= 2:
        (small, a), (large, b) = rows[0], rows[-1]
        print(
            f"\n{large // small}x the transitions took {b['seconds'] / a['seconds']:.2f}x the time "
            f"and {b['peak'] / a['peak']:.2f}x the peak memory"
        )
    largest = rows[-1][1]
    print(
        f"largest run vs targets: time {largest['seconds'] / config.target_seconds:.2f}x of {config.target_seconds:.0f} s, "
        f"peak {largest['peak'] / 2**30 / config.target_peak_gib:.2f}x of {config.target_peak_gib:.0f} GiB"
    )
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
