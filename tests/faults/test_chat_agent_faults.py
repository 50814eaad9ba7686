"""A chat agent's collection killed or interrupted: the episodes it committed are whole and the same as uninterrupted.

The endpoint is a scripted Chat Completions server in this process; `envrigger collect
--agent chat` runs in a child process with several episodes in flight, and is killed with
SIGKILL after a committed part, or stopped with Ctrl-C.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from stored import answer_after_ctrl_c, committed_parts, wait_for

from envrigger.agents.scripted import ChatServer, Reply
from envrigger.data import TrajectoryStore

pytest.importorskip("openai", reason='the chat agent needs the llm extra: pip install "envharness[llm]"')

PLAN = [
    {"tool": "view", "path": "calc.py"},
    {"tool": "replace", "path": "calc.py", "start": 2, "end": 2, "text": "    return a + b"},
    {"tool": "submit"},
]
EPISODES = 48


# The child starts as a user's shell starts it: Ctrl-C neither ignored nor blocked, whatever the test
# runner's worker inherited (in the full suite, on 3 workers, both Ctrl-C tests met children that ignored it).
CTRL_C_AS_A_SHELL_GIVES_IT = (
    "import signal; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); signal.signal(signal.SIGINT, signal.default_int_handler); "
)


def model(request: dict[str, Any]) -> Reply:
    """The add task's fix, whatever the task (so most episodes fail): deterministic per conversation."""
    step = sum(1 for m in request["messages"] if m["role"] == "assistant")
    return Reply(content=json.dumps(PLAN[min(step, len(PLAN) - 1)]))


def collect(url: str, out: Path) -> subprocess.Popen:
    code = CTRL_C_AS_A_SHELL_GIVES_IT + "import sys; from envrigger.cli import main; sys.argv = ['envrigger', *sys.argv[1:]]; main()"
    args = ["collect", "envharness/CodeRepair-v0", "--agent", "chat", "--base-url", url, "--model", "scripted",
            "-n", str(EPISODES), "--concurrency", "4", "--flush-steps", "1", "--backend", "serial", "-o", str(out)]  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": "local"}
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True,
                            start_new_session=True)  # fmt: skip


def episodes_of(store: TrajectoryStore) -> dict[int, tuple]:
    return {e.episode_id: (e.seed, e.length, e.reason, e.model_calls, e.input_tokens, e.output_tokens) for e in store.iter_episodes()}


def calls_of(store: TrajectoryStore) -> dict[tuple[int, int], list[str]]:
    """Each stored step's calls without their timings: what the model was sent and said."""
    out = {}
    for episode, steps in store.iter_episode_steps():
        for step in steps:
            calls = json.loads(step.calls)
            out[(episode.episode_id, step.t)] = [(c["gen_ai.input.messages"], c["gen_ai.output.messages"]) for c in calls]
    return out


def test_kill_9_mid_collect_with_a_chat_agent_keeps_every_committed_episode_whole(tmp_path):
    with ChatServer(model, delay_s=0.02) as server:
        reference = tmp_path / "reference"
        assert collect(server.url, reference).wait(timeout=300) == 0
        expected, expected_calls = episodes_of(TrajectoryStore(reference)), calls_of(TrajectoryStore(reference))
        assert len(expected) == EPISODES
        rng = random.Random(5)
        for trial in range(2):
            out = tmp_path / f"killed-{trial}"
            process = collect(server.url, out)
            parts = rng.randint(2, 20)
            assert wait_for(lambda out=out, parts=parts, child=process: committed_parts(out) >= parts or child.poll() is not None, 120)
            process.kill()
            process.wait()
            store = TrajectoryStore(out)
            assert store.verify() == []
            got = episodes_of(store)
            assert 0 < len(got) < EPISODES, "the kill landed after the collection ended"
            assert got == {i: expected[i] for i in got}  # whole, and what the uninterrupted run stored
            assert calls_of(store) == {key: value for key, value in expected_calls.items() if key[0] in got}


def test_ctrl_c_mid_collect_with_a_chat_agent_commits_the_finished_episodes(tmp_path):
    # A slow model (0.2 s a reply, at least 7 s for the whole collection) so that Ctrl-C lands mid-collection on a loaded machine too.
    with ChatServer(model, delay_s=0.2) as server:
        out = tmp_path / "run"
        process = collect(server.url, out)
        assert wait_for(lambda: committed_parts(out) >= 3 or process.poll() is not None, 120)
        assert process.poll() is None, "the collection ended before Ctrl-C could land: nothing to test"
        os.killpg(process.pid, signal.SIGINT)
        err = answer_after_ctrl_c(process)
    assert process.returncode == 130 and "interrupted" in err.strip().splitlines()[-1], err[-600:]
    store = TrajectoryStore(out)
    episodes = list(store.iter_episodes())
    assert store.verify() == [] and 0 < len(episodes) < EPISODES
    cut = [
        (e.episode_id, e.error, e.reason, e.model_calls)
        for e in episodes
        if not (e.error is None and e.reason.startswith("hidden tests") and e.model_calls == 3)
    ]
    assert not cut, cut  # none cut short
