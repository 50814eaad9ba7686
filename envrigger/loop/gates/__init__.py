"""Admission gates: one protocol, one registry, run as a list in one fail-closed loop.

The face of the package: :class:`Gate` (the protocol every gate follows),
:class:`GateContext` (what a gate sees), :class:`GateResult` (what it returns),
:class:`RoundContext` (the loop's state, for gates that train), :func:`register_gate` and
:data:`GATES` (every registered gate, in the order they run). Each gate lives in its own
module here and registers itself on import; this package imports every module in it, so a
new gate is one module (and its tests) and edits no list.

The gates, in order: verifier integrity, solvability, no shortcut, solvability by the
agent (only when nothing else could tell), learnability, targeting, novelty, and the
opt-in transfer gate. :class:`~envrigger.loop.validate.Validator` runs them.
"""

from __future__ import annotations

import importlib
import pkgutil

from envrigger.loop.gates.base import GATES, Gate, GateContext, GateResult, Rejected, RoundContext, register_gate

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["GATES", "Gate", "GateContext", "GateResult", "Rejected", "RoundContext", "register_gate"]
