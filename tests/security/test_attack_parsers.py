"""Attacks on rules that judge structured actions: encodings the env's parser reads one way and a text check another.

Root cause (issue 27, class 4): ``BlockTool``, ``ToolCost`` and the setup refusal of
``run_tests``/``submit`` looked for the tool's name in the raw text, while the env reads
the action with ``json.loads``; a JSON escape in the key hid the tool from the check. The
rule now: every check on a tool call judges what ``envharness.toolcall.parse_tool_call``
returns, the parser the env itself acts on. The attacks are written as a hostile agent
(its actions) and a hostile spec author (a setup prefix), with every encoding JSON allows.
"""

from __future__ import annotations

import json

import pytest

import envharness
from envharness.toolcall import parse_tool_call
from envharness.transforms import BlockTool, ReplayPrefix, ToolCost

ENV = "envharness/CodeRepair-v0"

# The same call, {"tool": NAME}, spelled as a hostile agent might: each decodes to exactly that.
SPELLINGS = [
    '{{"\\u0074ool": "{name}"}}',  # an escape in the key
    '{{"to\\u006fl": "{name}"}}',
    '{{"\\u0074\\u006f\\u006f\\u006c": "{name}"}}',
    '{{"tool": "\\u00{first:02x}{rest}"}}',  # an escape in the value
    '{{"tool": "list", "tool": "{name}"}}',  # a duplicate key: JSON's parser keeps the last
    '\n\t {{ "tool" :\n"{name}" }} \n',  # whitespace anywhere JSON allows it
    '{{"tool":"{name}","path":"calc.py"}}',
]


def spelled(template: str, name: str) -> str:
    action = template.format(name=name, first=ord(name[0]), rest=name[1:])
    assert parse_tool_call(action)["tool"] == name  # the env reads exactly this tool
    return action


@pytest.mark.parametrize("template", SPELLINGS)
def test_block_tool_blocks_every_spelling_of_submit(template):
    env = envharness.wrap(ENV, BlockTool(tools=["submit"]), task="add")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(spelled(template, "submit"))
    assert info["blocked"] == "tool submit is not available"
    assert not terminated and not info["verdict"].success and "submitted" not in obs


@pytest.mark.parametrize("template", SPELLINGS)
def test_tool_cost_charges_every_spelling_of_the_tool(template):
    env = envharness.wrap(ENV, ToolCost(tool="run_tests", cost=0.5), task="add")
    env.reset(seed=0)
    reward = env.step(spelled(template, "run_tests"))[1]
    assert reward == -0.5


@pytest.mark.parametrize("template", SPELLINGS)
@pytest.mark.parametrize("tool", ["run_tests", "submit"])
def test_a_setup_prefix_cannot_run_code_under_any_spelling(template, tool):
    env = envharness.wrap(ENV, ReplayPrefix(actions=[spelled(template, tool)]), task="add")
    with pytest.raises(envharness.TransformError, match="runs code, which setup may not do"):
        env.reset(seed=0)


def test_a_deeply_nested_tool_call_is_one_line_tool_error_and_the_episode_goes_on():
    env = envharness.wrap(ENV, BlockTool(tools=["submit"]), task="add")
    env.reset(seed=0)
    nested = '{"tool": "view", "path": ' + "[" * 1900 + "]" * 1900 + "}"
    obs, reward, terminated, truncated, info = env.step(nested)
    assert info["tool_error"] == 'the tool call nests too deeply; send a flat JSON object such as {"tool": "list"}'
    assert not terminated
    assert "calc.py" in env.step(json.dumps({"tool": "list"}))[0]  # and the env still answers


@pytest.mark.parametrize("action", ['[["tool", "submit"]]', '"submit"', "7", "null"])
def test_an_action_that_is_no_json_object_is_a_tool_error_never_a_tool(action):
    env = envharness.wrap(ENV, task="add")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert "tool_error" in info and not terminated
