"""Values the agent's code produced, carried out of the sandbox as exact-typed plain data.

Contains :data:`ENCODER` (program text: the encoder every judge program that runs the
agent's code defines before it runs it), :class:`Opaque` and :func:`decode` (the host's
side: plain Python data built here from the encoded form, anything else opaque). Used by
the probe judge (:mod:`envharness.envs.code_repair`) and the check judge
(:mod:`envharness.envs.check_judge`).
"""

from __future__ import annotations

from typing import Any

# How a value the agent's code produced is reported: its data, read with the exact types' own
# methods, never its class's. Defined before the agent's code runs, so the builtins it uses are
# the real ones (bound as defaults). Shared by every program that runs the agent's code.
ENCODER = r"""
def exact_encoder(kind_of=type, text=str, sub=issubclass, limit=20000):
    exact = ((list, "list"), (tuple, "tuple"), (set, "set"), (frozenset, "frozenset"))
    room = [limit]

    def encode(value, depth=0):
        room[0] -= 1
        kind = kind_of(value)
        if depth > 40 or room[0] < 0:
            return ["toolarge"]
        if value is None:
            return ["none"]
        # Subclasses are read through their base type's own methods: the data they hold is
        # reported, and whatever they override (__eq__, __bool__, __iter__...) is not consulted.
        if kind is bool:
            return ["bool", value is True]
        if sub(kind, int):
            return ["int", int.__repr__(value)] if int.bit_length(value) < 4000 else ["toolarge"]
        if sub(kind, float):
            return ["float", float.__repr__(value)]
        if sub(kind, str):
            return ["str", str.__getitem__(value, slice(None))] if str.__len__(value) <= 100000 else ["toolarge"]
        for base, name in exact:
            if sub(kind, base):
                return [name, [encode(item, depth + 1) for item in base.__iter__(value)]]
        if sub(kind, dict):
            return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]]
        return ["object", text(getattr(kind, "__qualname__", "?"))[:200]]

    return encode

"""


class Opaque:
    """A value the judge cannot read as plain data (an object, an exception, a value too large): equal only to itself."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __bool__(self) -> bool:
        raise TypeError(f"{self.what} has no truth value the judge can trust")

    def __repr__(self) -> str:
        return f"<{self.what}>"


def decode(node: Any, depth: int = 0) -> Any:
    """A probe value as plain Python data, built here from the encoded form; malformed input raises ValueError."""
    if depth > 45 or not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise ValueError("malformed probe value")
    kind, rest = node[0], node[1:]
    if kind == "none" and not rest:
        return None
    if kind == "bool" and len(rest) == 1 and isinstance(rest[0], bool):
        return rest[0]
    if kind == "int" and len(rest) == 1 and isinstance(rest[0], str) and len(rest[0]) < 1300:
        return int(rest[0])
    if kind == "float" and len(rest) == 1 and isinstance(rest[0], str) and len(rest[0]) < 40:
        return float(rest[0])
    if kind == "str" and len(rest) == 1 and isinstance(rest[0], str):
        return rest[0]
    if kind in ("list", "tuple", "set", "frozenset") and len(rest) == 1 and isinstance(rest[0], list):
        items = [decode(item, depth + 1) for item in rest[0]]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
    if kind == "dict" and len(rest) == 1 and isinstance(rest[0], list):
        if not all(isinstance(pair, list) and len(pair) == 2 for pair in rest[0]):
            raise ValueError("malformed dict")
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in rest[0]}
    if kind == "object" and len(rest) == 1 and isinstance(rest[0], str):
        return Opaque(f"a {rest[0]} object")
    if kind == "raised" and len(rest) == 1 and isinstance(rest[0], str):
        return Opaque(f"raised {rest[0]}")
    if kind == "toolarge" and not rest:
        return Opaque("a value too large")
    raise ValueError("malformed probe value")


__all__ = ["ENCODER", "Opaque", "decode"]
