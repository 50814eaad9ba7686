"""The chat agent's own cost per model call: prompt rendering, context trimming, parsing and recording.

A TextWorld episode is played by a :class:`~envrigger.agents.ChatAgent` whose client
answers at once from the game's walkthrough (no network, no model): every millisecond
measured is the agent's. For each step, the time of ``act`` minus the time spent inside
the client's ``create`` is the agent's overhead; the script prints its median and 90th
percentile per call, in text and tools mode, beside the env's own step time for scale.
Target (issue 28): at most 2 ms at the median. Run: ``python benchmarks/perf/agent_overhead.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from types import SimpleNamespace
from typing import Any

import envharness
from envrigger.agents import ChatAgent, Endpoint, default_harness
from envrigger.data import add_calls
from envrigger.rollout.episode import step_record


class InstantClient:
    """Answers each call at once with the next command of a plan (or a tool call naming it); counts its own time."""

    def __init__(self, plan: list[str], tools: bool) -> None:
        self.plan, self.tools, self.inside, self.n = plan, tools, 0.0, 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request: Any) -> Any:
        started = time.perf_counter()
        command = self.plan[self.n % len(self.plan)]
        self.n += 1
        calls = [SimpleNamespace(id=f"c{self.n}", function=SimpleNamespace(name="command", arguments=json.dumps({"command": command})))]
        message = SimpleNamespace(content=None if self.tools else command, tool_calls=calls if self.tools else None)
        usage = SimpleNamespace(prompt_tokens=100, completion_tokens=3)
        answer = SimpleNamespace(
            id=f"r{self.n}", model="instant", usage=usage, choices=[SimpleNamespace(message=message, finish_reason="stop")]
        )
        self.inside += time.perf_counter() - started
        return answer


def measure(output: str, episodes: int) -> dict[str, float]:
    env = envharness.wrap("envharness/TextWorld-v0", levels=[5], games_per_level=4)
    overheads, env_steps = [], []
    for seed in range(episodes):
        obs, info = env.reset(seed=seed)
        client = InstantClient(list(env.unwrapped.policy), tools=output == "tools")
        agent = ChatAgent(
            env,
            default_harness("envharness/TextWorld-v0", output),
            Endpoint("http://unused/v1", "instant", api_key_env="PATH"),
            client=client,
        )
        agent.reset(seed)
        done, t = False, 0
        while not done:
            before, started = client.inside, time.perf_counter()
            action = agent.act(obs, info)
            calls = agent.pop_calls()
            stepped = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action)
            env_time = time.perf_counter() - stepped
            recorded = time.perf_counter()
            add_calls(step_record(seed, t, action, obs, reward, terminated, truncated, info, env.adapter), calls)
            record_time = time.perf_counter() - recorded
            overheads.append((stepped - started) - (client.inside - before) + record_time)
            env_steps.append(env_time)
            done, t = terminated or truncated, t + 1
    overheads.sort()
    return {
        "calls": len(overheads),
        "median_ms": 1000 * statistics.median(overheads),
        "p90_ms": 1000 * overheads[int(0.9 * (len(overheads) - 1))],
        "env_step_median_ms": 1000 * statistics.median(env_steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("PATH", "")
    for output in ("text", "tools"):
        row = measure(output, args.episodes)
        verdict = "within" if row["median_ms"] <= 2.0 else "ABOVE"
        print(
            f"{output:5s}: {row['calls']} calls; agent overhead per call median {row['median_ms']:.3f} ms, p90 {row['p90_ms']:.3f} ms "
            f"({verdict} the 2 ms target); the env's own step median {row['env_step_median_ms']:.3f} ms"
        )


if __name__ == "__main__":
    main()
