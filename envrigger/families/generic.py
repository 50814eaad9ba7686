"""The generic family: any Gymnasium env no other adapter serves. It reads as a chat when its observations and actions are text.

Contains :data:`FAMILY`. It has no reference solver, search or harness of its own:
asking for one is a :class:`~envrigger.family_registry.MissingPart`.

Example:
    >>> FAMILY.parts()
    ('text_view',)
"""

from __future__ import annotations

from envrigger.agents.textview import view_from_spaces
from envrigger.family_registry import Family, register_family

FAMILY = register_family(Family("generic", text_view=view_from_spaces))

__all__ = ["FAMILY"]
