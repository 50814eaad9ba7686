"""Agent Lightning, the real package: its trainer's dry run plays envharness envs through EnvAgent, and its store converts to a run.

The LLM is our scripted Chat Completions server on 127.0.0.1; the env is built in the runner
or served by `envharness serve --record` in a subprocess; the store is Agent Lightning's own
(in memory, or `agl store` in a subprocess read by `envrigger convert agentlightning:URL`).
Hostile runner code that rewrites the episode it emits is refused against the server's record.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from servers import free_port, start

from envharness import HarnessSpec, SpecError
from envrigger.agents.scripted import ChatServer, Reply, listed_commands
from envrigger.data import TrajectoryStore

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # agentlightning imports litellm, which would fetch prices online
pytest.importorskip("agentlightning", reason='needs the agentlightning extra: pip install "envharness[agentlightning]"')
pytest.importorskip("fastapi", reason='serving needs the serve extra: pip install "envharness[serve]"')
needs_textworld = pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="needs the textworld extra")

import agentlightning as agl  # noqa: E402

from envrigger.integrations import agentlightning as integration  # noqa: E402
from envrigger.integrations.agentlightning import EnvAgent, convert, seed_tasks  # noqa: E402

TW = HarnessSpec(env_id="envharness/TextWorld-v0", env_kwargs={"levels": [3, 4], "games_per_level": 4, "max_episode_steps": 15})


@pytest.fixture
def processes():
    running: list[subprocess.Popen] = []
    yield running
    for process in running:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@pytest.fixture
def served(tmp_path, processes):
    """`envharness serve` of the TextWorld spec, recording into tmp_path/served: (url, run)."""
    spec = tmp_path / "tw.json"
    spec.write_text(TW.to_json())
    port = free_port()
    run = tmp_path / "served"
    cmd = [sys.executable, "-m", "envharness.cli", "serve", str(spec), "--port", str(port), "--record", str(run)]
    processes.append(start(cmd, f"http://127.0.0.1:{port}/healthz"))
    return f"http://127.0.0.1:{port}", run


def games(seeds: list[int]) -> tuple[dict[str, list[str]], set[str], dict[int, str]]:
    """Each game's opening text -> its walkthrough; the openings the model plays with its flaw (every other game); seed -> opening."""
    plans, opening = {}, {}
    for seed in seeds:  # seeds share games: the flaw goes by game, not by seed
        env = TW.build()
        obs, _ = env.reset(seed=seed)
        plans[obs["text"]], opening[seed] = list(env.unwrapped.policy), obs["text"]
    return plans, set(sorted(plans)[1::2]), opening


def pacing_model(plans: dict[str, list[str]], flawed: set[str]) -> Any:
    """Follows the walkthrough, except in the flawed games, where it walks back and forth between two rooms."""

    def model(request: dict[str, Any]) -> Reply:
        first = next(m["content"] for m in request["messages"] if m["role"] == "user")
        opening = max((text for text in plans if text in first), key=len)  # openings can contain one another: the longest one
        step = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if opening not in flawed:
            plan = plans[opening]
            return Reply(content=plan[step] if step < len(plan) else "look")
        goes = [c for c in listed_commands(request) if c.startswith("go ")]
        return Reply(content=goes[step % len(goes)] if goes else "look")

    return model


def dry_run(agent: agl.LitAgent, llm_url: str, train: list[dict[str, int]], val: list[dict[str, int]] | None = None) -> Any:
    """Agent Lightning's own dry run: Trainer.dev with its Baseline algorithm, one runner, in this process."""
    store = agl.InMemoryLightningStore()
    trainer = agl.Trainer(
        n_runners=1,
        store=store,
        strategy=agl.SharedMemoryExecutionStrategy(main_thread="algorithm", graceful_delay=0.5),
        tracer=agl.OtelTracer(),
        algorithm=agl.Baseline(polling_interval=0.05, span_verbosity="none"),
        initial_resources={"main_llm": agl.LLM(endpoint=llm_url, model="scripted", sampling_parameters={"temperature": 0.0})},
    )
    trainer.dev(agent, train_dataset=train, val_dataset=val)
    return store


def verdict(episode: Any) -> tuple[Any, ...]:
    return episode.success, episode.reason, episode.level_id, episode.length


async def rewards(store: Any) -> dict[int, float | None]:
    out = {}
    for rollout in await store.query_rollouts():
        out[rollout.input["seed"]] = agl.find_final_reward(list(await store.query_spans(rollout.rollout_id, attempt_id="latest")))
    return out


@needs_textworld
def test_a_dry_run_trains_on_a_served_env_and_its_run_is_diagnosed_from_the_servers_record(served, tmp_path):
    import asyncio

    from envrigger.diagnose import diagnose
    from envrigger.report import render_html

    url, served_run = served
    train, val = seed_tasks(12), seed_tasks(4, start=12)
    plans, flawed, opening = games(list(range(16)))
    with ChatServer(pacing_model(plans, flawed)) as llm:
        store = dry_run(EnvAgent(url=url), llm.url, train, val)
        assert llm.bodies() and all(body["model"] == "scripted" for body in llm.bodies())
    time.sleep(0.5)  # the server commits each episode as it ends
    truth = {e.session_id: e for e in TrajectoryStore(served_run).iter_episodes()}
    assert len(truth) == 16
    by_seed = asyncio.run(rewards(store))
    assert by_seed == {e.seed: float(e.success) for e in truth.values()}  # the reward Agent Lightning got is the server's verdict
    assert all(by_seed[seed] == 1.0 for seed in range(16) if opening[seed] not in flawed)
    assert sum(by_seed[seed] == 0.0 for seed in range(16) if opening[seed] in flawed) >= 2

    done = convert(store, tmp_path / "al", served=served_run)
    assert (done.episodes, done.verified, done.refused, dict(done.skipped)) == (16, 16, [], {})
    run = TrajectoryStore(tmp_path / "al")
    assert json.loads((tmp_path / "al" / "run.json").read_text())["recorded_by"] == "agentlightning"
    for episode, steps in run.iter_episode_steps():
        server = truth[episode.session_id]
        assert verdict(episode) == verdict(server)
        assert episode.policy_id.startswith("chat:scripted:") and episode.model_calls == len(steps) == episode.length
        assert all(json.loads(step.calls)[0]["gen_ai.request.model"] == "scripted" for step in steps)
    report = diagnose(run)
    # A looping agent's behaviours may be merged into one finding (their episodes coincide); its symptoms name them.
    assert any(report.finding(name) is not None for name in ("loop", "revisit", "repeated_action")), [
        (f.name, f.symptoms) for f in report.findings
    ]
    assert 'class="chat"' in render_html(report, run)  # evidence as the agent's own conversation


class Forger(EnvAgent):
    """Hostile code in the runner: plays honestly, then rewrites the episode it emits (by seed: 1 wins, 3 swaps actions, 5 steals a session)."""

    def rollout(self, task: Any, resources: Any, rollout: Any) -> float:
        emit, seed = agl.emit_object, task["seed"]

        def forged(payload: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            episode = payload["episode"]
            if seed == 1:
                episode.update(success=True, score=1.0, reason="won the game")
            elif seed == 3:
                payload["steps"][0]["action"] = json.dumps(99)
            elif seed == 5:
                episode["session_id"] = "s-" + "0" * 12
            return emit(payload, *args, **kwargs)

        integration.agl.emit_object = forged  # type: ignore[assignment]
        try:
            super().rollout(task, resources, rollout)
        finally:
            integration.agl.emit_object = emit  # type: ignore[assignment]
        return 1.0


@needs_textworld
def test_an_episode_rewritten_in_the_runner_is_refused_against_the_servers_record(served, tmp_path):
    url, served_run = served
    plans, _, _ = games([0, 1, 3, 5])
    flawed = set(plans)  # every game paced: none is won
    with ChatServer(pacing_model(plans, flawed)) as llm:
        store = dry_run(Forger(url=url), llm.url, [{"seed": s} for s in (0, 1, 3, 5)])
    time.sleep(0.5)
    done = convert(store, tmp_path / "checked", served=served_run)
    reasons = sorted(why for _, why in done.refused)
    assert done.episodes == 1 and len(reasons) == 3, done.summary()
    assert any(why.startswith("its success (True) is not the server's (False)") for why in reasons)
    assert "its actions are not the ones the server played" in reasons
    assert any("is not in the server's record" in why for why in reasons)
    (kept,) = TrajectoryStore(tmp_path / "checked").iter_episodes()
    assert kept.seed == 0 and not kept.success
    unchecked = convert(store, tmp_path / "unchecked")  # without the record: stored as reported, and said so
    assert unchecked.episodes == 4 and unchecked.unverified == 4 and "as the runner reported them" in unchecked.summary()


@needs_textworld
def test_a_local_env_dry_run_converts_from_a_served_agent_lightning_store_with_the_cli(tmp_path):
    import asyncio

    plans, _, opening = games([0, 1])
    with ChatServer(pacing_model(plans, {opening[1]})) as llm:
        store = dry_run(EnvAgent(TW), llm.url, seed_tasks(2))
    port = free_port()
    server = agl.LightningStoreServer(store, host="127.0.0.1", port=port)  # what `agl store` runs, in a thread of this process
    asyncio.run(server.start())
    try:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        cli = [sys.executable, "-m", "envrigger.cli", "convert", f"agentlightning:http://127.0.0.1:{port}", str(tmp_path / "al")]
        converted = subprocess.run(cli, capture_output=True, text=True, timeout=300, env=env)
        assert converted.returncode == 0, converted.stderr
        assert "2 episodes into" in converted.stdout
        episodes = sorted(TrajectoryStore(tmp_path / "al").iter_episodes(), key=lambda e: e.seed)
        assert [e.success for e in episodes] == [True, False]
        assert all(e.session_id.startswith("ro-") for e in episodes)  # a local env's episode is keyed by its rollout id
        again = subprocess.run(cli, capture_output=True, text=True, timeout=300, env=env)  # the destination exists now
        assert again.returncode == 2 and "exists; convert into a new run directory" in again.stderr
    finally:
        asyncio.run(server.stop())
    nobody = subprocess.run([*cli[:4], f"agentlightning:http://127.0.0.1:{free_port()}", str(tmp_path / "x")],
                            capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert nobody.returncode == 2 and "no Agent Lightning store answered" in nobody.stderr, nobody.stderr
    assert len(nobody.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()  # one line, nothing half-made
    bad = subprocess.run(
        [*cli[:4], "agentlightning:localhost:4747", str(tmp_path / "y")], capture_output=True, text=True, timeout=300, env=env
    )
    assert bad.returncode == 2 and "not an http(s) URL" in bad.stderr


def test_an_env_agent_is_given_an_env_or_a_url_and_an_llm_resource():
    with pytest.raises(SpecError, match="either env"):
        EnvAgent()
    with pytest.raises(SpecError, match="either env"):
        EnvAgent("CartPole-v1", url="http://127.0.0.1:1")
    agent = EnvAgent("envharness/CodeRepair-v0")
    with pytest.raises(SpecError, match="no LLM resource named 'main_llm'"):
        agent._resource({"a": agl.LLM(endpoint="http://x/v1", model="m"), "b": agl.LLM(endpoint="http://y/v1", model="m")})
    assert agent._resource({"policy": agl.LLM(endpoint="http://x/v1", model="m")}).model == "m"  # one LLM: any name
