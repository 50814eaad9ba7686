"""Untrusted values in messages and specs: shown safely, and numbers no spec means refused.

Contains :func:`shown` (a value for a one-line message, whatever it is) and
:func:`check_numbers` (a whole number wider than 64 bits or a float that is not finite,
anywhere in spec data, is a :class:`~envharness.errors.SpecError` naming its field).
Nothing here imports the rest of envharness but its errors, so every layer can use it.
"""

from __future__ import annotations

import math
from typing import Any

from envharness.errors import SpecError


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters; an integer too long to print is described instead.

    Example:
        >>> shown(10**5000)
        'an integer of 5001 digits'
        >>> len(shown("x" * 100))
        80
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4000:
        return f"an integer of {_digits(value)} digits"
    try:
        text = repr(value)
    except ValueError:  # a container holding an integer too long to print
        return f"a {type(value).__name__} holding an integer too long to print"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _digits(value: int) -> int:
    """Decimal digits of ``abs(value)``, without turning it into text (which refuses past 4300 digits)."""
    value = abs(value)
    estimate = max(1, int(value.bit_length() * 0.30102999566398120))
    while 10**estimate <= value:
        estimate += 1
    while estimate > 1 and 10 ** (estimate - 1) > value:
        estimate -= 1
    return estimate


MAX_BITS = 64  # the widest whole number a spec holds: seeds, step counts and sizes all fit
MAX_ID = 300  # an env id: a Gymnasium id, or module:Env-v0 of an importable module
MAX_KWARGS = 100  # keyword arguments of a base env, parameters of a transform
MAX_TRANSFORMS = 1000  # transforms of one spec: far above any curriculum's stack of reshapings
# The upper bounds of the commands' counts and sizes: far above any real use, and each one there.
MOST_EPISODES = 10_000_000
MOST_SEED = 2**62  # a first level seed: seed + episodes still fits the int64 column a run stores it in
MOST_SECONDS = 30 * 86_400  # a wall limit, a timeout: a month
MOST_WORKERS = 1024  # processes or threads at once
MOST_BODY_BYTES = 1 << 30  # one HTTP request body


class LongInteger:
    """An integer in JSON text too long to read (Python refuses past 4300 digits): how many digits it had."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def parse_int(text: str) -> int | LongInteger:
    """``json.loads``'s ``parse_int``: an integer, or a :class:`LongInteger` that :func:`check_numbers` refuses by field."""
    digits = len(text.lstrip("-"))
    return int(text) if digits <= 4000 else LongInteger(digits)


def check_numbers(value: Any, field: str) -> None:
    """Raise :class:`SpecError` naming ``field`` (and the path inside it) for a number no spec means.

    Spec data is untrusted: a whole number wider than 64 bits, or a float that is not finite,
    would otherwise surface as a raw ``ValueError`` or ``OverflowError`` wherever it is first used.

    Example:
        >>> check_numbers({"ranges": {"pole_length": [0.5, float("inf")]}}, "env_kwargs")
        Traceback (most recent call last):
        ...
        envharness.errors.SpecError: env_kwargs.ranges.pole_length[1]: got inf; give a finite number
    """
    if isinstance(value, bool):
        return
    if isinstance(value, LongInteger):
        raise SpecError(f"{field}: got an integer of {value.digits} digits; give a whole number of at most 19 digits")
    if isinstance(value, int):
        if value.bit_length() > MAX_BITS:
            raise SpecError(f"{field}: got {shown(value)}; give a whole number of at most 19 digits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(f"{field}: got {value!r}; give a finite number")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_numbers(item, f"{field}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_numbers(item, f"{field}[{index}]")
