"""Attacks on two guarantees: validation's budget in env steps, and ``ask_json``'s retries.

Written as a hostile gate author, env, model endpoint or client would, grouped by root cause:

- **B1. Every env step validation takes is charged.** The gates' own searches, the
  reference play and replays count, whichever gate took them, however it took them
  (after an ``own_budget`` gate, on a worker thread, in an episode that raised).
- **B2. The same count and decision on every machine.** No clock decides unless
  ``timeout_s`` is set (but every rollout's 600 s hang guard per episode): a loaded machine
  (a clock that runs fast) admits what an idle one does.
- **B3. The budget's settings and resumes.** Bounds, odd values, a run saved before the field.
- **R1. Asked again in the same form, bounded, counted.** Busy statuses, lost connections,
  a server alternating refusals and busy answers; what is not busy is asked once.
- **R2. Retry-After is honoured and capped**, whatever the endpoint writes in it.
- **R3. One call, one deadline**, however many attempts and however the endpoint paces them.
- **R4. The key stays secret** when the endpoint echoes it in every busy answer.
- **R5. Sockets are closed** across retries.

Every env is a real Gymnasium/MiniGrid env (FrozenLake 8x8, MiniGrid-Unlock), every
endpoint a real HTTP server on 127.0.0.1 answering the real ``openai`` client. A hostile review
by a helper that did not write the code; the comments ``Was a failing attack (fixed)`` name
the root cause of each of the 10 attacks (6 causes) that failed when it was written.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
from hostile_http import Answer, RawEndpoint, deadline, sockets_to

from envharness import HarnessSpec
from envrigger.agents import Endpoint
from envrigger.diagnose import Diagnosis, Finding
from envrigger.loop.config import LoopConfig, ValidationConfig
from envrigger.loop.gates import GATES, Gate, GateResult, register_gate
from envrigger.loop.llm_propose import llm_propose
from envrigger.loop.propose import Candidate
from envrigger.loop.validate import Validator
from envrigger.policies import RandomPolicy
from envrigger.skills import Trace
from envrigger.skills.induce import induce_skills
from envrigger.structured import NoAnswer, ask_json

pytest.importorskip("openai", reason='the LLM proposer and induction need the llm extra: pip install "envharness[llm]"')

KEY = "sk-budgetretry-7f3a9c1e5d2b8a4605"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


# -- envs, candidates, gates ------------------------------------------------------------------------------------------
LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})
UNLOCK = HarnessSpec(env_id="MiniGrid-Unlock-v0")
SEEDS = list(range(3_000_000, 3_000_200))
NEAR = {"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}}


def candidate(base: HarnessSpec, *transforms: dict[str, Any]) -> Candidate:
    spec = base.extended(*transforms)
    return Candidate(spec=spec, added=list(transforms), finding="terminal_cause:hole", finding_stats={}, rationale="t", origin="catalog")


def validator(base: HarnessSpec, path: Any, policy: Any = None, **config: Any) -> Validator:
    policy = policy or RandomPolicy(base.build().action_space, seed=0)
    return Validator(policy, base, path, ValidationConfig(backend="serial", **config))


@contextmanager
def registered(*gates: type[Gate]) -> Iterator[None]:
    """The gates in the registry for the block, out of it after (validators built inside see them)."""
    try:
        for gate in gates:
            register_gate(gate)
        yield
    finally:
        for gate in gates:
            GATES.pop(gate.name, None)


class Searches(Gate):
    """Finds the subgoals of four original levels (MiniGrid's search, the validator's own charged helper)."""

    name, order = "attack_searches", 2

    def run(self, context, seeds):
        for seed in seeds[:4]:
            context.validator.subgoals_of(seed)
        return GateResult(gate=self.name, passed=True)


class ThreadedSearches(Gate):
    """The same four searches, two at a time on worker threads (a gate author speeding its gate up)."""

    name, order = "attack_threaded_searches", 2

    def run(self, context, seeds):
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(context.validator.subgoals_of, seeds[:4]))
        return GateResult(gate=self.name, passed=True)


class OwnBudget(Gate):
    """A gate that declares its env steps its own (as the transfer gate does) and takes none."""

    name, order, timed, own_budget = "attack_own_budget", 1, False, True

    def run(self, context, seeds):
        return GateResult(gate=self.name, passed=True)


class Stops(Gate):
    """Ends validation here (a timed gate: the budget is checked before it)."""

    name, order = "attack_stops", 3

    def run(self, context, seeds):
        return GateResult(gate=self.name, passed=False, detail="stop")


class LeftThenCrash:
    """A solver that walks into FrozenLake's west wall (the episode never ends) and raises at its 41st action."""

    def reset(self, seed):
        self.acted = 0

    def act(self, obs, info):
        self.acted += 1
        if self.acted > 40:
            raise RuntimeError("the solver gave up")
        return 0


class CrashingPlays(Gate):
    """Plays the crashing solver through the validator's charged ``play`` 50 times, tolerating each crash."""

    name, order = "attack_crashing_plays", 2

    def run(self, context, seeds):
        env = LAKE.build()
        try:
            for seed in range(50):
                try:
                    context.validator.play(env, LeftThenCrash(), seed)
                except RuntimeError:
                    pass  # "the solver could not finish this level": a tolerant gate goes on
        finally:
            env.close()
        return GateResult(gate=self.name, passed=True)


class BatchedRandom(RandomPolicy):
    """RandomPolicy with ``act_batch``, as the PPO learner's policy has: validation plays it in lockstep batches."""

    @staticmethod
    def act_batch(policies, observations, infos):
        return [p.act(o, i) for p, o, i in zip(policies, observations, infos, strict=True)]


def fast_clock(monkeypatch, factor: float) -> None:
    """``time.perf_counter`` running ``factor`` times fast: a machine that much more loaded, as tests/envrigger/loop/test_budget.py does."""
    real = time.perf_counter
    start = real()
    monkeypatch.setattr(time, "perf_counter", lambda: start + factor * (real() - start))


# =====================================================================================================================
# B1. Every env step validation takes is charged
# =====================================================================================================================
def test_b1_searches_before_a_timed_gate_are_counted_and_refuse_past_the_budget(tmp_path):
    with registered(Searches, Stops):
        free = validator(UNLOCK, tmp_path / "free").validate(candidate(UNLOCK, NEAR), SEEDS)
        tight = validator(UNLOCK, tmp_path / "tight", candidate_max_steps=1000).validate(candidate(UNLOCK, NEAR), SEEDS)
    assert free.env_steps > 10_000 and free.error is None  # MiniGrid-Unlock's subgoal searches, charged
    assert tight.error is not None and tight.error.startswith("budget:") and tight.env_steps == free.env_steps
    assert [g.gate for g in tight.gates] == ["attack_searches"]  # refused before the next gate ran


# Was a failing attack (fixed): after a gate with own_budget=True, Validator.validate stops charging searches for good: `charged` is set once
# (validate.py:227-229) and spent() then reads no pending searches (validate.py:215), nor does the end (validate.py:247),
# so every later gate's searches (the stock solvability / no-shortcut searches after a custom own-budget gate at a low
# order, or any gate after the transfer gate) are neither in env_steps nor in the budget.
def test_b1_a_no_op_own_budget_gate_does_not_hide_the_searches_of_the_gates_after_it(tmp_path):
    with registered(Searches, Stops):
        plain = validator(UNLOCK, tmp_path / "plain", candidate_max_steps=1000).validate(candidate(UNLOCK, NEAR), SEEDS)
    with registered(OwnBudget, Searches, Stops):
        hidden = validator(UNLOCK, tmp_path / "hidden", candidate_max_steps=1000).validate(candidate(UNLOCK, NEAR), SEEDS)
    assert plain.env_steps > 10_000 and plain.error is not None and plain.error.startswith("budget:")
    assert hidden.env_steps == plain.env_steps, f"{hidden.env_steps} env steps recorded for {plain.env_steps} taken"
    assert hidden.error is not None and hidden.error.startswith("budget:"), hidden.error


# Was a failing attack (fixed): the searches' step counter is thread-local (envharness/adapters/minigrid_search.py:31 `_Taken(threading.local)`)
# and the validator reads only the validating thread's (validate.py:179, :215): a gate's searches run on a worker thread
# (even through the validator's own charged helper subgoals_of) are never charged, and the budget never sees them.
def test_b1_searches_a_gate_runs_on_worker_threads_are_charged_as_on_its_own_thread(tmp_path):
    with registered(Searches, Stops):
        serial = validator(UNLOCK, tmp_path / "serial", candidate_max_steps=1000).validate(candidate(UNLOCK, NEAR), SEEDS)
    with registered(ThreadedSearches, Stops):
        threaded = validator(UNLOCK, tmp_path / "threaded", candidate_max_steps=1000).validate(candidate(UNLOCK, NEAR), SEEDS)
    assert serial.env_steps > 10_000 and serial.error is not None and serial.error.startswith("budget:")
    assert threaded.env_steps == serial.env_steps, f"{threaded.env_steps} env steps recorded for {serial.env_steps} taken"
    assert threaded.error is not None and threaded.error.startswith("budget:"), threaded.error


# Was a failing attack (fixed): Validator.play charges an episode only when it returns (validate.py:127-130; replay likewise, :133-136): the
# steps of an episode whose solver or env raised are never charged, so a gate that tolerates such crashes plays any
# number of env steps past max_steps unseen (here 2,000 steps against a budget of 100, recorded as 0).
def test_b1_steps_of_a_played_episode_that_raised_are_charged(tmp_path):
    with registered(CrashingPlays, Stops):
        result = validator(LAKE, tmp_path / "v", candidate_max_steps=100).validate(candidate(LAKE, NEAR), SEEDS)
    assert result.env_steps >= 50 * 40, f"{result.env_steps} env steps recorded for 2,000 played"
    assert result.error is not None and result.error.startswith("budget:"), result.error


def test_b1_a_budget_exactly_what_validation_takes_passes_one_less_is_refused_alike_twice(tmp_path):
    whole = validator(LAKE, tmp_path / "whole", min_rollouts=30, max_rollouts=90).validate(candidate(LAKE, NEAR), SEEDS)
    exact = validator(LAKE, tmp_path / "exact", candidate_max_steps=whole.env_steps, min_rollouts=30, max_rollouts=90).validate(
        candidate(LAKE, NEAR), SEEDS
    )
    short = [
        validator(LAKE, tmp_path / f"short{i}", candidate_max_steps=whole.env_steps - 1, min_rollouts=30, max_rollouts=90).validate(
            candidate(LAKE, NEAR), SEEDS
        )
        for i in range(2)
    ]
    assert whole.passed and exact.passed and exact.env_steps == whole.env_steps
    assert all(not s.passed and s.error is not None and s.error.startswith("budget:") for s in short)
    assert (short[0].error, short[0].env_steps) == (short[1].error, short[1].env_steps)


def test_b1_a_huge_budget_is_no_budget_and_formats(tmp_path):
    from envrigger.loop.config import MOST_STEPS

    result = validator(LAKE, tmp_path / "v", candidate_max_steps=MOST_STEPS, min_rollouts=30, max_rollouts=90).validate(
        candidate(LAKE, NEAR), SEEDS
    )
    assert result.passed and result.error is None
    # Past the bound every size and count has (security round four, class 3): refused, naming the setting.
    with pytest.raises(ValueError, match="candidate_max_steps"):
        validator(LAKE, tmp_path / "w", candidate_max_steps=10**30)


# =====================================================================================================================
# B2. The same count and decision on every machine
# =====================================================================================================================
# Validation's rollouts keep rollout()'s per-episode hang guard (600 s of wall time, envrigger/rollout/run.py), the one
# clock left in validation with timeout_s unset, and documented so (docs/envrigger.md): an episode is cut only after
# 600 s, which no RL episode nears; a load that makes a run a thousand times slower changes nothing.
def test_b2_a_loaded_machine_counts_and_decides_as_an_idle_one_with_no_timeout_set(tmp_path, monkeypatch):
    def run(path):
        policy = BatchedRandom(LAKE.build().action_space, seed=0)
        return validator(LAKE, path, policy=policy, rollout_batch=8, min_rollouts=30, max_rollouts=90).validate(
            candidate(LAKE, NEAR), SEEDS
        )

    idle = run(tmp_path / "idle")
    fast_clock(monkeypatch, 1e3)  # a machine a thousand times slower
    loaded = run(tmp_path / "loaded")
    assert idle.passed and idle.error is None
    assert (loaded.passed, loaded.error, loaded.env_steps) == (idle.passed, idle.error, idle.env_steps), (
        f"idle: {idle.env_steps} steps, passed={idle.passed}; loaded: {loaded.env_steps} steps, passed={loaded.passed}"
    )


def test_b2_a_clock_asked_for_binds(tmp_path, monkeypatch):
    fast_clock(monkeypatch, 1e5)
    result = validator(LAKE, tmp_path / "v", candidate_timeout_s=5.0, min_rollouts=30, max_rollouts=90).validate(
        candidate(LAKE, NEAR), SEEDS
    )
    assert not result.passed and result.error is not None and result.error.startswith("timeout")


# =====================================================================================================================
# B3. The budget's settings and resumes
# =====================================================================================================================
def saved_config(**changes: Any) -> dict[str, Any]:
    return {**json.loads(LoopConfig(spec=LAKE).model_dump_json()), **changes}


def test_b3_a_run_saved_before_the_budget_resumes_with_its_300_s_clock_and_no_step_budget_and_the_clock_binds(tmp_path, monkeypatch):
    old = saved_config(candidate_timeout_s=300.0)  # the old default, written into every loop.json then
    old.pop("candidate_max_steps")
    config = LoopConfig.saved(json.dumps(old)).validation()
    assert (config.candidate_max_steps, config.candidate_timeout_s) == (None, 300.0)
    bare = {"spec": {"env_id": "FrozenLake-v1"}}  # a loop.json without either field
    assert (LoopConfig.saved(bare).candidate_max_steps, LoopConfig.saved(bare).candidate_timeout_s) == (None, 300.0)
    fast_clock(monkeypatch, 1e5)
    result = Validator(
        RandomPolicy(LAKE.build().action_space, seed=0), LAKE, tmp_path / "v", config.model_copy(update={"backend": "serial"})
    )
    outcome = result.validate(candidate(LAKE, NEAR), SEEDS)
    assert outcome.error is not None and outcome.error.startswith("timeout")


def test_b3_a_new_runs_budget_and_no_clock_survive_a_resume():
    config = LoopConfig.saved(LoopConfig(spec=LAKE).model_dump_json())
    assert (config.candidate_max_steps, config.candidate_timeout_s) == (10_000_000, None)
    none = LoopConfig.saved(json.dumps(saved_config(candidate_max_steps=None)))
    assert (none.validation().candidate_max_steps, none.validation().candidate_timeout_s) == (None, None)


@pytest.mark.parametrize(
    ("field", "value"),
    [("candidate_max_steps", 0), ("candidate_max_steps", -1), ("candidate_max_steps", 1.5), ("candidate_max_steps", 1e400),
     ("candidate_timeout_s", 0), ("candidate_timeout_s", -5), ("candidate_timeout_s", float("nan"))],
)  # fmt: skip
def test_b3_a_budget_out_of_bounds_in_loop_json_is_one_line_naming_the_field(field, value):
    with pytest.raises(ValueError) as caught:
        LoopConfig.saved(saved_config(**{field: value}), where="RUN/loop.json")
    assert "\n" not in str(caught.value) and str(caught.value).startswith(f"RUN/loop.json: {field}:")


# Was a failing attack (fixed): pydantic's lax int/float take a JSON boolean (config.py:176-177 and :111-112; MAX_STEPS / TIMEOUT_S are not strict):
# a hand-edited `"candidate_max_steps": true` ("on") is a budget of 1 env step that refuses every candidate, and
# `"candidate_timeout_s": true` a 1-second clock, silently. (Low severity: a hand-edited file; the proposer_format field
# refuses booleans.)
@pytest.mark.parametrize("field", ["candidate_max_steps", "candidate_timeout_s"])
def test_b3_a_boolean_budget_in_loop_json_is_refused_not_read_as_one(field):
    with pytest.raises(ValueError):
        config = LoopConfig.saved(saved_config(**{field: True}), where="RUN/loop.json")
        pytest.fail(f"{field}: true was read as {getattr(config, field)!r}")


# =====================================================================================================================
# Endpoint helpers
# =====================================================================================================================
MESSAGES = [{"role": "user", "content": "hi"}]


def completion(content: str) -> str:
    answer: dict[str, Any] = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m"}
    answer["choices"] = [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]
    answer["usage"] = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    return json.dumps(answer)


def error_body(message: str) -> str:
    return json.dumps({"error": {"message": message, "type": "server_error", "code": None}})


def form(request: dict[str, Any]) -> str:
    return (request.get("response_format") or {}).get("type", "none")


def busy(status: int = 503, retry: str | None = "0", message: str = "busy") -> Answer:
    return (status, error_body(message), "application/json", {} if retry is None else {"Retry-After": retry})


OK = (200, completion("{}"), "application/json")


def script(*answers: Answer) -> Callable[[dict[str, Any]], Answer]:
    """Answers in turn, the last one for ever after."""
    sent = iter(answers)
    last: list[Answer] = [answers[-1]]

    def answer(request: dict[str, Any]) -> Answer:
        last[0] = next(sent, last[0])
        return last[0]

    return answer


def ask(server: Any, attempts: int = 4, timeout_s: float = 10.0, answer_format: Any = "auto") -> Any:
    return ask_json(Endpoint(server.url, "m", attempts=attempts, timeout_s=timeout_s), MESSAGES, {"type": "object"},
                    max_tokens=16, answer_format=answer_format)  # fmt: skip


HOLE = "terminal_cause:hole"
DIAGNOSIS = Diagnosis(
    run="r", episodes=10, steps=80, failures=6, success_rate=0.4, success_ci=(0.1, 0.7), spec_hashes=[], policies=[],
    findings=[Finding(name=HOLE, title="falls in a hole", episodes=6, total=10, rate=0.6, rate_ci=(0.3, 0.8), failures=6, severity=1.0)],
)  # fmt: skip
PROPOSAL = json.dumps({"proposals": [{"finding": HOLE, "transforms": [{"name": "ActionSlip", "params": {"p": 0.1}}], "rationale": "r"}]})
LESSON = json.dumps({"skills": [{"text": "Take the coin as soon as it is listed.", "when": "tasks that end with a coin"}]})
TASKS = [Trace(0, "Go east. Then take the coin.", ("go east", "take coin"), (0.0, 1.0), True)]


def propose(
    answer: Callable[[dict[str, Any]], Answer], attempts: int = 4, timeout_s: float = 10.0
) -> tuple[list[Any], dict[str, int], RawEndpoint]:
    with RawEndpoint(answer) as server, deadline(60):
        candidates, counted = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "m", attempts=attempts, timeout_s=timeout_s))
    return candidates, counted, server


def induce(answer: Callable[[dict[str, Any]], Answer], attempts: int = 4) -> tuple[list[Any], dict[str, int], dict[str, int], RawEndpoint]:
    usage: dict[str, int] = {"model_calls": 7}  # spent before
    with RawEndpoint(answer) as server, deadline(60):
        skills, counted = induce_skills(Endpoint(server.url, "m", attempts=attempts, timeout_s=10.0), TASKS, usage=usage)
    return skills, counted, usage, server


class Dropping:
    """An HTTP endpoint on 127.0.0.1 that reads each request and hangs up without a word ``drops`` times, then answers."""

    def __init__(self, drops: int, answer: str) -> None:
        self.drops, self.answer, self.requests = drops, answer.encode(), 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.done = threading.Event()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.done.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                while True:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    if b"\r\n\r\n" not in data:
                        break
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = next(
                        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
                    )
                    while len(body) < length:
                        body += conn.recv(65536)
                    self.requests += 1
                    if self.requests <= self.drops:
                        break  # hang up: no status line, nothing
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                                 % (len(self.answer), self.answer))  # fmt: skip
                    break

    def __enter__(self) -> Dropping:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.done.set()
        self.listener.close()


# =====================================================================================================================
# R1. Asked again in the same form, bounded, counted
# =====================================================================================================================
def test_r1_busy_twice_then_an_answer_is_asked_in_the_same_form_and_counted_by_every_caller():
    with RawEndpoint(script(busy(503), busy(429), OK)) as server, deadline(60):
        asked = ask(server)
    assert (asked.refused, asked.requests, asked.retried) == (0, 3, 2) and server.forms() == ["json_schema"] * 3
    answered = script(busy(502), busy(504), (200, completion(PROPOSAL), "application/json"))
    candidates, counted, server = propose(answered)
    assert len(candidates) == 1 and counted == {"retried": 2} and len(server.requests) == 3
    skills, counted, usage, server = induce(script(busy(503), busy(408), (200, completion(LESSON), "application/json")))
    assert len(skills) == 1 and counted == {"retried": 2} and usage["model_calls"] == 7 + 3 == 7 + len(server.requests)


@pytest.mark.parametrize("attempts", [1, 2, 4])
def test_r1_always_busy_is_asked_exactly_attempts_times_and_each_counted(attempts):
    candidates, counted, server = propose(lambda request: busy(503), attempts=attempts)
    assert len(server.requests) == attempts and candidates == []
    assert counted == ({"retried": attempts - 1} if attempts > 1 else {}) | {"endpoint": 1}
    skills, counted, usage, server = induce(lambda request: busy(429), attempts=attempts)
    assert usage["model_calls"] == 7 + attempts == 7 + len(server.requests) and "endpoint" in counted


@pytest.mark.parametrize("status", [401, 403, 404, 413])
def test_r1_a_failure_that_is_not_busy_is_asked_once_even_with_attempts_to_spare(status):
    candidates, counted, server = propose(lambda request: busy(status), attempts=5)
    assert len(server.requests) == 1 and counted == {"endpoint": 1}


def test_r1_a_500_naming_response_format_on_the_only_form_is_no_busy_answer_to_ask_again():
    with RawEndpoint(lambda request: busy(500, message="unknown response_format type")) as server, deadline(60):
        with pytest.raises(NoAnswer):
            ask(server, attempts=5, answer_format="json_object")
    assert len(server.requests) == 1


def test_r1_a_server_alternating_busy_and_refusal_in_every_form_is_counted_exactly():
    seen: dict[str, int] = {}

    def answer(request: dict[str, Any]) -> Answer:  # each form: busy first, then a refusal; the last form answers
        seen[form(request)] = seen.get(form(request), 0) + 1
        if seen[form(request)] == 1:
            return busy(503)
        return OK if form(request) == "none" else (400, error_body("no such response_format"), "application/json")

    with RawEndpoint(answer) as server, deadline(60):
        asked = ask(server, attempts=4)
    assert server.forms() == ["json_schema", "json_schema", "json_object", "json_object", "none", "none"]
    assert (asked.refused, asked.requests, asked.retried) == (2, 6, 3)


@pytest.mark.parametrize("attempts", [1, 2, 4, 50])
def test_r1_alternating_busy_and_refusal_for_ever_is_bounded_by_attempts_and_the_three_forms(attempts):
    flip = [0]

    def answer(request: dict[str, Any]) -> Answer:
        flip[0] += 1
        return busy(503) if flip[0] % 2 else (422, error_body("response_format refused"), "application/json")

    with RawEndpoint(answer) as server, deadline(60):
        with pytest.raises(NoAnswer) as caught:
            ask(server, attempts=attempts)
    assert caught.value.requests == len(server.requests) <= attempts + 2


def test_r1_a_connection_dropped_twice_is_asked_again_and_counted():
    with Dropping(2, completion(PROPOSAL)) as server, deadline(60):
        candidates, counted = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "m", attempts=4, timeout_s=10.0))
    assert server.requests == 3 and len(candidates) == 1 and counted == {"retried": 2}
    with Dropping(10**6, completion(LESSON)) as server, deadline(60):
        usage: dict[str, int] = {}
        skills, counted = induce_skills(Endpoint(server.url, "m", attempts=3, timeout_s=10.0), TASKS, usage=usage)
    assert skills == [] and usage["model_calls"] == server.requests == 3 and counted == {"retried": 2, "endpoint": 1}


# =====================================================================================================================
# R2. Retry-After is honoured and capped, whatever the endpoint writes in it
# =====================================================================================================================
def gap_after(retry: str, timeout_s: float = 10.0) -> tuple[float | None, int]:
    """Seconds between the first request (answered busy with ``retry``) and the second; the requests made."""
    times: list[float] = []

    def answer(request: dict[str, Any]) -> Answer:
        times.append(time.monotonic())
        return busy(503, retry) if len(times) == 1 else OK

    with RawEndpoint(answer) as server, deadline(60):
        try:
            ask(server, attempts=4, timeout_s=timeout_s)
        except NoAnswer:
            pass
    return (times[1] - times[0] if len(times) > 1 else None), len(times)


@pytest.mark.parametrize(
    ("retry", "low", "high"),
    [("-5", 0.0, 0.4), ("0", 0.0, 0.4), ("nan", 0.4, 1.2), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.4, 1.2), ("soon", 0.4, 1.2),
     ("1", 0.9, 1.8)],
    ids=["negative", "zero", "nan", "http_date_past", "word", "one"],
)  # fmt: skip
def test_r2_a_retry_after_the_client_can_read_is_honoured_else_the_doubling_wait(retry, low, high):
    gap, made = gap_after(retry)
    assert made == 2 and gap is not None and low <= gap <= high, (retry, gap)


def test_r2_a_retry_after_past_the_deadline_is_not_waited_for_and_the_call_ends_at_once():
    start = time.monotonic()
    gap, made = gap_after("1e9", timeout_s=3.0)  # capped at 30 s, more than the call has: no second request
    assert made == 1 and time.monotonic() - start < 1.5


# Was a failing attack (fixed): retry_after (structured.py:143) returns the default wait (0.5 s) for a Retry-After that parses to infinity
# ("1e400", "inf", "Infinity") instead of capping it at 30 s as it caps "1e9": an endpoint that asks to be left alone
# for ever is asked again after half a second, where one asking for 1e9 s is not asked again at all.
@pytest.mark.parametrize("retry", ["1e400", "inf", "Infinity"])
def test_r2_an_infinite_retry_after_is_capped_at_30_s_like_a_huge_one_not_ignored(retry):
    start = time.monotonic()
    gap, made = gap_after(retry, timeout_s=3.0)
    assert made == 1, f"Retry-After {retry}: asked again after {gap:.2f} s"
    assert time.monotonic() - start < 1.5


# =====================================================================================================================
# R3. One call, one deadline
# =====================================================================================================================
def test_r3_a_thousand_attempts_of_instant_503s_end_at_the_calls_deadline_and_each_is_counted():
    start = time.monotonic()
    candidates, counted, server = propose(lambda request: busy(503, "0"), attempts=1000, timeout_s=2.0)
    took = time.monotonic() - start
    assert took < 2.0 + 0.5, f"{took:.2f} s for a 2 s call ({len(server.requests)} requests)"
    assert 1 < len(server.requests) <= 1000 and counted == {"retried": len(server.requests) - 1, "endpoint": 1}


def test_r3_slow_503s_without_retry_after_end_at_the_calls_deadline():
    def answer(request: dict[str, Any]) -> Answer:
        time.sleep(0.4)
        return busy(503, None)

    start = time.monotonic()
    with RawEndpoint(answer) as server, deadline(60):
        with pytest.raises(NoAnswer) as caught:
            ask(server, attempts=1000, timeout_s=2.5)
    took = time.monotonic() - start
    assert took < 2.5 + 0.5 and caught.value.requests == len(server.requests) >= 2


def test_r3_a_hang_after_a_refusal_ends_at_the_calls_deadline_not_a_second_one():
    refs: list[RawEndpoint] = []

    def answer(request: dict[str, Any]) -> Answer:
        if form(request) == "json_schema":
            return (400, error_body("response_format unsupported"), "application/json")
        refs[0].stop.wait(30)
        return OK

    with RawEndpoint(answer) as server, deadline(60):
        refs.append(server)
        start = time.monotonic()
        with pytest.raises(NoAnswer) as caught:
            ask(server, attempts=4, timeout_s=1.5)
        took = time.monotonic() - start
    assert took < 1.5 + 0.5 and caught.value.refused == 1 and server.forms() == ["json_schema", "json_object"]


def test_r3_a_retry_after_that_fits_once_is_waited_once_and_never_past_the_deadline():
    start = time.monotonic()
    with RawEndpoint(lambda request: busy(503, "1.5")) as server, deadline(60):
        with pytest.raises(NoAnswer):
            ask(server, attempts=10, timeout_s=2.5)
    took = time.monotonic() - start
    assert len(server.requests) == 2 and 1.4 <= took < 2.5 + 0.3


# =====================================================================================================================
# R4. The key stays secret when the endpoint echoes it in every busy answer
# =====================================================================================================================
def echo_key(request: dict[str, Any]) -> Answer:
    return busy(429, "0", message=f"rate limit for key {KEY}; retry later ({KEY})")


def test_r4_a_key_echoed_in_every_429_is_in_no_count_and_not_in_the_exceptions_own_text():
    candidates, counted, _ = propose(echo_key, attempts=3)
    assert counted == {"retried": 2, "endpoint": 1} and KEY not in json.dumps(counted)
    skills, counted, usage, _ = induce(echo_key, attempts=3)
    assert KEY not in json.dumps([counted, usage]) and usage["model_calls"] == 10
    with RawEndpoint(echo_key) as server, deadline(60):
        with pytest.raises(NoAnswer) as caught:
            ask(server, attempts=3)
    assert KEY not in str(caught.value) and KEY not in repr(caught.value)


# Was a failing attack (fixed): ask_json raises NoAnswer `from error` and keeps the openai error whole in `.error` (structured.py:151, :219):
# the endpoint's body, with the key it echoed, is in the exception as Python prints it uncaught or as a logger's
# exc_info prints it. The chat agent's _send raises `from None` with a scrubbed detail (chat.py:421-432) for this reason.
def test_r4_a_key_echoed_in_every_429_is_not_in_the_exception_as_a_traceback_prints_it():
    with RawEndpoint(echo_key) as server, deadline(60):
        with pytest.raises(NoAnswer) as caught:
            ask(server, attempts=3)
    printed = "".join(traceback.format_exception(caught.value))
    assert KEY not in printed, "the key is in the traceback of ask_json's NoAnswer (its chained cause)"
    assert KEY not in str(caught.value.error), "the key is in NoAnswer.error"


# =====================================================================================================================
# R5. Sockets are closed across retries
# =====================================================================================================================
def test_r5_calls_asked_again_leave_no_socket_open():
    import gc
    import warnings

    counter = [0]

    def answer(request: dict[str, Any]) -> Answer:  # per call of three requests: busy, busy, answered; then busy for ever
        counter[0] += 1
        return OK if counter[0] <= 30 and counter[0] % 3 == 0 else busy(503, "0")

    gc.collect()  # earlier tests' garbage is collected before the record starts
    with RawEndpoint(answer) as server, deadline(120), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        port = server.httpd.server_address[1]
        before = sockets_to(port)
        for _ in range(10):
            assert ask(server, attempts=3).retried == 2
        for _ in range(5):
            with pytest.raises(NoAnswer):
                ask(server, attempts=3)
        time.sleep(0.2)  # the server's handler threads see the hang-ups
        opened = sockets_to(port) - before
        gc.collect()
    assert opened <= 0, f"{opened} sockets left open by 15 calls of 3 requests each"
    ours = f"'127.0.0.1', {server.httpd.server_address[1]})"  # a socket to this test's server, not another test's garbage
    assert not [w for w in caught if issubclass(w.category, ResourceWarning) and ours in str(w.message)]
