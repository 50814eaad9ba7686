"""The MiniGrid family: a breadth-first planner for a reference solver, and the level search the gates use.

Contains :data:`FAMILY`. MiniGrid envs read as no chat (image observations), so there is
no text view or agent harness.

Example:
    >>> FAMILY.parts()
    ('reference_solver', 'search')
"""

from __future__ import annotations

from envharness.adapters import minigrid_search
from envrigger.family_registry import Family, register_family
from envrigger.policies.reference import MiniGridPlanner

FAMILY = register_family(Family("minigrid", reference_solver=MiniGridPlanner, search=minigrid_search))

__all__ = ["FAMILY"]
