"""The code-repair family (CodeRepair, HumanEvalFix): replies are JSON tool calls; the reference solver applies the known fix.

Contains :data:`FAMILY`, :func:`tool_view` (its text view) and :func:`code_harness` (its
default agent harness, with the prompts ``CODE_SYSTEM`` and ``CODE_TEXT_TURN``).

Example:
    >>> import envharness
    >>> view = tool_view(envharness.wrap("envharness/CodeRepair-v0", task="add", reviewer="hint"))
    >>> view.kind, view.ask_human
    ('tool_calls', True)
    >>> code_harness("tools").max_calls
    60
"""

from __future__ import annotations

import gymnasium as gym

from envrigger.agents.harness import AgentHarness, ParseRules
from envrigger.agents.textview import TextView, view_from_spaces
from envrigger.family_registry import Family, register_family
from envrigger.policies.reference import CodeRepairSolver

CODE_SYSTEM = (
    "You repair a bug in a small Python module with tools: list, view, replace, run_tests and submit. "
    "Look at the module, fix it, run the visible tests, then submit. Submitting ends the episode."
)
CODE_TEXT_TURN = (
    '{{ observation }}\n\nReply with exactly one JSON tool call, e.g. {"tool": "view", "path": "calc.py"} or {"tool": "submit"}.'
)


def tool_view(env: gym.Env) -> TextView:
    """Text in, a JSON tool call out (an ``ask_human`` tool too when the env has a reviewer); other spaces as they allow."""
    if isinstance(env.observation_space, gym.spaces.Text) and isinstance(env.action_space, gym.spaces.Text):
        return TextView("tool_calls", env.action_space, ask_human=getattr(env.unwrapped, "reviewer", None) is not None)
    return view_from_spaces(env)


def code_harness(output: str) -> AgentHarness:
    """Tool prompts, a short strip set (JSON keeps its quotes) and 60 model calls an episode."""
    turn = CODE_TEXT_TURN if output == "text" else "{{ observation }}"
    return AgentHarness(
        system_prompt=CODE_SYSTEM,
        task_template=turn,
        turn_template=turn,
        output=output,  # type: ignore[arg-type]
        parse=ParseRules(strip=" \t\r\n"),
        max_calls=60,
    )


FAMILY = register_family(Family("code_repair", reference_solver=CodeRepairSolver, text_view=tool_view, agent_harness=code_harness))

__all__ = ["CODE_SYSTEM", "CODE_TEXT_TURN", "FAMILY", "code_harness", "tool_view"]
