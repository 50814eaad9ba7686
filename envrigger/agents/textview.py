"""An env as a chat: its observation as text, a model's reply (or tool call) as its action.

Contains :class:`TextView`, :func:`text_view`, which picks the view of an env (its family's
own, registered in :mod:`envrigger.families`: code repair's reply is a JSON tool call, or an
OpenAI function call to one of its five tools), and :func:`view_from_spaces`, the view of
any env that lists its commands (TextWorld: the reply names one of the listed commands,
the action is its index) or whose observations and actions are text.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

import gymnasium as gym

from envharness.errors import SpecError
from envharness.toolcall import parse_tool_call
from envrigger.family_registry import family_of

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\n?(.*?)```", re.S)

CODE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {"name": "list", "description": "List the files.", "parameters": {"type": "object", "properties": {}}},
    },
    {
        "type": "function",
        "function": {
            "name": "view",
            "description": "Show a file with line numbers.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "replace",
            "description": "Replace lines start..end (1-based, inclusive) of a file with text.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "start": {"type": "integer"},
                    "end": {"type": "integer"},
                    "text": {"type": "string"},
                },
                "required": ["path", "start", "end", "text"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "run_tests", "description": "Run the visible tests.", "parameters": {"type": "object", "properties": {}}},
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit: the hidden tests decide, and the episode ends.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
ASK_HUMAN_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "ask_human",
        "description": "Ask the human reviewer for help (counted as a human intervention).",
        "parameters": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
    },
}


class UnusableReply(ValueError):
    """A reply (or tool call) that is not an action of the env; its message goes back to the model."""


class TextView:
    """How one env reads as a chat.

    ``kind`` is ``commands`` (an observation with a ``commands`` list; the action is an
    index), ``tool_calls`` (code repair: JSON tool calls) or ``text`` (the reply is the
    action). :meth:`describe` gives the text and the commands of an observation;
    :meth:`from_reply` and :meth:`from_tool_call` turn a model's answer into an action.

    Example:
        >>> import envharness
        >>> env = envharness.wrap("envharness/CodeRepair-v0", task="add")
        >>> view = text_view(env)
        >>> view.kind, view.from_reply('```json\\n{"tool": "list"}\\n```', strip_fences=True)
        ('tool_calls', '{"tool": "list"}')
    """

    def __init__(self, kind: str, action_space: gym.Space, ask_human: bool = False) -> None:
        self.kind = kind
        self.action_space = action_space
        self.ask_human = ask_human  # code repair with a reviewer: an ask_human tool too

    def describe(self, obs: Any) -> tuple[str, list[str]]:
        """(the observation as text, the commands it lists)."""
        if self.kind == "commands":
            commands = [c for c in str(obs["commands"]).split("\n") if c]
            return str(obs["text"]), commands
        return str(obs), []

    def unusable(self) -> Any:
        """The action taken when no reply could be used: a wasted turn (commands) or the reply as the env reads it."""
        return int(getattr(self.action_space, "n", 1)) - 1 if self.kind == "commands" else ""

    def from_reply(self, reply: str, commands: list[str] | None = None, *, strip_fences: bool = True, first_line: bool = False,
                   strip: str = " \t\r\n", case_sensitive: bool = False) -> Any:  # fmt: skip
        """The action a text reply names; :class:`UnusableReply` if it names none."""
        if reply is not None and not isinstance(reply, str):
            raise UnusableReply("the reply is not text")
        text = reply or ""
        if strip_fences and (fenced := _FENCE.search(text)):
            text = fenced.group(1)
        if first_line:
            text = next((line for line in text.splitlines() if line.strip()), "")
        text = text.strip(strip)
        if not text:
            raise UnusableReply("the reply was empty")
        if self.kind == "commands":
            listed = commands or []
            key = (lambda c: c) if case_sensitive else str.lower
            for index, command in enumerate(listed):
                if key(command.strip()) == key(text):
                    return index
            raise UnusableReply(f"{text[:80]!r} is not one of the listed commands; reply with one of them exactly")
        if self.kind == "tool_calls":
            try:
                parse_tool_call(text)
            except ValueError as error:
                raise UnusableReply(f"the reply is not a JSON tool call ({str(error).splitlines()[0][:120]})") from None
        if isinstance(self.action_space, gym.spaces.Text) and len(text) > self.action_space.max_length:
            raise UnusableReply(f"the reply is {len(text)} characters long; the env takes at most {self.action_space.max_length}")
        return text

    def tools(self, commands: list[str]) -> list[dict[str, Any]]:
        """The OpenAI function tools offered this turn (``output: tools``)."""
        if self.kind == "tool_calls":
            return [*CODE_TOOLS, ASK_HUMAN_TOOL] if self.ask_human else CODE_TOOLS
        if self.kind == "commands":
            parameters = {"type": "object", "properties": {"command": {"type": "string", "enum": commands}}, "required": ["command"]}
            return [
                {
                    "type": "function",
                    "function": {"name": "command", "description": "Type one of the listed commands.", "parameters": parameters},
                }
            ]
        parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return [{"type": "function", "function": {"name": "act", "description": "Your action, as text.", "parameters": parameters}}]

    def from_tool_call(self, name: str, arguments: str, commands: list[str]) -> Any:
        """The action a function call makes; :class:`UnusableReply` if it is not a valid call of an offered tool."""
        offered = [tool["function"]["name"] for tool in self.tools(commands)]
        if not isinstance(name, str) or name not in offered:
            shown = name[:40] if isinstance(name, str) else type(name).__name__
            raise UnusableReply(f"there is no tool {shown!r}; call one of {', '.join(offered)}")
        if arguments is not None and not isinstance(arguments, str):
            raise UnusableReply(f"the arguments of {name} are not JSON text")
        try:
            args = json.loads(arguments or "{}", parse_constant=_not_a_number)
        except (ValueError, RecursionError):
            raise UnusableReply(f"the arguments of {name} are not JSON (or hold NaN or Infinity)") from None
        if not isinstance(args, dict):
            raise UnusableReply(f"the arguments of {name} are not a JSON object")
        if self.kind == "tool_calls":
            return json.dumps({**args, "tool": name})  # the function called is the tool, whatever its arguments say
        key = "command" if self.kind == "commands" else "text"
        if not isinstance(args.get(key), str):
            raise UnusableReply(f"{name} needs a string argument {key!r}")
        return self.from_reply(args[key], commands, strip_fences=False, case_sensitive=True)


def _not_a_number(word: str) -> Any:
    raise ValueError(f"{word} is not a number JSON has")


def text_view(env: gym.Env) -> TextView:
    """The chat view of ``env``: its family's own view (see :mod:`envrigger.families`), else the one its spaces allow.

    A family without a view of its own reads as a chat when its observations and actions
    are text (or list commands); otherwise a one-line :class:`~envharness.errors.SpecError`
    names the family and why its observations cannot be made text.
    """
    found = family_of(env)
    if found.has("text_view"):
        return cast(TextView, found.text_view(env))  # type: ignore[misc]
    return view_from_spaces(env, missing=found.key)


def view_from_spaces(env: gym.Env, missing: str | None = None) -> TextView:
    """The view an env's spaces allow: a command list (a ``commands`` Text field, Discrete actions) or text in, text out.

    Example:
        >>> import envharness
        >>> view_from_spaces(envharness.wrap("envharness/TextWorld-v0", levels=[3], games_per_level=2)).kind
        'commands'
    """
    obs_space, act_space = env.observation_space, env.action_space
    if (
        isinstance(obs_space, gym.spaces.Dict)
        and isinstance(obs_space.spaces.get("commands"), gym.spaces.Text)
        and isinstance(act_space, gym.spaces.Discrete)
    ):
        return TextView("commands", act_space)
    if isinstance(obs_space, gym.spaces.Text) and isinstance(act_space, gym.spaces.Text):
        return TextView("text", act_space)
    name = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    absent = f" (family {missing!r} has no text view)" if missing is not None and missing != "generic" else ""
    raise SpecError(
        f"{name}: its observations ({type(obs_space).__name__}) and actions ({type(act_space).__name__}) cannot be made text "
        f"for a chat agent{absent}; use an env with Text observations and actions, or one that lists its commands (envharness/TextWorld-v0)"
    )
