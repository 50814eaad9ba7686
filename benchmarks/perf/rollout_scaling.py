"""What recording costs, what a rollout call costs before its first episode, and how the backends scale, side by side.

Prints, in one run on the same seeded episodes of a random policy:

- **recording**: ``rollout(..., backend="serial")`` (which stores every step in Parquet) ÷ a
  bare loop stepping the same wrapped env with the same policy (MiniGrid DoorKey-8x8);
- **start-up**: the wall time of a first ``rollout()`` call on the process and Ray backends
  (it starts the workers, or Ray) and of later calls (they reuse them), against serial's, on
  calls of 2 short CartPole episodes;
- **scaling**: episodes/s and recorded steps/s of serial, process (1 and 2 workers) and Ray
  (1 and 2 actors), with each one's ratio to serial and Ray's to the process pool;
- **batched acting**: a PPO network policy (the loop's ``TorchPolicy``) on CartPole, played
  episode by episode and with ``batch=8`` (8 envs in lockstep, one forward pass per step for
  all of them), episodes/s of each (needs the ``sb3`` extra).

Ray is left out when it is not installed (``pip install "envharness[ray]"``). Writes ``--out``
(default ``rollout_scaling.json``). Run: ``python benchmarks/perf/rollout_scaling.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import envharness
from envrigger.rollout import close_workers, policy_factory, rollout

sys.path.insert(0, str(Path(__file__).parent))
from _common import interleaved, ratio_range, write_result  # noqa: E402


@dataclass
class Config:
    env_id: str = "MiniGrid-DoorKey-8x8-v0"
    episodes: int = 60
    record_episodes: int = 20  # per timed run of the recording comparison
    record_repeats: int = 5
    throughput_repeats: int = 3
    short_env_id: str = "CartPole-v1"  # random CartPole episodes last milliseconds: such a call's time is its fixed cost
    short_episodes: int = 2
    calls: int = 6
    batch_env_id: str = "CartPole-v1"
    batch_episodes: int = 64
    batch: int = 8
    seed: int = 0


def _burn(n: int) -> float:
    start = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - start


def two_process_ceiling(n: int = 20_000_000) -> float:
    """What 2 processes of pure Python buy over 1 on this machine: the most 2 workers can give."""
    import multiprocessing as mp

    one = _burn(n)
    with mp.get_context("spawn").Pool(2) as pool:
        pool.map(_burn, [1000, 1000])  # started and warm
        start = time.perf_counter()
        pool.map(_burn, [n, n])
        both = time.perf_counter() - start
    return 2 * one / both


def bare_loop(env_id: str, seeds: range, policy_seed: int) -> None:
    """What rollout does for each episode, minus the recording: the same env, policy and seeds."""
    env = envharness.wrap(env_id)
    policy = policy_factory("random", policy_seed)(env)
    for seed in seeds:
        policy.reset(seed)
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
            done = terminated or truncated
    env.close()


def timed(env_id: str, episodes: int, backend: str, workers: int, seed: int, scratch: Path) -> tuple[float, int]:
    out = scratch / f"{backend}-{workers}-{time.perf_counter_ns()}"
    start = time.perf_counter()
    store = rollout(env_id, "random", seeds=range(seed, seed + episodes), backend=backend, workers=workers, out=out, policy_seed=seed)
    elapsed = time.perf_counter() - start
    steps = sum(e.length for e in store.iter_episodes())
    shutil.rmtree(out)
    return elapsed, steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="rollout_scaling.json")
    args = parser.parse_args(argv)
    config = Config()
    scratch = Path(tempfile.mkdtemp(prefix="rollout-scaling-"))
    has_ray = importlib.util.find_spec("ray") is not None
    backends = ["serial", "process"] + (["ray"] if has_ray else [])
    figures: dict[str, Any] = {}

    seeds = range(config.seed, config.seed + config.record_episodes)
    times = interleaved(
        {
            "bare loop": lambda: bare_loop(config.env_id, seeds, config.seed),
            "rollout serial (recorded)": lambda: timed(config.env_id, config.record_episodes, "serial", 1, config.seed, scratch),
        },
        config.record_repeats,
    )
    figures["recording"] = {"seconds": times, "ratio": ratio_range(times["rollout serial (recorded)"], times["bare loop"])}
    r = figures["recording"]["ratio"]
    print(f"{config.env_id}, {config.record_episodes} random episodes per run, {config.record_repeats} interleaved repeats")
    print(f"  recorded serial rollout / bare loop: {r['best_of']:.3f}x best-of, pairs {r['median']:.3f}x [{r['low']:.3f}, {r['high']:.3f}]")

    close_workers()
    calls: dict[str, list[float]] = {b: [] for b in backends}
    for _ in range(config.calls):  # interleaved, so every backend sees the same machine
        for backend in backends:
            calls[backend].append(timed(config.short_env_id, config.short_episodes, backend, 2, config.seed, scratch)[0])
    serial_call = statistics.median(calls["serial"])
    figures["startup"] = {"seconds": calls, "serial_median": serial_call}
    print(f"\n{config.short_env_id}, {config.short_episodes} random episodes per call (milliseconds of play), 2 workers")
    print(f"  serial (median of {config.calls}):                         {serial_call:.3f} s")
    for backend in backends[1:]:
        first, later = calls[backend][0], statistics.median(calls[backend][1:])
        figures["startup"][backend] = {"first": first, "later_median": later}
        print(f"  {backend:7s} first call (starts workers):                 {first:.3f} s")
        print(f"  {backend:7s} later calls (median), workers reused:        {later:.3f} s  ({later / serial_call:.2f}x serial)")

    throughput: dict[str, dict[str, float]] = {}
    plan = [("serial", 1)] + [(b, w) for b in backends[1:] for w in (1, 2)]
    runs: dict[str, list[tuple[float, int]]] = {f"{b}-{w}": [] for b, w in plan}
    for _ in range(config.throughput_repeats):  # workers already started by the start-up calls; interleaved, best of each
        for backend, workers in plan:
            runs[f"{backend}-{workers}"].append(timed(config.env_id, config.episodes, backend, workers, config.seed, scratch))
    for name, results in runs.items():
        elapsed, steps = min(results)
        throughput[name] = {
            "seconds": elapsed,
            "all_seconds": [r[0] for r in results],
            "episodes_per_s": config.episodes / elapsed,
            "steps_per_s": steps / elapsed,
        }
    base = throughput["serial-1"]["episodes_per_s"]
    print(f"\n{config.env_id}, {config.episodes} random episodes, recorded, best of {config.throughput_repeats} interleaved runs")
    for name, row in throughput.items():
        row["vs_serial"] = row["episodes_per_s"] / base
        print(f"  {name:10s} {row['episodes_per_s']:7.2f} episodes/s  {row['steps_per_s']:9.0f} steps/s  ({row['vs_serial']:.2f}x serial)")
    if has_ray:
        for workers in (1, 2):
            ratio = throughput[f"ray-{workers}"]["seconds"] / throughput[f"process-{workers}"]["seconds"]
            throughput[f"ray-{workers}"]["time_vs_process"] = ratio
            print(f"  ray with {workers} actor(s) takes {ratio:.2f}x the process pool's time for the same episodes")
    ceiling = two_process_ceiling()
    figures["two_process_ceiling"] = ceiling
    print(f"  this machine's own ceiling: 2 processes of pure Python do {ceiling:.2f}x the work of 1 in the same time")
    figures["throughput"] = throughput

    if importlib.util.find_spec("stable_baselines3") is not None:
        from envrigger.loop.learners import PPOLearner

        policy = PPOLearner(envharness.wrap(config.batch_env_id), seed=config.seed).policy()
        runs = {}
        for batch in (1, config.batch):
            out = scratch / f"batch-{batch}"
            start = time.perf_counter()
            store = rollout(config.batch_env_id, policy, seeds=range(config.batch_episodes), batch=batch, out=out)
            runs[batch] = {"seconds": time.perf_counter() - start, "steps": sum(e.length for e in store.iter_episodes())}
            shutil.rmtree(out)
        speedup = runs[1]["seconds"] / runs[config.batch]["seconds"]
        figures["batched"] = {"runs": runs, "speedup": speedup}
        print(f"\n{config.batch_env_id}, PPO network policy, {config.batch_episodes} episodes ({runs[1]['steps']} steps), serial")
        for batch, row in runs.items():
            print(f"  batch {batch:2d}: {config.batch_episodes / row['seconds']:7.1f} episodes/s")
        print(f"  batch {config.batch} / episode by episode: {speedup:.2f}x the episodes per second")
    close_workers()
    shutil.rmtree(scratch, ignore_errors=True)
    write_result(args.out, "rollout_scaling", asdict(config), figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
