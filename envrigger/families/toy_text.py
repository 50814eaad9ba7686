"""The toy-text family (FrozenLake, Taxi, CliffWalking, generated FrozenLake maps): a planner over the transition table.

Contains :data:`FAMILY`.

Example:
    >>> FAMILY.parts()
    ('reference_solver',)
"""

from __future__ import annotations

from envrigger.family_registry import Family, register_family
from envrigger.policies.reference import TabularPlanner

FAMILY = register_family(Family("toy_text", reference_solver=TabularPlanner))

__all__ = ["FAMILY"]
