"""Attacks on a polite stop: SIGTERM, SIGHUP and Ctrl-C must lose nothing that had finished, in every long command.

`timeout`, schedulers, `docker stop` and Kubernetes stop a process with SIGTERM; a closed
terminal or ssh session sends SIGHUP. Each attack starts the real command line as a
subprocess (the console scripts beside this interpreter), waits until work has finished
(counted from outside: the scripted model server's requests, the run directory), sends
the signal to the process alone (as those tools do) and checks what a user relies on:

1. the store holds every finished episode (model call, round) and nothing half-done;
2. the process ends within a few seconds, with the documented code (128 + the signal:
   130 SIGINT, 143 SIGTERM, 129 SIGHUP);
3. its last line on stderr says what was kept: ``PROG: interrupted by SIGTERM: ...``.

And the time bound: finished episodes reach the store within ``--flush-seconds`` whatever
their step count, so even ``kill -9`` loses at most that much.

The LLM agent's endpoint is a real HTTP server speaking the Chat Completions protocol
(``envrigger.agents.scripted.ChatServer``) in this process; `envharness serve` is played
over HTTP with ``urllib``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from servers import free_port, start
from stored import wait_for

from envharness import HarnessSpec
from envrigger.agents.scripted import ChatServer, Reply
from envrigger.data import TrajectoryStore
from envrigger.loop.library import Library

pytest.importorskip("openai", reason='the chat agent needs the llm extra: pip install "envharness[llm]"')

BIN = Path(sys.executable).parent
CODE = "envharness/CodeRepair-v0"
PLAN = [
    {"tool": "view", "path": "calc.py"},
    {"tool": "replace", "path": "calc.py", "start": 2, "end": 2, "text": "    return a + b"},
    {"tool": "submit"},
]
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
PROMPT_S = 5.0  # a polite stop ends the process within this many seconds
LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False})
LOOP = ["--learner", "qlearning", "--arms", "original,rigger", "--rounds", "2", "--budget-steps", "4000", "--collect-episodes", "30",
        "--eval-episodes", "30", "--val-episodes", "20", "--candidates", "3", "--backend", "serial", "--allow-seen-levels"]  # fmt: skip


def model(request: dict[str, Any]) -> Reply:
    """Three calls an episode (view, replace, submit), whatever the task: deterministic per conversation."""
    step = sum(1 for m in request["messages"] if m["role"] == "assistant")
    return Reply(content=json.dumps(PLAN[min(step, len(PLAN) - 1)]))


def started(server: ChatServer) -> int:
    """Episodes the agent began: first calls of a conversation. With N in flight, at least this less N have finished."""
    return sum(1 for r in list(server.requests) if not any(m.get("role") == "assistant" for m in r["body"].get("messages", [])))


def as_a_shell_starts_it() -> None:
    """The child's stop signals as a shell leaves them (a runner under ``nohup`` ignores SIGHUP, and children inherit it)."""
    for number in EXIT_CODES:
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(EXIT_CODES))


def launch(program: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OPENAI_API_KEY": "local"}
    return subprocess.Popen([str(BIN / program), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=as_a_shell_starts_it)  # fmt: skip


def stop(process: subprocess.Popen, number: int) -> tuple[float, str]:
    """Send ``number`` to the process alone, as `timeout`, `docker stop` and Kubernetes do; seconds until it ended, and its stderr."""
    assert process.poll() is None, "it ended before the stop could land: nothing to test"
    sent = time.monotonic()
    process.send_signal(number)
    try:
        err = process.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"still running 60 s after {signal.Signals(number).name}: {process.communicate()[1][-1500:]}") from None
    return time.monotonic() - sent, err


def said(err: str, prog: str, number: int) -> str:
    """What the stop line says was kept; fails unless the last line on stderr is the stop line."""
    last = err.strip().splitlines()[-1] if err.strip() else ""
    prefix = f"{prog}: interrupted by {signal.Signals(number).name}: "
    assert last.startswith(prefix), err[-1500:]
    return last.removeprefix(prefix)


def whole_episodes(store: TrajectoryStore) -> list[tuple[int, int, int, str]]:
    """(episode id, steps, model calls, how it ended) of each stored episode."""
    return sorted(
        (e.episode_id, e.length, e.model_calls, e.reason if e.error is None else f"error: {e.error}") for e in store.iter_episodes()
    )


def ended_by_the_env(kept: list[tuple[int, int, int, str]]) -> bool:
    """Every episode whole: ended by the env's own verdict on the submitted fix (three calls), none cut short by the stop."""
    return all(steps == calls == 3 and reason.startswith("hidden tests") for _, steps, calls, reason in kept)


# == collect ===========================================================================================================
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_mid_collect_of_a_chat_agent_keeps_every_finished_episode(tmp_path, number):
    out = tmp_path / "run"
    with ChatServer(model, delay_s=0.3) as server:  # a slow model: episodes of seconds, each worth keeping
        process = launch("envrigger", "collect", CODE, "--agent", "chat", "--base-url", server.url, "--model", "scripted", "-n", "40",
                         "--concurrency", "2", "-o", str(out))  # fmt: skip
        assert wait_for(lambda: started(server) >= 5 or process.poll() is not None, 120)  # so at least 3 have finished
        finished = started(server) - 2
        took, err = stop(process, number)
    assert process.returncode == EXIT_CODES[number], err[-1500:]
    assert took < PROMPT_S, f"{took:.1f} s to stop"
    store = TrajectoryStore(out)
    kept = whole_episodes(store)
    assert store.verify() == [] and len(kept) >= finished >= 3, (kept, finished)
    assert ended_by_the_env(kept), kept
    assert said(err, "envrigger", number) == f"{len(kept)} finished episodes kept in {out}"


def test_finished_episodes_reach_the_store_within_the_time_bound_whatever_their_step_count(tmp_path):
    out = tmp_path / "run"
    with ChatServer(model, delay_s=0.3) as server:
        process = launch("envrigger", "collect", CODE, "--agent", "chat", "--base-url", server.url, "--model", "scripted", "-n", "40",
                         "--concurrency", "2", "--flush-seconds", "1", "-o", str(out))  # fmt: skip
        try:
            assert wait_for(lambda: started(server) >= 5 or process.poll() is not None, 120)
            assert process.poll() is None, process.communicate()[1][-1500:]
            finished = started(server) - 2  # 9 steps at least, far below the 50,000 of the step bound
            stored = lambda: (out / "manifest.json").is_file() and len(TrajectoryStore(out)) >= finished  # noqa: E731
            assert wait_for(stored, 4.0), "not on disk within 1 s (and 3 s of slack)"
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)  # what no polite stop can soften: what is on disk is what was committed
            process.wait()
    store = TrajectoryStore(out)
    assert store.verify() == [] and len(store) >= finished >= 3


# == envrigger run (the loop) ==========================================================================================
def test_sigterm_mid_round_of_envrigger_run_ends_it_promptly_and_the_run_resumes(tmp_path):
    spec = tmp_path / "lake.json"
    spec.write_text(HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False}).to_json())
    out = tmp_path / "loop"
    process = launch("envrigger", "run", str(spec), "-o", str(out), *LOOP)
    # Round 2's directory is made once round 1 is committed: the stop lands mid-round 2.
    assert wait_for(lambda: (out / "round-2").is_dir() or process.poll() is not None, 120)
    took, err = stop(process, signal.SIGTERM)
    assert process.returncode == 143, err[-1500:]
    assert took < PROMPT_S, f"{took:.1f} s to stop"
    assert said(err, "envrigger", signal.SIGTERM) == f"1 finished round kept in {out}; continue with `envrigger run --resume {out}`"
    assert not (out / "final.json").exists()
    resumed = subprocess.run([str(BIN / "envrigger"), "run", "--resume", str(out)], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-1500:]
    library = Library(out / "library.db", create=False)
    assert len(library.rounds()) == 2 and (out / "final.json").is_file()
    library.close()


# == envrigger ledger eval =============================================================================================
def test_sigterm_mid_ledger_eval_keeps_the_finished_tasks_and_the_next_eval_plays_only_the_rest(tmp_path):
    ledger = tmp_path / "ledger.db"
    made = subprocess.run([str(BIN / "envrigger"), "ledger", "init", str(ledger), "--env", CODE, "--tasks", "12"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert made.returncode == 0, made.stderr
    release = ["ledger", "eval", str(ledger), "--release", "v1", "--model", "scripted", "--concurrency", "2"]
    with ChatServer(model, delay_s=0.3) as server:
        process = launch("envrigger", *release, "--base-url", server.url)
        assert wait_for(lambda: started(server) >= 5 or process.poll() is not None, 120)
        finished = started(server) - 2
        took, err = stop(process, signal.SIGTERM)
        assert process.returncode == 143, err[-1500:]
        assert took < PROMPT_S, f"{took:.1f} s to stop"
        (run,) = (tmp_path / "ledger.db.runs").iterdir()
        store = TrajectoryStore(run)
        kept = whole_episodes(store)
        assert store.verify() == [] and len(kept) >= finished >= 3 and ended_by_the_env(kept), kept
        assert said(err, "envrigger", signal.SIGTERM) == f"{len(kept)} finished episodes kept in {run}"
        before = started(server)
        again = subprocess.run([str(BIN / "envrigger"), *release, "--base-url", server.url], capture_output=True, text=True, timeout=300,
                               env={**os.environ, "OPENAI_API_KEY": "local"})  # fmt: skip
        assert again.returncode == 0, again.stderr[-1500:]
        assert started(server) - before == 12 - len(kept)  # the kept tasks are not played (nor paid for) again
    seeds = [e.seed for e in TrajectoryStore(run).iter_episodes()]
    assert len(seeds) == len(set(seeds)) == 12  # one episode per task, the kept ones among them


# == envharness serve --record =========================================================================================
def call(url: str, method: str = "GET", body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_of_envharness_serve_keeps_every_finished_session(tmp_path, number):
    spec, run, port = tmp_path / "lake.json", tmp_path / "served", free_port()
    spec.write_text(LAKE.to_json())
    url = f"http://127.0.0.1:{port}"
    cmd = [str(BIN / "envharness"), "serve", str(spec), "--port", str(port), "--record", str(run)]
    process = start(cmd, f"{url}/healthz", preexec_fn=as_a_shell_starts_it)
    try:
        for seed in range(3):  # right, then down into the hole at (1, 1): finished in two steps
            session = call(f"{url}/v1/sessions", "POST", {"seed": seed})["session_id"]
            assert [call(f"{url}/v1/sessions/{session}/step", "POST", {"action": a})["terminated"] for a in (2, 1)] == [False, True]
        unfinished = call(f"{url}/v1/sessions", "POST", {"seed": 9})["session_id"]
        call(f"{url}/v1/sessions/{unfinished}/step", "POST", {"action": 0})
        took, err = stop(process, number)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == EXIT_CODES[number], err[-1500:]
    assert took < PROMPT_S, f"{took:.1f} s to stop"
    store = TrajectoryStore(run)
    assert store.verify() == [] and sorted((e.seed, e.reason) for e in store.iter_episodes()) == [(0, "hole"), (1, "hole"), (2, "hole")]
    assert said(err, "envharness", number) == f"3 finished episodes kept in {run}"


# == envrigger proxy ===================================================================================================
def test_sighup_stops_the_proxy_after_answering_and_recording_the_call_in_flight(tmp_path):
    from envrigger.live.calls import CallLog

    def upstream(request: dict[str, Any]) -> Reply:
        if request["messages"][-1]["content"] == "slow":
            time.sleep(1.5)  # in flight when the stop lands
        return Reply(content="ok")

    run, port = tmp_path / "live", free_port()
    proxy = f"http://127.0.0.1:{port}/sessions/s1/v1/chat/completions"
    with ChatServer(upstream) as server:
        process = start([str(BIN / "envrigger"), "proxy", "--upstream", server.url, "--run", str(run), "--port", str(port)],
                        f"http://127.0.0.1:{port}/healthz", preexec_fn=as_a_shell_starts_it)  # fmt: skip
        try:
            for i in range(3):
                assert call(proxy, "POST", {"model": "scripted", "messages": [{"role": "user", "content": f"hi {i}"}]})["choices"]
            answers: list[Any] = []
            slow = {"model": "scripted", "messages": [{"role": "user", "content": "slow"}]}
            caller = threading.Thread(target=lambda: answers.append(call(proxy, "POST", slow)))
            caller.start()
            assert wait_for(lambda: len(server.requests) == 4, 10)
            took, err = stop(process, signal.SIGHUP)
            caller.join(timeout=30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 129, err[-1500:]
    assert took < PROMPT_S, f"{took:.1f} s to stop"
    assert answers and answers[0]["choices"][0]["message"]["content"] == "ok"  # the caller in flight got its answer
    calls = CallLog(run).read("s1")
    assert [c["envrigger.http.status"] for c in calls] == [200] * 4
    assert said(err, "envrigger", signal.SIGHUP) == f"4 model calls kept in {run / 'calls.jsonl'}"


def test_a_stop_of_the_proxy_is_not_held_by_an_upstream_that_never_answers(tmp_path):
    from envrigger.live.calls import CallLog

    run, port = tmp_path / "live", free_port()
    proxy = f"http://127.0.0.1:{port}/sessions/s1/v1/chat/completions"
    with ChatServer(lambda request: Reply(hang=True)) as server:  # hangs for 60 s; the proxy's own deadline is 600 s
        process = start([str(BIN / "envrigger"), "proxy", "--upstream", server.url, "--run", str(run), "--port", str(port)],
                        f"http://127.0.0.1:{port}/healthz", preexec_fn=as_a_shell_starts_it)  # fmt: skip
        statuses: list[int] = []

        def caller() -> None:
            try:
                call(proxy, "POST", {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]})
            except urllib.error.HTTPError as refused:
                statuses.append(refused.code)

        waiting = threading.Thread(target=caller, daemon=True)
        waiting.start()
        try:
            assert wait_for(lambda: len(server.requests) == 1, 10)
            took, err = stop(process, signal.SIGTERM)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        waiting.join(timeout=10)
    assert process.returncode == 143, err[-1500:]
    assert took < PROMPT_S + 1, f"{took:.1f} s to stop"  # the grace for calls in flight, then the call is cut
    assert statuses == [503]  # the caller is answered, in one line, not left hanging
    (recorded,) = CallLog(run).read("s1")
    assert recorded["envrigger.http.status"] == 503 and "the proxy was stopped" in recorded["envrigger.error"]
    assert said(err, "envrigger", signal.SIGTERM) == f"1 model call kept in {run / 'calls.jsonl'}"


# == the mechanism =====================================================================================================
def test_polite_stops_raise_ctrl_c_s_exception_then_give_back_the_handlers_and_leave_an_ignored_signal_ignored():
    from envharness.polite_stop import Stopped, polite_stops

    def mine(number: int, frame: Any) -> None:
        raise AssertionError("the handler before")

    before = {number: signal.getsignal(number) for number in EXIT_CODES}
    signal.signal(signal.SIGTERM, mine)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup leaves it: the user asked for SIGHUP to be ignored
    try:
        with polite_stops("prog") as stops, pytest.raises(KeyboardInterrupt) as raised:
            signal.raise_signal(signal.SIGHUP)  # ignored: nothing happens
            signal.raise_signal(signal.SIGTERM)
        assert isinstance(raised.value, Stopped) and stops.stop is raised.value and stops.stop.exit_code == 143
        assert signal.getsignal(signal.SIGTERM) is mine and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def test_a_stop_line_is_printed_once_and_names_the_signal_even_for_a_short_command(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", "import os, signal, sys\nfrom envharness.command_line import run_cli\nimport typer\napp = typer.Typer()\n"
         "@app.command()\ndef go() -> None:\n    os.kill(os.getpid(), signal.SIGTERM)\n    signal.pause()\n"
         "@app.command()\ndef other() -> None:\n    pass\nsys.exit(run_cli(app, ['go'], 'prog'))"],
        capture_output=True, text=True, timeout=60, preexec_fn=as_a_shell_starts_it,
    )  # fmt: skip
    assert out.returncode == 143 and out.stderr.strip() == "prog: interrupted by SIGTERM: what had finished is stored", out.stderr
