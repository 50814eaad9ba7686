"""Tool-call actions: the one parser that the env acting on them and every rule judging them share.

Contains :func:`parse_tool_call` and :func:`tool_name`. A rule that looks at the raw text
of an action can be fooled by an encoding the env's own parser reads differently (a JSON
escape in a key, a mapping that is not a ``dict``); so the code-repair env and the rules
and checks that read tool calls (``BlockTool``, ``ToolCost``, the setup refusal) all judge
what this parser returns, and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def parse_tool_call(action: Any) -> dict[str, Any]:
    """The call an action makes: a JSON object (text) or a mapping, as a plain ``dict``; ValueError if it is neither.

    Example:
        >>> parse_tool_call('{"\\\\u0074ool": "submit"}')
        {'tool': 'submit'}
        >>> parse_tool_call('[["tool", "submit"]]')
        Traceback (most recent call last):
        ...
        ValueError: a tool call is a JSON object such as {"tool": "list"}, got a list
    """
    if isinstance(action, (str, bytes, bytearray)):
        try:
            call = json.loads(action)
        except RecursionError:
            raise ValueError('the tool call nests too deeply; send a flat JSON object such as {"tool": "list"}') from None
    elif isinstance(action, Mapping):
        call = dict(action)
    else:
        raise ValueError(f'a tool call is a JSON object such as {{"tool": "list"}}, got a {type(action).__name__}')
    if not isinstance(call, dict):
        raise ValueError(f'a tool call is a JSON object such as {{"tool": "list"}}, got a {type(call).__name__}')
    if isinstance(call.get("tool"), str):  # a str subclass's own __eq__ must not decide which tool runs
        call["tool"] = str.__str__(call["tool"])
    return call


def tool_name(action: Any) -> str | None:
    """The tool an action calls, as the env reads it; None if the action is not a readable tool call.

    Example:
        >>> tool_name('{"tool": "run_tests"}'), tool_name("not json"), tool_name({"tool": "view", "path": "a.py"})
        ('run_tests', None, 'view')
    """
    try:
        tool = parse_tool_call(action).get("tool")
    except ValueError:  # json.JSONDecodeError is a ValueError
        return None
    return tool if isinstance(tool, str) else None
