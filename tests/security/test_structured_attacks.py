"""Attacks on asking a model for JSON under its schema (issue 42): ``ask_json``, the proposer's schema, the skills' induction.

Written as a hostile endpoint, a hostile model and a hostile schema author would, grouped
by the root cause each closes:

- **S1. Another form only on a refusal, bounded and counted.** An endpoint that refuses
  every form forever is asked three times at most; a failure that is not a refusal (401,
  403, 404, 429, a plain 500, 503) is asked once; every refusal is counted.
- **S2. A refusal is read from what the endpoint sent, not from how the client prints it.**
  llama-cpp-python's 500 naming ``response_format`` is a refusal whatever the shape of its
  body (an ``error.message``, a bare ``error`` string, FastAPI's ``detail``, plain text).
- **S3. One call, one deadline.** The proposer's timeout is "seconds one proposer call
  may take in all": refusals that each take most of it do not multiply it.
- **S4. The schema constrains the form, never the checks, and never excludes what the
  parser takes.** An answer valid under the very schema sent still meets every bound; a
  default every offered transform has is valid under it; hostile finding names, nine
  findings, none, ``n`` of 0, -1 or a million.
- **S5. The key stays secret.** An endpoint that knows the key (it is sent to it) never
  gets it into a count, an exception's text, a candidate's spec or label, or a lesson.
- **S6. Induction is total and its spend is honest.** Whatever the endpoint sends,
  ``induce_skills`` counts and never raises; ``model_calls`` is the requests made, tokens
  are never negative.
- **S7. The echo filter drops echoes, not lessons.** Real short lessons and lessons in
  other scripts are kept; the placeholder given back in the ways a small model does is dropped.
- **S8. ``grammar_ready`` is total and keeps grammars small on any schema.** Caps that are
  floats or strings, large minimums, enum and const values (data, not keywords), deep nesting.
- **S9. A format is one of four, everywhere.** ``LoopConfig``, ``envrigger run`` (exit 2, one
  line), ``--resume``, an old ``loop.json`` (``text``), and ``ask_json`` itself.

Every model is a real HTTP server on 127.0.0.1 answering the real ``openai`` client
(:class:`~envrigger.agents.scripted.ChatServer`, or :class:`RawEndpoint` for raw bodies and
status codes); nothing is mocked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from hostile_http import Answer, RawEndpoint, deadline, sockets_to
from pydantic import ValidationError

from envharness import HarnessSpec
from envharness.transforms import TRANSFORMS
from envrigger.agents import Endpoint
from envrigger.agents.scripted import ChatServer, Reply
from envrigger.diagnose import Diagnosis, Finding
from envrigger.loop import LoopConfig
from envrigger.loop.llm_propose import answer_schema, llm_propose, parse_proposals, proposer_prompt
from envrigger.loop.propose import transforms_label
from envrigger.skills import Trace
from envrigger.skills.induce import ANSWER_SCHEMA, induce_skills, parse_skills
from envrigger.structured import SMALL_CAP, NoAnswer, ask_json, grammar_ready

pytest.importorskip("openai", reason='the LLM proposer and induction need the llm extra: pip install "envharness[llm]"')

KEY = "sk-structured-5be1c0ffee9d2a7741"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def completion(content: Any, usage: Any = None) -> str:
    answer: dict[str, Any] = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m"}
    answer["choices"] = [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]
    if usage is not None:
        answer["usage"] = usage
    return json.dumps(answer)


def error_body(message: str) -> str:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": None}})


def form(request: dict[str, Any]) -> str:
    return (request.get("response_format") or {}).get("type", "none")


# -- what is asked --------------------------------------------------------------------------------------------------
LAKE = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "8x8", "is_slippery": False})


def finding(name: str) -> Finding:
    return Finding(name=name, title="falls in a hole", episodes=6, total=10, rate=0.6, rate_ci=(0.3, 0.8), failures=6, severity=1.0)


def diagnosis(*names: str) -> Diagnosis:
    return Diagnosis(
        run="r", episodes=10, steps=80, failures=6, success_rate=0.4, success_ci=(0.1, 0.7), spec_hashes=[], policies=[],
        findings=[finding(n) for n in names],
    )  # fmt: skip


HOLE = "terminal_cause:hole"
DIAGNOSIS = diagnosis(HOLE)


def slip(p: float = 0.1, name: str = HOLE) -> dict[str, Any]:
    return {"finding": name, "transforms": [{"name": "ActionSlip", "params": {"p": p}}], "rationale": "slips near holes"}


VALID = json.dumps({"proposals": [slip()]})


def propose(answer: Callable[[dict[str, Any]], Answer], **kwargs: Any) -> tuple[list[Any], dict[str, int], RawEndpoint]:
    timeout = kwargs.pop("timeout_s", 60.0)
    found = kwargs.pop("diagnosis", DIAGNOSIS)
    with RawEndpoint(answer) as server, deadline(120):
        candidates, rejected = llm_propose(found, LAKE, Endpoint(server.url, "m", attempts=1, timeout_s=timeout), **kwargs)
    return candidates, rejected, server


def tasks() -> list[Trace]:
    return [Trace(0, "Go east. Then take the coin.", ("go east", "take coin"), (0.0, 1.0), True)]


GOOD = json.dumps({"skills": [{"text": "Take the coin as soon as it is listed.", "when": "tasks that end with a coin"}]})


# =====================================================================================================================
# S1. Another form only on a refusal, bounded and counted
# =====================================================================================================================
@pytest.mark.parametrize("status", [400, 422])
def test_s1_an_endpoint_that_refuses_every_form_forever_is_asked_three_times_and_each_refusal_counted(status):
    candidates, rejected, server = propose(lambda request: (status, error_body("unsupported"), "application/json"))
    assert server.forms() == ["json_schema", "json_object", "none"]
    assert candidates == [] and rejected == {"format_refused": 2, "endpoint": 1}


@pytest.mark.parametrize("named", ["json_schema", "json_object", "text"])
def test_s1_a_form_named_and_refused_is_asked_once_and_is_the_endpoint_failing(named):
    candidates, rejected, server = propose(lambda request: (400, error_body("no"), "application/json"), answer_format=named)
    assert server.forms() == [named if named != "text" else "none"]
    assert candidates == [] and rejected == {"endpoint": 1}


def test_s1_a_422_for_another_reason_than_the_format_is_taken_for_a_refusal_but_costs_three_requests_at_most():
    # A 422 about the messages is not about the format: auto asks again in the next two forms (the same prompt,
    # refused the same way). Accepted: bounded at three requests, and the run goes on with the refusals counted.
    why = error_body("messages.1.content: field required")
    candidates, rejected, server = propose(lambda request: (422, why, "application/json"))
    assert len(server.requests) == 3 and candidates == [] and rejected == {"format_refused": 2, "endpoint": 1}


@pytest.mark.parametrize("status", [401, 403, 404, 408, 409, 413, 429, 500, 502, 503])
def test_s1_a_failure_that_is_not_a_refusal_is_asked_once_in_one_form(status):
    candidates, rejected, server = propose(lambda request: (status, error_body("down for maintenance"), "application/json"))
    assert server.forms() == ["json_schema"] and candidates == [] and rejected == {"endpoint": 1}


def test_s1_a_refused_form_then_a_garbage_body_is_one_refusal_and_one_failure():
    def answer(request: dict[str, Any]) -> Answer:
        return (400, error_body("no"), "application/json") if form(request) == "json_schema" else (200, "not json", "application/json")

    candidates, rejected, server = propose(answer)
    assert server.forms() == ["json_schema", "json_object"] and candidates == [] and rejected == {"format_refused": 1, "endpoint": 1}


def test_s1_each_form_carries_the_same_messages_and_the_schema_forms_the_same_schema():
    candidates, rejected, server = propose(lambda request: (400, error_body("no"), "application/json"))
    first, second, third = server.requests
    assert first["messages"] == second["messages"] == third["messages"]
    assert first["response_format"]["json_schema"]["schema"] == second["response_format"]["schema"]
    assert "response_format" not in third and first["max_tokens"] == second["max_tokens"] == third["max_tokens"]


# =====================================================================================================================
# S2. A refusal is read from what the endpoint sent, not from how the client prints it
# =====================================================================================================================
REFUSAL_BODIES = {
    "error_message": (error_body("Unknown response_format type: json_schema"), "application/json"),
    "error_a_string": (json.dumps({"error": "Unknown response_format type: json_schema"}), "application/json"),
    "fastapi_detail": (json.dumps({"detail": "Unknown response_format type: json_schema"}), "application/json"),
    "plain_text": ("Internal error: unknown response_format type json_schema", "text/plain"),
}


@pytest.mark.parametrize("shape", sorted(REFUSAL_BODIES))
def test_s2_a_500_naming_response_format_is_a_refusal_whatever_the_shape_of_its_body(shape):
    text, ctype = REFUSAL_BODIES[shape]

    def answer(request: dict[str, Any]) -> Answer:  # llama-cpp-python's server, behind whatever proxy
        return (500, text, ctype) if form(request) == "json_schema" else (200, completion(VALID), "application/json")

    candidates, rejected, server = propose(answer)
    assert server.forms() == ["json_schema", "json_object"], shape
    assert [c.added[0].name for c in candidates] == ["ActionSlip"] and rejected == {"format_refused": 1}, shape


# =====================================================================================================================
# S3. One call, one deadline
# =====================================================================================================================
def test_s3_slow_refusals_of_every_form_end_within_the_calls_timeout_not_three_of_them():
    def answer(request: dict[str, Any]) -> Answer:
        time.sleep(0.7)  # each refusal takes most of the timeout
        return (400, error_body("no"), "application/json")

    start = time.monotonic()
    candidates, rejected, server = propose(answer, timeout_s=1.0)
    took = time.monotonic() - start
    assert candidates == [] and "endpoint" in rejected
    assert took < 1.0 + 0.6, f"{took:.1f} s for a call of 1 s in all ({len(server.requests)} requests)"


def test_s3_an_endpoint_that_hangs_on_the_first_form_costs_one_timeout_and_one_request():
    server_ref: list[RawEndpoint] = []

    def answer(request: dict[str, Any]) -> Answer:
        server_ref[0].stop.wait(30)
        return (200, completion(VALID), "application/json")

    with RawEndpoint(answer) as server, deadline(60):
        server_ref.append(server)
        start = time.monotonic()
        candidates, rejected = llm_propose(DIAGNOSIS, LAKE, Endpoint(server.url, "m", attempts=1, timeout_s=1.0))
        took = time.monotonic() - start
    assert candidates == [] and rejected == {"endpoint": 1} and server.forms() == ["json_schema"]  # a timeout is no refusal
    assert took < 5.0


def test_s3_a_call_leaves_no_connection_open_whichever_forms_were_refused():
    """Twenty calls, each refused twice before an answer: no socket stays open for the garbage collector to find."""
    import gc
    import warnings

    def answer(request: dict[str, Any]) -> Answer:
        if form(request) != "none":
            return (400, error_body("response_format is not supported"), "application/json")
        return (200, completion(VALID), "application/json")

    gc.collect()  # earlier tests' garbage is collected before the record starts
    with RawEndpoint(answer) as server, deadline(120), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        port = server.httpd.server_address[1]
        before = sockets_to(port)
        for _ in range(20):
            response, refused, _ = ask_json(
                Endpoint(server.url, "m", attempts=1), [{"role": "user", "content": "hi"}], {"type": "object"}, max_tokens=8
            )
            assert refused == 2 and response.choices[0].message.content == VALID
        opened = sockets_to(port) - before
        gc.collect()
    assert opened <= 0, f"{opened} sockets left open by 20 calls"
    ours = f"'127.0.0.1', {server.httpd.server_address[1]})"  # a socket to this test's server, not another test's garbage
    assert not [w for w in caught if issubclass(w.category, ResourceWarning) and ours in str(w.message)]


# =====================================================================================================================
# S4. The schema constrains the form, never the checks, and never excludes what the parser takes
# =====================================================================================================================
def test_s4_an_answer_valid_under_the_very_schema_sent_still_meets_every_bound():
    jsonschema = pytest.importorskip("jsonschema")
    # 5,000 actions, each within int32: the schema sent has no maxItems (a large cap is left to the parser).
    wide = {"finding": HOLE, "transforms": [{"name": "BlockAction", "params": {"actions": [1] * 5000}}], "rationale": "x"}
    answer = {"proposals": [wide]}
    sent: list[dict[str, Any]] = []

    def reply(request: dict[str, Any]) -> Answer:
        sent.append(request["response_format"]["json_schema"]["schema"])
        return (200, completion(json.dumps(answer)), "application/json")

    candidates, rejected, _ = propose(reply)
    jsonschema.validate(answer, sent[0])  # the endpoint answered exactly in the form asked
    assert candidates == [] and rejected == {"invalid": 1}  # and the parser still refused it


@pytest.mark.parametrize("env", [LAKE, HarnessSpec(env_id="CartPole-v1"), HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")])
def test_s4_every_offered_transforms_default_the_parser_accepts_is_valid_under_the_schema(env):
    jsonschema = pytest.importorskip("jsonschema")
    found = diagnosis("weakness")
    schema = answer_schema(found, env)
    jsonschema.Draft202012Validator.check_schema(schema)
    offered = schema["properties"]["proposals"]["items"]["properties"]["transforms"]["items"]["anyOf"]
    checked = 0
    for alternative in offered:
        name = alternative["properties"]["name"]["const"]
        try:
            params = TRANSFORMS[name]().to_spec()["params"]
        except Exception:  # required parameters: no default to try
            continue
        answer = {"proposals": [{"finding": "weakness", "transforms": [{"name": name, "params": params}], "rationale": "r"}]}
        _, rejected = parse_proposals(json.dumps(answer), found, env, "m", "h")
        if rejected.get("invalid"):
            continue  # the parser refuses it here: the schema may too
        errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(answer)]
        assert not errors, (name, params, errors)
        checked += 1
    assert checked >= 3


HOSTILE_NAMES = [
    'quote"and\\backslash',
    "new\nline and {{ 7 * 191 }} and {% raw %}",
    "nul\u0000and\u2028separator",
    "x" * 5000,
    "ünïcødé:🔥",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=["quotes", "template", "controls", "long", "unicode"])
def test_s4_a_hostile_finding_name_is_an_enum_value_exactly_and_an_answer_naming_it_is_taken(name):
    found = diagnosis(name)
    sent: list[dict[str, Any]] = []

    def reply(request: dict[str, Any]) -> Answer:
        sent.append(request)
        return (200, completion(json.dumps({"proposals": [slip(name=name)]})), "application/json")

    candidates, rejected, _ = propose(reply, diagnosis=found)
    enum = sent[0]["response_format"]["json_schema"]["schema"]["properties"]["proposals"]["items"]["properties"]["finding"]["enum"]
    assert enum == [name] and [c.finding for c in candidates] == [name] and rejected == {}
    assert "1337" not in sent[0]["messages"][-1]["content"]  # a name is data in the prompt, never template


def test_s4_nine_findings_the_schema_and_prompt_name_the_same_eight_and_every_one_the_schema_allows_the_parser_takes():
    names = [f"cause:{i}" for i in range(9)]
    found = diagnosis(*names)
    enum = answer_schema(found, LAKE)["properties"]["proposals"]["items"]["properties"]["finding"]["enum"]
    prompt = proposer_prompt(found, LAKE)
    assert enum == names[:8] and all(f"- {n}:" in prompt for n in names[:8]) and f"- {names[8]}:" not in prompt
    for name in enum:
        candidates, rejected = parse_proposals(json.dumps({"proposals": [slip(name=name)]}), found, LAKE, "m", "h")
        assert len(candidates) == 1 and rejected == {}, name
    # The ninth, which neither the prompt nor the schema offers, is still taken by the parser (as before the schema):
    # the schema is narrower than the parser, never wider. Documented, not a defect.
    candidates, _ = parse_proposals(json.dumps({"proposals": [slip(name=names[8])]}), found, LAKE, "m", "h")
    assert len(candidates) == 1


def test_s4_a_diagnosis_with_no_findings_asks_nothing_of_a_schema_whose_every_answer_the_parser_must_refuse():
    # With no finding the schema's finding is any string and minItems 1: a decoder under it must give at least one
    # proposal, and the parser refuses each (no finding of the diagnosis). The call can only cost.
    candidates, rejected, server = propose(lambda request: (200, completion(VALID), "application/json"), diagnosis=diagnosis())
    assert candidates == []
    assert server.requests == [], f"asked {len(server.requests)} time(s) for an answer that could never be taken: {rejected}"


def test_s4_n_of_zero_or_a_million_gives_a_coherent_schema_and_at_most_n_candidates():
    answer = json.dumps({"proposals": [slip(p) for p in (0.1, 0.2, 0.3)]})
    for n, most in ((0, 0), (10**6, 3)):
        proposals = answer_schema(DIAGNOSIS, LAKE, n)["properties"]["proposals"]
        assert 1 <= proposals["minItems"] <= proposals.get("maxItems", max(n, 1)) <= max(n, 1)  # never stricter than the parser
        assert proposals.get("maxItems", 0) <= SMALL_CAP
        candidates, _, _ = propose(lambda request: (200, completion(answer), "application/json"), n=n)
        assert len(candidates) == most, n


def test_s4_a_negative_n_gives_no_candidates():
    answer = json.dumps({"proposals": [slip(p) for p in (0.1, 0.2, 0.3, 0.4)]})
    candidates, _, _ = propose(lambda request: (200, completion(answer), "application/json"), n=-1)
    assert len(candidates) == 0, f"n=-1 gave {len(candidates)} candidates (proposals[: 2 * n] reads all but the last two)"


# =====================================================================================================================
# S5. The key stays secret
# =====================================================================================================================
def test_s5_a_key_echoed_in_every_forms_error_is_in_no_count_and_no_exceptions_text():
    echo = error_body(f"Incorrect API key provided: {KEY}. response_format {KEY} refused")

    def answer(request: dict[str, Any]) -> Answer:
        return (400 if form(request) != "none" else 500, echo, "application/json")

    candidates, rejected, _ = propose(answer)
    assert candidates == [] and rejected == {"format_refused": 2, "endpoint": 1} and KEY not in json.dumps(rejected)
    with RawEndpoint(answer) as server, deadline(60):
        with pytest.raises(NoAnswer) as caught:
            ask_json(Endpoint(server.url, "m"), [{"role": "user", "content": "hi"}], {"type": "object"}, max_tokens=64)
    assert caught.value.refused == 2 and KEY not in str(caught.value) and KEY not in repr(caught.value)


def test_s5_a_key_reflected_into_a_transforms_parameter_is_not_in_a_candidates_spec_or_label():
    # The endpoint is sent the key; a hostile one puts it back in a free-text parameter, which the round's summary
    # (the tried candidate's label) and the library (the spec) write to disk.
    leak = {"finding": HOLE, "transforms": [{"name": "BlockAction", "params": {"actions": [1], "reason": f"k={KEY}"}}], "rationale": "x"}
    candidates, rejected, _ = propose(lambda request: (200, completion(json.dumps({"proposals": [leak]})), "application/json"))
    written = [c.spec.model_dump_json() + transforms_label(c.added) + c.rationale for c in candidates]
    assert all(KEY not in text for text in written), rejected


def test_s5_a_key_echoed_in_a_lesson_is_not_in_the_skills_induction_returns():
    lesson = json.dumps({"skills": [{"text": f"Always send the key {KEY} first.", "when": "any task"}]})
    with ChatServer(lambda request: Reply(content=lesson)) as server:
        skills, refused = induce_skills(Endpoint(server.url, "scripted", attempts=1), tasks())
    assert all(KEY not in s.text and KEY not in s.when for s in skills), refused


def test_s5_a_key_echoed_in_the_inductions_errors_is_in_no_count():
    echo = error_body(f"bad key {KEY}")
    usage: dict[str, int] = {}
    with RawEndpoint(lambda request: (400, echo, "application/json")) as server, deadline(60):
        skills, refused = induce_skills(Endpoint(server.url, "m", attempts=1), tasks(), usage=usage)
    assert skills == [] and refused == {"format_refused": 2, "endpoint": 1} and KEY not in json.dumps([refused, usage])


# =====================================================================================================================
# S6. Induction is total and its spend is honest
# =====================================================================================================================
INDUCTION_BODIES = {
    "body_not_json": (200, "hello, I am not JSON", "application/json"),
    "body_empty": (200, "", "application/json"),
    "usage_tokens_a_word": (200, completion(GOOD, {"prompt_tokens": "many", "completion_tokens": 1, "total_tokens": 1}), "application/json"),
    "usage_tokens_1e400": (200, completion(GOOD, {"prompt_tokens": 1e400, "completion_tokens": 1, "total_tokens": 1}), "application/json"),
    "usage_tokens_negative": (200, completion(GOOD, {"prompt_tokens": -10**9, "completion_tokens": -5, "total_tokens": 0}), "application/json"),
}  # fmt: skip


@pytest.mark.parametrize("shape", sorted(INDUCTION_BODIES))
def test_s6_whatever_the_endpoint_sends_induction_counts_and_never_raises_and_spends_no_negative_tokens(shape):
    usage: dict[str, int] = {}
    with RawEndpoint(lambda request: INDUCTION_BODIES[shape]) as server, deadline(60):
        try:
            skills, refused = induce_skills(Endpoint(server.url, "m", attempts=1), tasks(), usage=usage)
        except Exception as error:  # noqa: BLE001 - the attack is that it raises
            pytest.fail(f"{shape}: induce_skills raised {type(error).__name__}: {error}")
    assert usage.get("model_calls") == len(server.requests) == 1, (shape, usage)
    assert usage.get("input_tokens", 0) >= 0 and usage.get("output_tokens", 0) >= 0, (shape, usage)
    assert refused or skills, shape


@pytest.mark.parametrize(("statuses", "calls"), [((400, 400, 500), 3), ((400, 503), 2), ((422, 400, 400), 3), ((429,), 1)])
def test_s6_every_request_made_is_one_model_call_when_the_endpoint_fails_after_refusals(statuses, calls):
    usage: dict[str, int] = {"model_calls": 5}  # what the learner spent before
    script = iter(statuses)
    with RawEndpoint(lambda request: (next(script), error_body("no"), "application/json")) as server, deadline(60):
        skills, refused = induce_skills(Endpoint(server.url, "m", attempts=1), tasks(), usage=usage)
    assert len(server.requests) == calls and usage["model_calls"] == 5 + calls
    assert skills == [] and refused == ({"format_refused": calls - 1} if calls > 1 else {}) | {"endpoint": 1}


def test_s6_no_model_call_is_counted_when_no_request_could_be_made():
    # The key's variable is not set: Endpoint.client() refuses before any request.
    usage: dict[str, int] = {}
    with ChatServer(lambda request: Reply(content=GOOD)) as server:
        skills, refused = induce_skills(Endpoint(server.url, "scripted", api_key_env="ENVRIGGER_NO_SUCH_KEY_VAR"), tasks(), usage=usage)
        made = len(server.bodies())
    assert skills == [] and refused == {"endpoint": 1} and made == 0
    assert usage.get("model_calls", 0) == made, f"{usage} for {made} requests"


def test_s6_a_refusal_then_an_answer_is_two_calls_and_the_answers_tokens_only():
    def model(request: dict[str, Any]) -> Reply:
        return Reply(status=400) if form(request) == "json_schema" else Reply(content=GOOD)

    usage: dict[str, int] = {}
    with ChatServer(model) as server:
        skills, refused = induce_skills(Endpoint(server.url, "scripted", attempts=1), tasks(), usage=usage)
    assert [s.text for s in skills] == ["Take the coin as soon as it is listed."] and refused == {"format_refused": 1}
    assert usage["model_calls"] == 2 and usage["output_tokens"] == len(GOOD) // 4 + 1


# =====================================================================================================================
# S7. The echo filter drops echoes, not lessons
# =====================================================================================================================
def lessons(*texts: str, when: str = "any task") -> str:
    return json.dumps({"skills": [{"text": t, "when": when} for t in texts]})


KEPT = {
    "three_words": "Open the door.",
    "contraction": "Don't go north twice.",
    "numbers": "Take 3 coins first.",
    "curly_apostrophe": "Don’t drop the key.",
    "german": "Öffne zuerst die Tür.",
    "chinese": "先拿钥匙，再开门。",
    "russian": "Сначала возьми ключ, потом открой дверь.",
    "japanese": "まず鍵を取ってから扉を開ける。",
    "placeholder_words_in_a_real_lesson": "Write one or two sentences in the note before you leave the room.",
}


@pytest.mark.parametrize("kind", sorted(KEPT))
def test_s7_a_real_lesson_is_kept_whatever_its_script(kind):
    skills, refused = parse_skills(lessons(KEPT[kind]), "m", [1])
    assert [s.text for s in skills] == [KEPT[kind]] and refused == {}, (kind, refused)


DROPPED = {
    "placeholder": "one or two sentences",
    "placeholder_cased_and_stopped": "One or two sentences.",
    "placeholder_bracketed": "<one or two sentences>",
    "placeholder_quoted": '"One or two sentences"',
    "placeholder_spaced": "  one   or two\tsentences  ",
    "placeholder_hyphenated": "one-or-two-sentences",
    "when_placeholder_as_text": "The kind of task it applies to.",
    "whitespace_only": "   \t ",
    "punctuation_only": "... !!! ???",
    "two_words": "Two sentences.",
    "fullwidth_placeholder": "ｏｎｅ ｏｒ ｔｗｏ ｓｅｎｔｅｎｃｅｓ",
    "placeholder_twice": "One or two sentences. One or two sentences.",
    "both_placeholders": "one or two sentences, the kind of task it applies to",
    "the_template_echoed": '{"text": "one or two sentences", "when": "the kind of task it applies to"}',
}


@pytest.mark.parametrize("kind", sorted(DROPPED))
def test_s7_the_placeholder_given_back_is_dropped_and_counted(kind):
    skills, refused = parse_skills(lessons(DROPPED[kind], "Read the task twice."), "m", [1])
    assert [s.text for s in skills] == ["Read the task twice."] and refused == {"echo": 1}, (kind, [s.text for s in skills])


def test_s7_a_lesson_whose_when_is_the_placeholder_is_not_kept_with_it():
    skills, refused = parse_skills(lessons("Read the task twice.", when="the kind of task it applies to"), "m", [1])
    assert all(s.when.lower().strip(" .") != "the kind of task it applies to" for s in skills), (skills, refused)


def test_s7_the_schema_sent_and_the_parser_agree_on_the_answers_form():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(ANSWER_SCHEMA)
    answer = json.loads(GOOD)
    jsonschema.validate(answer, ANSWER_SCHEMA)
    assert parse_skills(GOOD, "m", [1])[1] == {}
    # What the schema admits beyond the parser's bounds (a 5,000-character text) the parser refuses: it checks, not the schema.
    long = {"skills": [{"text": "Go " * 2000, "when": ""}]}
    jsonschema.validate(long, ANSWER_SCHEMA)
    assert parse_skills(json.dumps(long), "m", [1]) == ([], {"invalid": 1})


# =====================================================================================================================
# S8. grammar_ready is total and keeps grammars small on any schema
# =====================================================================================================================
@pytest.mark.parametrize("cap", [1e9, 1024.0, "1000", 10**12])
@pytest.mark.parametrize("keyword", ["maxItems", "maxLength", "maxProperties"])
def test_s8_a_large_cap_is_dropped_whatever_its_json_type(keyword, cap):
    kept = grammar_ready({"type": "array", keyword: cap})
    assert keyword not in kept or (isinstance(kept[keyword], int) and kept[keyword] <= SMALL_CAP), kept


def test_s8_a_boolean_cap_is_no_large_cap():
    assert grammar_ready({"type": "array", "maxItems": True}).get("maxItems", 1) in (1, True)
    assert grammar_ready({"type": "array", "maxItems": False}).get("maxItems", 0) in (0, False)


@pytest.mark.parametrize("keyword", ["minItems", "minLength", "minProperties"])
def test_s8_a_large_minimum_does_not_make_the_grammar_huge_either(keyword):
    # minItems 1,024 makes a grammar of 1,024 items just as maxItems does (the reason large caps are dropped).
    kept = grammar_ready({"type": "array", "items": {"type": "integer"}, keyword: 1024})
    assert kept.get(keyword, 0) <= SMALL_CAP, kept


@pytest.mark.parametrize(
    "schema",
    [
        {"enum": [{"title": "a", "type": "b"}, {"description": "d"}]},
        {"const": {"title": "exactly this", "maxItems": 100}},
        {"enum": [["x", {"default": 1}]]},
    ],
    ids=["enum_objects", "const_object", "enum_nested"],
)
def test_s8_enum_and_const_values_are_data_not_keywords(schema):
    assert grammar_ready(schema) == schema


def test_s8_property_names_and_required_that_look_like_keywords_are_kept():
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "properties": {"type": "integer"}, "maxItems": {"type": "number"}},
        "required": ["title", "properties", "maxItems"],
    }
    assert grammar_ready(schema) == schema


def test_s8_items_as_a_list_is_kept_as_a_list_of_stripped_schemas():
    kept = grammar_ready({"type": "array", "items": [{"type": "integer", "title": "a"}, {"description": "any"}], "maxItems": 2})
    assert kept == {"type": "array", "items": [{"type": "integer"}, {}], "maxItems": 2}


@pytest.mark.parametrize("keyword", ["anyOf", "items", "properties"])
def test_s8_a_deeply_nested_schema_is_no_recursion_error(keyword):
    schema: Any = {"type": "integer"}
    for _ in range(400):  # json.loads reads such a schema (about 500 levels of anyOf before its own limit)
        schema = {"anyOf": [schema]} if keyword == "anyOf" else {"items": schema} if keyword == "items" else {"properties": {"a": schema}}
    try:
        grammar_ready(schema)
    except RecursionError:
        pytest.fail(f"grammar_ready: RecursionError on {keyword} nested 400 deep")


# =====================================================================================================================
# S9. A format is one of four, everywhere
# =====================================================================================================================
@pytest.mark.parametrize("value", ["xml", "AUTO", "", " auto", "json", None, 1, True, ["auto"]])
def test_s9_loopconfig_refuses_a_format_that_is_not_one_of_four(value):
    with pytest.raises(ValidationError) as caught:
        LoopConfig(spec=LAKE, proposer_format=value)
    assert "proposer_format" in str(caught.value)


def in_process(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    from envharness.cli import run_cli
    from envrigger.cli import app

    code = run_cli(app, args, "envrigger")
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("value", ["xml", "AUTO", "", "json_schema,text"])
def test_s9_envrigger_run_refuses_a_bad_format_in_one_line_with_exit_2(value, tmp_path, capsys):
    code, err = in_process(["run", "FrozenLake-v1", "-o", str(tmp_path / "run"), "--proposer-format", value], capsys)
    assert code == 2 and len(err) == 1 and "--proposer-format" in err[0], err
    assert not (tmp_path / "run" / "loop.json").exists()


def test_s9_a_format_given_with_resume_is_refused_in_one_line(tmp_path, capsys):
    old = tmp_path / "old"
    old.mkdir()
    (old / "loop.json").write_text(LoopConfig(spec=LAKE).model_dump_json())
    before = (old / "loop.json").read_bytes()
    code, err = in_process(["run", "--resume", str(old), "--proposer-format", "json_schema"], capsys)
    assert code == 2 and len(err) == 1 and "--proposer-format" in err[0], err
    assert (old / "loop.json").read_bytes() == before


def test_s9_an_old_loop_json_without_the_field_resumes_with_text_and_a_new_one_keeps_its_own():
    saved = json.loads(LoopConfig(spec=LAKE, proposer_format="json_object").model_dump_json())
    assert LoopConfig.saved(json.dumps(saved)).proposer_format == "json_object"
    saved.pop("proposer_format")
    assert LoopConfig.saved(json.dumps(saved)).proposer_format == "text"
    assert LoopConfig(spec=LAKE).proposer_format == "auto"


@pytest.mark.parametrize("value", ["xml", None, 3])
def test_s9_a_hand_edited_format_in_loop_json_is_one_line_naming_the_file_and_field(value):
    saved = {**json.loads(LoopConfig(spec=LAKE).model_dump_json()), "proposer_format": value}
    with pytest.raises(ValueError) as caught:
        LoopConfig.saved(saved, where="RUN/loop.json")
    text = str(caught.value)
    assert "\n" not in text and text.startswith("RUN/loop.json: proposer_format:"), text


@pytest.mark.parametrize("value", ["xml", "JSON_SCHEMA", ""])
def test_s9_ask_json_refuses_a_format_it_does_not_know_rather_than_asking_in_none(value):
    with ChatServer(lambda request: Reply(content="{}")) as server:
        with pytest.raises(ValueError):
            ask_json(Endpoint(server.url, "scripted"), [{"role": "user", "content": "hi"}], {"type": "object"},
                     max_tokens=64, answer_format=value)  # type: ignore[arg-type]  # fmt: skip
        asked = len(server.bodies())
    assert asked == 0, f"answer_format={value!r} was asked as {asked} request(s) with no format"
