"""The TextWorld family: the game's own walkthrough for a reference solver, a command-list view and a text-adventure harness.

Contains :data:`FAMILY` and :func:`textworld_harness` (its default agent harness, with the
prompts ``TEXTWORLD_SYSTEM`` and ``TEXTWORLD_TURN``). Its text view is the command list its
observations carry (:func:`~envrigger.agents.textview.view_from_spaces`).

Example:
    >>> "Commands" in textworld_harness("text").turn_template
    True
"""

from __future__ import annotations

from envrigger.agents.harness import AgentHarness
from envrigger.agents.textview import view_from_spaces
from envrigger.family_registry import Family, register_family
from envrigger.policies.reference import TextWorldSolver

TEXTWORLD_SYSTEM = (
    "You play a text adventure. Each turn you see what happened and the commands you can type. "
    "Reach the objective in as few commands as you can."
)
TEXTWORLD_TURN = "{{ observation }}\n\nCommands:\n{% for c in commands %}- {{ c }}\n{% endfor %}\nReply with one command from the list."


def textworld_harness(output: str) -> AgentHarness:
    """The text-adventure prompts, the listed commands in every turn."""
    return AgentHarness(system_prompt=TEXTWORLD_SYSTEM, task_template=TEXTWORLD_TURN, turn_template=TEXTWORLD_TURN, output=output)  # type: ignore[arg-type]


FAMILY = register_family(Family("textworld", reference_solver=TextWorldSolver, text_view=view_from_spaces, agent_harness=textworld_harness))

__all__ = ["FAMILY", "TEXTWORLD_SYSTEM", "TEXTWORLD_TURN", "textworld_harness"]
