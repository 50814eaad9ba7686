"""Spaces, observations and actions as JSON, for an env served over HTTP and its client.

Contains :func:`describe_space` and :func:`space_from` (a Gymnasium space as JSON data and
back), :func:`encode` (an observation, or any info value, as JSON data) and :func:`decode`
(JSON data as a value of a space: what a client sends as an action, what it receives as an
observation). Numbers that JSON cannot carry (``inf``, ``nan``) travel as the strings
``"inf"``, ``"-inf"`` and ``"nan"``. Decoding checks shape and type and raises
:class:`~envharness.errors.ActionError` with one line naming the problem; whether an action
is *in* the space is left to the harness, which refuses it exactly as in-process.
"""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np
from gymnasium import spaces

from envharness.errors import ActionError

_SPECIAL = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _number(value: float) -> Any:
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def encode(value: Any) -> Any:
    """``value`` as plain JSON data: arrays as (nested) lists, numpy scalars as numbers, non-finite floats as strings.

    Example:
        >>> import numpy as np
        >>> encode({"pos": np.array([1.5, np.inf], dtype=np.float32), "n": np.int64(3), "ok": np.bool_(True)})
        {'pos': [1.5, 'inf'], 'n': 3, 'ok': True}
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            return encode(value.tolist())
        return value.tolist()
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _number(float(value))
    if isinstance(value, str) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if hasattr(value, "to_dict"):  # a Verdict (a tuple underneath: before tuples)
        return encode(value.to_dict())
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return repr(value)[:200]  # what JSON cannot hold is shown, not sent as data


def _floats(data: Any) -> Any:
    if isinstance(data, list):
        return [_floats(v) for v in data]
    if isinstance(data, str) and data in _SPECIAL:
        return _SPECIAL[data]
    return data


def describe_space(space: spaces.Space) -> dict[str, Any]:
    """A space as JSON data, enough for a client in any language to build and check values.

    Example:
        >>> describe_space(spaces.Discrete(3))
        {'type': 'Discrete', 'n': 3, 'start': 0}
        >>> space_from(describe_space(spaces.Box(0.0, 1.0, (2,)))) == spaces.Box(0.0, 1.0, (2,))
        True
    """
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Box):
        return {"type": "Box", "low": encode(space.low), "high": encode(space.high), "shape": list(space.shape), "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": encode(space.nvec), "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": encode(np.asarray(space.n))}
    if isinstance(space, spaces.Text):
        return {
            "type": "Text",
            "max_length": int(space.max_length),
            "min_length": int(space.min_length),
            "charset": "".join(space.character_list),
        }
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: describe_space(s) for k, s in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [describe_space(s) for s in space.spaces]}
    if hasattr(space, "mission_func"):  # MiniGrid's MissionSpace: text whose grammar lives in a function, sent as Text
        return {"type": "Text", "max_length": 1000, "min_length": 0, "charset": string.printable}
    raise ActionError(
        f"{type(space).__name__} spaces cannot be served as JSON; use Discrete, Box, MultiDiscrete, MultiBinary, Text, Dict or Tuple"
    )


def space_from(data: dict[str, Any]) -> spaces.Space:
    """The space :func:`describe_space` described."""
    kind = data["type"]
    if kind == "Discrete":
        return spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        return spaces.Box(np.asarray(_floats(data["low"]), dtype=dtype), np.asarray(_floats(data["high"]), dtype=dtype), dtype=dtype)
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(data["nvec"]), dtype=np.dtype(data.get("dtype", "int64")))
    if kind == "MultiBinary":
        n = data["n"]
        return spaces.MultiBinary(n if isinstance(n, int) else list(n))
    if kind == "Text":
        return spaces.Text(max_length=int(data["max_length"]), min_length=int(data["min_length"]), charset=str(data["charset"]))
    if kind == "Dict":
        return spaces.Dict({k: space_from(v) for k, v in data["spaces"].items()})
    if kind == "Tuple":
        return spaces.Tuple([space_from(v) for v in data["spaces"]])
    raise ValueError(f"unknown space type {kind!r}")


def decode(space: spaces.Space, data: Any, what: str = "action") -> Any:
    """JSON ``data`` as a value of ``space`` (right type and shape); one-line :class:`ActionError` otherwise.

    Example:
        >>> decode(spaces.Discrete(2), 1), decode(spaces.Box(-1.0, 1.0, (2,)), [0.5, -0.5]).dtype
        (1, dtype('float32'))
        >>> decode(spaces.Discrete(2), "left")
        Traceback (most recent call last):
        ...
        envharness.errors.ActionError: action: 'left' is not a whole number (the action space is Discrete(2))
    """
    shown = f"{str(data)[:60]!r}" if isinstance(data, str) else str(data)[:60]
    if isinstance(space, spaces.Discrete):
        if isinstance(data, bool) or not isinstance(data, int):
            raise ActionError(f"{what}: {shown} is not a whole number (the action space is {space})")
        return int(data)
    if isinstance(space, spaces.Text):
        if not isinstance(data, str):
            raise ActionError(f"{what}: {shown} is not a string (the action space is Text)")
        return data
    if isinstance(space, (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)):
        try:
            array = np.asarray(_floats(data), dtype=space.dtype)
        except (TypeError, ValueError, OverflowError):
            raise ActionError(f"{what}: {shown} is not an array of {space.dtype} (the action space is {space})") from None
        if array.shape != space.shape:
            raise ActionError(f"{what}: shape {list(array.shape)} where the space has {list(space.shape or ())}")
        if space.dtype.kind in "iub" and not np.array_equal(np.asarray(_floats(data), dtype=np.float64), array):
            raise ActionError(f"{what}: {shown} is not whole numbers (the action space is {space})")
        return array
    if isinstance(space, spaces.Dict):
        if not isinstance(data, dict) or set(data) != set(space.spaces):
            raise ActionError(f"{what}: needs an object with exactly the keys {', '.join(space.spaces)}")
        return {k: decode(s, data[k], f"{what}.{k}") for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        if not isinstance(data, list) or len(data) != len(space.spaces):
            raise ActionError(f"{what}: needs a list of {len(space.spaces)} values")
        return tuple(decode(s, v, f"{what}[{i}]") for i, (s, v) in enumerate(zip(space.spaces, data)))
    raise ActionError(f"{what}: {type(space).__name__} spaces cannot be served as JSON")
