"""Env families: each family's parts, registered once under its adapter's family key.

Contains the registry (:class:`~envrigger.family_registry.Family`,
:func:`~envrigger.family_registry.register_family`, :func:`~envrigger.family_registry.family`,
:func:`~envrigger.family_registry.family_of`, :class:`~envrigger.family_registry.MissingPart`)
and one module per built-in family (``minigrid``, ``toy_text``, ``classic_control``,
``code_repair``, ``textworld``, ``generic``), each registering its reference solver, text
view, default agent harness and level search. Consumers (``reference_policy``,
``text_view``, ``default_harness``, the solvability gate) look parts up by the family key
of the wrapped env's adapter.
"""

from envrigger.family_registry import PARTS, Family, LevelSearch, MissingPart, families, family, family_of, register_family

__all__ = ["PARTS", "Family", "LevelSearch", "MissingPart", "families", "family", "family_of", "register_family"]
