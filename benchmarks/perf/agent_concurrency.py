"""Episodes per second of a chat agent on TextWorld, one episode in flight against many, side by side.

The endpoint is the scripted Chat Completions server (a real HTTP server on 127.0.0.1)
answering each call after ``--delay`` seconds (200 ms by default, like a model behind a
network), always with the game's first listed command. The same seeds are played with
``concurrency=1`` and ``concurrency=N`` (threads, one env and one client each), one run
right after the other; the script prints both rates and their ratio, and checks that the
stored episodes are the same. Target (issue 28): N=16 reaches at least 12x N=1.
Run: ``python benchmarks/perf/agent_concurrency.py``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from envharness import HarnessSpec
from envrigger.agents import ChatAgentFactory, Endpoint, default_harness
from envrigger.agents.scripted import ChatServer, Reply, listed_commands
from envrigger.rollout import rollout

SPEC = HarnessSpec(env_id="envharness/TextWorld-v0", env_kwargs={"levels": [3], "games_per_level": 4, "max_episode_steps": 8})


def first_command(request: dict[str, Any]) -> Reply:
    commands = listed_commands(request)
    return Reply(content=commands[0] if commands else "look")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the endpoint takes per call")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--episodes", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "local")
    seeds = range(args.episodes)
    SPEC.build().reset(seed=0)  # generate the games once, outside the timed runs
    rates, contents = {}, {}
    with ChatServer(first_command, delay_s=args.delay) as server:
        factory = ChatAgentFactory(default_harness(SPEC.env_id), Endpoint(server.url, "scripted"))
        for n in (1, args.concurrency):
            started = time.perf_counter()
            store = rollout(SPEC, factory, seeds=seeds, concurrency=n, out=tempfile.mkdtemp())
            rates[n] = args.episodes / (time.perf_counter() - started)
            contents[n] = [(e.seed, e.length, e.model_calls, [s.action for s in steps]) for e, steps in store.iter_episode_steps()]
    same = contents[1] == contents[args.concurrency]
    ratio = rates[args.concurrency] / rates[1]
    print(
        f"{args.episodes} TextWorld episodes, {args.delay * 1000:.0f} ms per model call: concurrency 1: {rates[1]:.2f} episodes/s; "
        f"concurrency {args.concurrency}: {rates[args.concurrency]:.2f} episodes/s; ratio {ratio:.1f}x "
        f"({'meets' if ratio >= 12 else 'BELOW'} the 12x target); stored episodes identical: {same}"
    )


if __name__ == "__main__":
    main()
