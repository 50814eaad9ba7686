"""What a rollout call costs before its first episode, and what the process backend's workers buy, side by side.

The loop's validation makes many short rollout calls per round, so the fixed cost of a
call matters as much as episodes per second. Prints, in one run on the same episodes:

- the wall time of a first ``rollout(..., backend="process")`` call (it starts the worker
  processes) and of later calls (they reuse them), against the serial backend's;
- episodes/s and recorded steps/s of the serial backend and of the process backend with 1
  and 2 workers, with the process/serial ratio.

Writes ``--out`` (default ``rollout_startup.json``) with the figures, seeds, versions and
machine facts. Run: ``python benchmarks/rollout_startup.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym

import envharness
from envrigger.rollout import close_workers, rollout


@dataclass
class Config:
    env_id: str = "MiniGrid-DoorKey-8x8-v0"
    short_env_id: str = "CartPole-v1"  # random CartPole episodes last milliseconds: such a call's time is its fixed cost
    short_episodes: int = 2
    calls: int = 6
    episodes: int = 60
    seed: int = 0


def timed(env_id: str, episodes: int, backend: str, workers: int, seed: int, scratch: Path) -> tuple[float, int]:
    out = scratch / f"{backend}-{workers}-{time.perf_counter_ns()}"
    start = time.perf_counter()
    store = rollout(env_id, "random", seeds=range(seed, seed + episodes), backend=backend, workers=workers, out=out, policy_seed=seed)
    elapsed = time.perf_counter() - start
    steps = sum(e.length for e in store.iter_episodes())
    shutil.rmtree(out)
    return elapsed, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="rollout_startup.json")
    config = Config()
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="rollout-startup-"))
    close_workers()
    calls: dict[str, list[float]] = {"process": [], "serial": []}
    for _ in range(config.calls):  # interleaved, so both see the same machine
        for backend in ("process", "serial"):
            calls[backend].append(timed(config.short_env_id, config.short_episodes, backend, 2, config.seed, scratch)[0])
    first, later = calls["process"][0], sorted(calls["process"][1:])[len(calls["process"][1:]) // 2]
    serial_call = sorted(calls["serial"])[len(calls["serial"]) // 2]
    print(f"{config.short_env_id}, {config.short_episodes} random episodes per call (milliseconds of play), 2 workers")
    print(f"  process backend, first call (starts workers): {first:.3f} s")
    print(f"  process backend, later calls (median):       {later:.3f} s   ({later / first:.2f}x the first)")
    print(f"  serial backend (median):                      {serial_call:.3f} s   (process later / serial = {later / serial_call:.2f}x)")

    throughput = {}
    for backend, workers in (("serial", 1), ("process", 1), ("process", 2)):
        elapsed, steps = timed(config.env_id, config.episodes, backend, workers, config.seed, scratch)
        throughput[f"{backend}-{workers}"] = {
            "seconds": elapsed,
            "episodes_per_s": config.episodes / elapsed,
            "steps_per_s": steps / elapsed,
        }
    base = throughput["serial-1"]["episodes_per_s"]
    print(f"\n{config.episodes} random episodes, recorded (workers already started)")
    for name, row in throughput.items():
        print(
            f"  {name:10s} {row['episodes_per_s']:7.1f} episodes/s  {row['steps_per_s']:9.0f} steps/s  ({row['episodes_per_s'] / base:.2f}x serial)"
        )
    close_workers()
    shutil.rmtree(scratch, ignore_errors=True)
    result = {
        "config": asdict(config),
        "call_seconds": calls,
        "first_process_call": first,
        "later_process_call_median": later,
        "serial_call_median": serial_call,
        "throughput": throughput,
        "versions": {"python": platform.python_version(), "gymnasium": gym.__version__, "envharness": envharness.__version__},
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count()},
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
