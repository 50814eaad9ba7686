"""A chat agent: a policy that asks a model behind any OpenAI-compatible endpoint for each action.

Contains :class:`ChatAgent`, :class:`Endpoint`, :class:`AgentError`, :func:`check_endpoint`
(the one-line refusals for an endpoint that cannot be used) and the per-call record, whose
keys follow OpenTelemetry's GenAI conventions (``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` ...). The API key is read from an environment variable when
the agent is made and is never written to a run, a log or an error message.
"""

from __future__ import annotations

import base64
import json
import math
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from envharness.errors import SpecError
from envharness.reading import read_json
from envrigger.agents.harness import AgentHarness, render
from envrigger.agents.streaming import IncompleteStream, assemble
from envrigger.agents.textview import TextView, UnusableReply, text_view
from envrigger.errors import AgentError, CallBudgetSpent, WallLimitReached
from envrigger.structured import RETRIED_STATUS, SECRET_MIN_CHARS, reply_field, retry_after

CHARS_PER_TOKEN = 4  # the stated estimate where an endpoint returns no usage


def import_openai() -> Any:
    """The ``openai`` package, or a one-line :class:`~envharness.errors.SpecError` naming the extra that installs it."""
    try:
        import openai
    except ImportError:
        raise SpecError('the chat agent needs the openai package: pip install "envharness[llm]"') from None
    return openai


@dataclass
class Endpoint:
    """Where the model is: an OpenAI-compatible base URL, a model name, the variable holding the key.

    Example:
        >>> Endpoint("http://127.0.0.1:8000/v1", "qwen", api_key_env="MY_KEY").describe()
        'qwen at http://127.0.0.1:8000/v1'
    """

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0  # per request
    attempts: int = 4  # per call, on 429, 5xx, timeouts and connection errors
    error_budget: int = 5  # calls in a row that may fail (after their attempts) before no more are made
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)  # model -> (USD per 1M input, per 1M output tokens)

    def describe(self) -> str:
        return f"{self.model} at {self.base_url}"

    def api_key(self) -> str:
        key = os.environ.get(self.api_key_env)
        if key is None and self.api_key_env == "OPENAI_API_KEY" and self.local():
            return "no-key"  # vLLM, llama.cpp and Ollama on this machine need none (a variable named with --api-key-env is still required)
        if key is None:
            raise SpecError(
                f"the API key variable {self.api_key_env} is not set; export it (any value for a local server), or name another with --api-key-env"
            )
        return key

    def local(self) -> bool:
        """Whether the endpoint is on this machine (a loopback address), where servers need no key."""
        import ipaddress
        import urllib.parse

        host = urllib.parse.urlsplit(self.base_url).hostname or ""
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def client(self) -> Any:
        from envrigger.agents.deadline import deadline_client

        # timeout_s bounds a whole call, however the endpoint paces its bytes (httpx alone bounds each read)
        return import_openai().OpenAI(
            base_url=self.base_url,
            api_key=self.api_key(),
            timeout=self.timeout_s,
            max_retries=0,
            http_client=deadline_client(self.timeout_s),
        )


def scrub(text: str, secret: str | None) -> str:
    """``text`` without ``secret``.

    Example:
        >>> scrub("bad key sk-0123456789 given", "sk-0123456789")
        'bad key *** given'
    """
    if secret and len(secret) >= SECRET_MIN_CHARS and secret in text:
        return text.replace(secret, "***")
    return text


class ErrorBudget:
    """Calls in a row that failed after all their attempts, shared by every agent of one factory in a process.

    Once ``limit`` calls in a row have failed, no more are made: every later call fails at
    once, so a dead endpoint costs a run seconds, not minutes of backoff per episode.

    Example:
        >>> budget = ErrorBudget(2)
        >>> budget.failed(), budget.failed(), budget.spent
        (None, None, True)
    """

    def __init__(self, limit: int) -> None:
        import threading

        self.limit, self.in_a_row, self._lock = limit, 0, threading.Lock()

    @property
    def spent(self) -> bool:
        return self.in_a_row >= self.limit

    def failed(self) -> None:
        with self._lock:
            self.in_a_row += 1

    def answered(self) -> None:
        with self._lock:
            self.in_a_row = 0

    def __reduce__(self) -> Any:
        return (ErrorBudget, (self.limit,))  # each process keeps its own count


def check_endpoint(endpoint: Endpoint) -> list[str]:
    """The models the endpoint offers; a one-line :class:`~envharness.errors.SpecError` if it cannot be used for ``endpoint.model``."""
    openai = import_openai()
    client = endpoint.client()
    try:
        listed = list(client.models.list())
    except openai.AuthenticationError:
        raise SpecError(f"{endpoint.base_url} refused the API key in ${endpoint.api_key_env} (401); set the right key") from None
    except openai.APIConnectionError:
        raise SpecError(f"cannot reach an endpoint at {endpoint.base_url}; is the server running, and does the URL end in /v1?") from None
    except openai.APIStatusError as error:
        raise SpecError(f"{endpoint.base_url} answered {error.status_code} to GET /models; check the URL") from None
    except Exception:  # a body that is not JSON, or not a list of models
        raise SpecError(f"{endpoint.base_url} did not answer GET /models with a list of models; check the URL") from None
    offered = sorted({m for m in (getattr(entry, "id", None) for entry in listed) if isinstance(m, str) and len(m) <= 300})
    if endpoint.model not in offered:
        listing = ", ".join(offered[:20]) or "none"
        raise SpecError(f"model {endpoint.model!r} is not offered at {endpoint.base_url}; it offers: {listing}"[:1000])
    return offered


def read_prices(path: Any) -> dict[str, tuple[float, float]]:
    """A price table file, ``{"MODEL": [USD per 1M input tokens, per 1M output tokens]}``; a one-line SpecError if it is not one."""
    shape = '{"MODEL": [USD per 1M input tokens, per 1M output tokens]}'
    raw = read_json(path, dict, fix=f"give {shape}", error=SpecError)
    try:
        table = {str(k): (float(v[0]), float(v[1])) for k, v in raw.items() if len(v) == 2 and min(float(v[0]), float(v[1])) >= 0}
        if len(table) != len(raw):
            raise ValueError("a price is not two non-negative numbers")
    except (ValueError, TypeError, KeyError, IndexError) as error:
        raise SpecError(f"--prices: {path} is not {shape} ({str(error).splitlines()[0][:80]})") from None
    return table


def compress(messages: list[dict[str, Any]], secret: str | None = None) -> str:
    """Messages as stored with a call: zlib-compressed JSON, base64 (read back with :func:`decompress`); ``secret`` never in it.

    Example:
        >>> decompress(compress([{"role": "user", "content": "hi"}]))
        [{'role': 'user', 'content': 'hi'}]
    """
    text = json.dumps(messages, separators=(",", ":"))
    if secret and len(secret) >= SECRET_MIN_CHARS:  # also as JSON escapes it
        for form in {secret, json.dumps(secret)[1:-1]}:
            text = text.replace(form, "***")
    return base64.b64encode(zlib.compress(text.encode(), 6)).decode()


def decompress(text: str) -> list[dict[str, Any]]:
    return list(json.loads(zlib.decompress(base64.b64decode(text))))


def _estimate(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) + len(json.dumps(m.get("tool_calls") or "")) for m in messages) // CHARS_PER_TOKEN + 1


class ChatAgent:
    """A policy whose every action is a model's reply, under an :class:`~envrigger.agents.harness.AgentHarness`.

    Each ``act`` renders the turn's message, sends the conversation (trimmed by the
    harness's context policy), and turns the reply into an action through the env's
    :class:`~envrigger.agents.textview.TextView`; a reply that is not an action goes back
    to the model with the reason, at most ``harness.retries`` times, after which the step
    takes the env's "unusable" action (a wasted turn, or the raw reply for the env to
    refuse). Every model call of the step is kept for the recorder (:meth:`pop_calls`).

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/CodeRepair-v0", task="add")
        >>> agent = ChatAgent(env, AgentHarness(), Endpoint("http://127.0.0.1:9/v1", "m", api_key_env="PATH"))
        >>> agent.policy_id.startswith("chat:m:")
        True
    """

    name = "chat"

    def __init__(self, env: Any, harness: AgentHarness, endpoint: Endpoint, client: Any = None, budget: ErrorBudget | None = None) -> None:
        self.view: TextView = text_view(env)
        self.harness, self.endpoint = harness, endpoint
        self._client = client if client is not None else endpoint.client()
        self._budget = budget if budget is not None else ErrorBudget(endpoint.error_budget)
        self.policy_id = f"chat:{endpoint.model}:{harness.hash()}"
        self._secret = os.environ.get(endpoint.api_key_env)  # only to keep it out of errors and records
        self.reset(None)

    # -- episode -------------------------------------------------------------------------
    def reset(self, seed: int | None) -> None:
        self.seed = seed
        self._messages: list[dict[str, Any]] = [{"role": "system", "content": self.harness.system_prompt}]
        self._turn_starts: list[int] = []  # index in _messages of each model reply: a turn is a reply and what answered it
        self._pending_tool: str | None = None  # the tool call id the next observation answers
        self._steps = 0
        self._calls_used = 0
        self._calls: list[dict[str, Any]] = []
        self._reward = 0.0
        self._started = time.monotonic()

    def pop_calls(self) -> list[dict[str, Any]]:
        """The model calls made for the last action (and forget them)."""
        calls, self._calls = self._calls, []
        return calls

    def observe_reward(self, reward: float) -> None:
        self._reward = float(reward)

    def act(self, obs: Any, info: dict[str, Any]) -> Any:
        """The action for ``obs``; whatever the endpoint answers, only an :class:`AgentError` or a template's SpecError ends it."""
        try:
            return self._act(obs)
        except AgentError as error:
            raise type(error)(scrub(str(error), self._secret)) from None
        except SpecError as error:
            raise SpecError(scrub(str(error), self._secret)) from None
        except Exception as error:  # no reply reaches here (each is an unusable reply): a bug of ours, in one line without the key
            raise AgentError(
                scrub(f"the chat agent failed ({type(error).__name__}: {_first_line(error)}); please report this", self._secret)
            ) from None

    def _act(self, obs: Any) -> Any:
        text, commands = self.view.describe(obs)
        first = self._steps == 0
        template = self.harness.task_template if first else self.harness.turn_template
        content = render(template, observation=text, commands=commands, step=self._steps, reward=self._reward, error="")
        lessons = self._lessons(text) if first else []
        if lessons:  # the skill memory: the lessons that best match this task, before its first message
            content = "Lessons from earlier episodes:\n" + "\n".join(f"- {lesson}" for lesson in lessons) + "\n\n" + content
        self._say(content)
        self._steps += 1
        for attempt in range(self.harness.retries + 1):
            message, record, problem = self._call(commands)
            if lessons and attempt == 0:
                record["envrigger.skills"] = lessons  # which lessons this episode's agent was given
            try:
                action = self._action(message, commands, problem)
            except UnusableReply as unusable:
                error = str(unusable)
                record["envrigger.reply.error"] = scrub(error, self._secret)
                record["envrigger.tool_call.invalid"] = bool(message.get("tool_calls")) or problem is not None and "tool call" in problem
                self._calls.append(record)
                self._answer_unusable(message, error)
                continue
            record["envrigger.retry"] = attempt
            self._calls.append(record)
            return action
        return self.view.unusable()

    def _lessons(self, task: str) -> list[str]:
        """The harness's lessons that best match ``task`` (BM25), best first, within its character budget."""
        harness = self.harness
        if not harness.skills or harness.skills_k == 0:
            return []
        from envrigger.skills.retrieve import bm25_rank

        chosen, used = [], 0
        for index in bm25_rank(task, harness.skills, harness.skills_k):
            lesson = harness.skills[index]
            if used + len(lesson) > harness.skills_chars:
                break
            chosen.append(lesson)
            used += len(lesson)
        return chosen

    # -- messages ------------------------------------------------------------------------
    def _say(self, content: str) -> None:
        """The observation to the model: a user message, or the result of the tool it called."""
        if self._pending_tool is not None:
            self._messages.append({"role": "tool", "tool_call_id": self._pending_tool, "content": content})
            self._pending_tool = None
        else:
            self._messages.append({"role": "user", "content": content})

    def _reply(self, message: dict[str, Any]) -> None:
        self._turn_starts.append(len(self._messages))
        self._messages.append(message)

    def _answer_unusable(self, message: dict[str, Any], error: str) -> None:
        self._reply(message)
        content = render(self.harness.retry_template, error=error, observation="", commands=[], step=self._steps, reward=self._reward)
        calls = message.get("tool_calls") or []
        if calls:
            for call in calls:  # every call gets its answer, as the protocol requires
                self._messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        else:
            self._messages.append({"role": "user", "content": content})

    def _context(self) -> tuple[list[dict[str, Any]], bool]:
        """The messages this call sends (system and task kept, then the latest turns) and whether older turns were cut."""
        head_end = self._turn_starts[0] if self._turn_starts else len(self._messages)
        head, starts = self._messages[:head_end], list(self._turn_starts)
        policy = self.harness.context
        if policy.keep_turns is not None and len(starts) > policy.keep_turns:
            starts = starts[len(starts) - policy.keep_turns :]
        # Oldest turns go first while over the token budget; the latest turn (what is being answered) always stays.
        while policy.token_budget is not None and len(starts) > 1 and _estimate(head + self._messages[starts[0] :]) > policy.token_budget:
            starts = starts[1:]
        sent = head + (self._messages[starts[0] :] if starts else [])
        return sent, len(sent) < len(self._messages)

    # -- the model call ------------------------------------------------------------------
    def _call(self, commands: list[str]) -> tuple[dict[str, Any], dict[str, Any], str | None]:
        if self._calls_used >= self.harness.max_calls:
            raise CallBudgetSpent(f"the harness's budget of {self.harness.max_calls} model calls per episode is used up")
        limit = self.harness.episode_seconds
        if limit is not None and time.monotonic() - self._started >= limit:
            raise WallLimitReached(f"the episode has taken the harness's {limit:g} wall seconds; no more model calls are made")
        if self._budget.spent:
            raise AgentError(
                f"{self.endpoint.describe()}: {self._budget.in_a_row} calls in a row failed (the run's error budget); "
                "no more are made; check the endpoint and collect again"
            )
        self._calls_used += 1
        messages, truncated = self._context()
        sampling = self.harness.sampling
        request: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.seed is not None:
            request["seed"] = sampling.seed
        if sampling.stop:
            request["stop"] = list(sampling.stop)
        if self.harness.output == "tools":
            request["tools"] = self.view.tools(commands)
        if sampling.stream:
            request["stream"], request["stream_options"] = True, {"include_usage": True}
        started = time.perf_counter()
        try:
            response, attempts = self._send(request)
        except AgentError:
            self._budget.failed()
            raise
        self._budget.answered()
        latency = time.perf_counter() - started
        message, finish, problem = _reply_of(response)
        usage: Any = reply_field(response, "usage")
        prompt_tokens, completion_tokens = _count(reply_field(usage, "prompt_tokens")), _count(reply_field(usage, "completion_tokens"))
        estimated = prompt_tokens is None
        input_tokens = _estimate(messages) if prompt_tokens is None else prompt_tokens
        output_tokens = _estimate([message]) if estimated else (completion_tokens or 0)
        price_in, price_out = self.endpoint.prices.get(self.endpoint.model, (0.0, 0.0))
        first_token = reply_field(response, "first_token_s")
        record = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": self.endpoint.model,
            "gen_ai.response.model": scrub(_text(reply_field(response, "model")), self._secret),
            "gen_ai.response.id": scrub(_text(reply_field(response, "id")), self._secret),
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
            "gen_ai.response.finish_reasons": [scrub(finish, self._secret)],
            "envrigger.usage.estimated": estimated,
            "envrigger.latency_s": round(latency, 6),
            "envrigger.time_to_first_token_s": (
                round(first_token, 6) if isinstance(first_token, float) and math.isfinite(first_token) else None
            ),
            "envrigger.cost_usd": (input_tokens * price_in + output_tokens * price_out) / 1e6,
            "envrigger.context.truncated": truncated,
            "envrigger.endpoint.attempts": attempts,
            "envrigger.tool_call.invalid": False,
            "gen_ai.input.messages": compress(messages, self._secret),
            "gen_ai.output.messages": compress([message], self._secret),
        }
        return message, record, problem

    def _send(self, request: dict[str, Any]) -> tuple[Any, int]:
        """One call with retries and backoff on 429/5xx/timeouts/connection errors (``Retry-After`` honoured).

        A 200 whose body is not a chat completion (not JSON, a list) comes back as :class:`_Unreadable`:
        an unusable reply, not an endpoint failure. No error names the API key, even where the endpoint's body does.
        """
        openai = import_openai()
        wait = 0.5
        for attempt in range(1, self.endpoint.attempts + 1):
            try:
                if request.get("stream"):  # read to the end inside the retries: a stream can fail halfway too
                    return self._streamed(request), attempt
                return self._client.chat.completions.create(**request), attempt
            except openai.AuthenticationError:
                raise AgentError(f"{self.endpoint.base_url} refused the API key in ${self.endpoint.api_key_env} (401)") from None
            except openai.NotFoundError:
                raise AgentError(f"{self.endpoint.base_url}: model {self.endpoint.model!r} not found (404)") from None
            except openai.APIResponseValidationError:
                return _Unreadable("the endpoint's answer is not a chat completion"), attempt
            except (openai.APIError, IncompleteStream) as error:
                status = getattr(error, "status_code", None)
                if status is not None and status not in RETRIED_STATUS:
                    detail = scrub(_short(error), self._secret)
                    raise AgentError(f"{self.endpoint.base_url} refused the request ({status}: {detail})") from None
                if attempt == self.endpoint.attempts:
                    what = f"{status}" if status is not None else type(error).__name__
                    raise AgentError(f"{self.endpoint.describe()} failed {attempt} times ({what}); the episode ends here") from None
                time.sleep(retry_after(error, wait))
                wait = min(wait * 2, 8.0)
            except (ValueError, TypeError, AttributeError, LookupError, RecursionError) as error:  # the client could not read the body
                return _Unreadable(f"the endpoint's answer is not a chat completion ({type(error).__name__})"), attempt
        raise AssertionError("unreachable")

    def _streamed(self, request: dict[str, Any]) -> Any:
        started = time.perf_counter()
        stream = self._client.chat.completions.create(**request)
        try:
            return assemble(stream, started)
        except (IncompleteStream, import_openai().APIError):
            raise
        except Exception as error:  # the transport's own error for a connection dropped mid-stream
            raise IncompleteStream(f"the stream broke off ({type(error).__name__})") from None

    def _action(self, message: dict[str, Any], commands: list[str], problem: str | None = None) -> Any:
        if problem is not None:
            raise UnusableReply(problem)
        view, parse = self.view, self.harness.parse
        if self.harness.output == "tools":
            calls = message.get("tool_calls") or []
            if not calls:
                raise UnusableReply("no tool was called; call one of the tools")
            call = calls[0]["function"]
            action = view.from_tool_call(call["name"], call["arguments"], commands)
            self._pending_tool = calls[0]["id"]
            self._reply(message)
            return action
        action = view.from_reply(
            message["content"], commands, strip_fences=parse.strip_code_fences, first_line=parse.first_line, strip=parse.strip,
            case_sensitive=parse.case_sensitive,
        )  # fmt: skip
        self._reply(message)
        return action


class ChatAgentFactory:
    """A picklable ``env -> ChatAgent`` maker: each worker makes its own client (the key read from its environment).

    Example:
        >>> import envharness
        >>> make = ChatAgentFactory(AgentHarness(), Endpoint("http://127.0.0.1:9/v1", "m", api_key_env="PATH"))
        >>> make(envharness.wrap("envharness/CodeRepair-v0", task="add")).name
        'chat'
    """

    def __init__(self, harness: AgentHarness, endpoint: Endpoint) -> None:
        self.harness, self.endpoint = harness, endpoint
        self.policy_id = f"chat:{endpoint.model}:{harness.hash()}"
        self.budget = ErrorBudget(endpoint.error_budget)  # shared by the agents it makes (threads), one per process

    def __call__(self, env: Any) -> ChatAgent:
        return ChatAgent(env, self.harness, self.endpoint, budget=self.budget)


MAX_TOOL_CALLS = 16  # a reply with more is unusable: one action per step, and each call would need its own answer


@dataclass
class _Unreadable:
    """A 200 whose body the client could not read as a chat completion."""

    why: str


def _count(value: Any) -> int | None:
    """A token count as the endpoint reported it, if it is one (a whole number from 0 to 2**53)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else None


def _text(value: Any) -> str:
    return value[:300] if isinstance(value, str) else ""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:200]


def _reply_of(response: Any) -> tuple[dict[str, Any], str, str | None]:
    """The assistant message of a response, its finish reason, and why it cannot be used (None if it may be).

    Whatever shape the endpoint sent (no choices, no message, content that is not text,
    tool calls that are not calls), the message is plain JSON data and the reason one line.
    """
    empty: dict[str, Any] = {"role": "assistant", "content": ""}
    if isinstance(response, _Unreadable):
        return empty, "", response.why
    choices = reply_field(response, "choices")
    if not isinstance(choices, list) or not choices:
        return empty, "", "the endpoint's answer has no choices"
    choice = choices[0]
    finish = _text(reply_field(choice, "finish_reason"))
    raw = reply_field(choice, "message")
    if raw is None:
        return empty, finish, "the endpoint's answer has no message"
    content, problem = reply_field(raw, "content"), None
    if content is None:
        content = ""
    elif not isinstance(content, str):
        content, problem = "", "the reply's content is not text"
    message: dict[str, Any] = {"role": "assistant", "content": content}
    calls = reply_field(raw, "tool_calls")
    if calls is None or (isinstance(calls, list) and not calls):
        return message, finish, problem
    if not isinstance(calls, list):
        return message, finish, problem or "the reply's tool calls are not a list of calls"
    if len(calls) > MAX_TOOL_CALLS:
        return message, finish, problem or f"the reply makes {len(calls)} tool calls; make one at a time"
    normal = []
    for index, call in enumerate(calls):
        function = reply_field(call, "function")
        name, arguments, ident = reply_field(function, "name"), reply_field(function, "arguments"), reply_field(call, "id")
        if not isinstance(name, str) or not isinstance(arguments, (str, type(None))):
            return message, finish, problem or f"tool call {index + 1} is not a function call with a name and JSON text arguments"
        ident = ident[:200] if isinstance(ident, str) and ident else f"call_{index}"
        normal.append({"id": ident, "type": "function", "function": {"name": name[:200], "arguments": arguments or ""}})
    message["tool_calls"] = normal
    return message, finish, problem


def _short(error: Any) -> str:
    body = getattr(error, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or "")[:160].replace("\n", " ")


__all__ = ["AgentError", "ChatAgent", "ChatAgentFactory", "Endpoint", "ErrorBudget", "check_endpoint", "compress", "decompress", "scrub"]
