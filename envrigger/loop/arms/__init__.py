"""The arms: each one registered unit, trained side by side at equal training steps, picked on validation levels.

The face of the package: :func:`register_arm` (a class decorator, as gates and families
register), :func:`registered` (every arm, in the order a round trains them) and
:func:`check_arms` (what ``LoopConfig.arms`` refuses). Each arm lives in its own module
here, a subclass of :class:`~envrigger.loop.arms.base.LoopArm` that declares its name, its
random stream, the arms it needs and its settings, and implements ``plan`` (what it trains
on this round) and, where it differs, ``train``. This package finds every module in it,
so a new arm is one module (and its tests) and edits no list.

This module imports nothing of the loop: the config checks arm names against it, and the
arm modules, which import the config, are loaded only when the registry is first read.

The stock arms, in the order they train: ``original``, ``original-select``, ``dr``,
``dr-any``, ``plr``, ``plr-random``, ``rigger-noreplay`` and ``rigger``.

Example:
    >>> list(registered())
    ['original', 'original-select', 'dr', 'dr-any', 'plr', 'accel', 'plr-random', 'rigger-noreplay', 'rigger']
    >>> check_arms(["rigger", "original"])
    ['original', 'rigger']
    >>> check_arms(["plr-random"])
    Traceback (most recent call last):
    ...
    ValueError: --arms: plr-random train on what the rigger arm admits; add rigger to --arms
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any

ARM_CLASSES: dict[str, Any] = {}
"""Every arm class registered so far, by name (read it through :func:`registered`, which loads the stock arms first)."""
_LOADED: list[bool] = []
LOOP_FIELDS = ("round", "arms", "wall_time", "schema_version")  # fields of a round's record the loop alone writes
ARM_MAPS = ("stage_seconds", "arm_findings")  # per-arm maps of a round's record: each arm writes its own entry


NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")  # an arm's name is part of file names (ARM-round-N): no path characters
TAKEN_FILES = ("levels",)  # the loop's own files ARM-round-N would overwrite (levels-round-N.json); and NAME-shadow (below)


def register_arm(cls: Any) -> Any:
    """Class decorator: enrol an arm under its ``name``; a name taken by another arm, or a replay stream, is refused.

    The stock arms are registered first, so no arm registered later can take their names.

    Example:
        >>> class Broken:
        ...     name, order, help, replay_stream = "../plr", 99, "a name that is a path", None
        >>> register_arm(Broken)
        Traceback (most recent call last):
        ...
        ValueError: arm name '../plr': use lower-case letters, digits and single hyphens (it names the arm's files)
    """
    if not _LOADED:
        registered()
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"arm name {name!r}: use lower-case letters, digits and single hyphens (it names the arm's files)")
    if name in TAKEN_FILES or name.endswith("-shadow"):  # rigger-shadow-round-N is the rigger arm's shadow learner
        raise ValueError(f"arm name {name!r}: the loop's own files are named so (levels-round-N, ARM-shadow-round-N); pick another")
    order = getattr(cls, "order", None)
    if isinstance(order, bool) or not isinstance(order, int | float):
        raise ValueError(f"arm {name!r}: give it an order, a number (the stock arms use 0 to 70), saying where a round trains it")
    if not getattr(cls, "help", ""):
        raise ValueError(f"arm {name!r}: give it a help line (envrigger run --help shows it)")
    taken = ARM_CLASSES.get(name)
    if taken is not None and taken is not cls:
        raise ValueError(f"arm {name!r} is registered already (by {taken.__module__}.{taken.__qualname__}); pick another name")
    stream = getattr(cls, "replay_stream", None)
    sharing = [other.name for other in ARM_CLASSES.values() if other.name != name and stream is not None and other.replay_stream == stream]
    if sharing:
        raise ValueError(f"arm {name!r}: replay stream {stream} is {sharing[0]}'s; pick a number no other arm uses")
    fields = tuple(getattr(cls, "round_fields", ()))
    for other in ARM_CLASSES.values():
        shared = [key for key in fields if other.name != name and key in getattr(other, "round_fields", ())]
        if shared:
            raise ValueError(f"arm {name!r}: the round's {shared[0]!r} is the {other.name} arm's (round_fields); name a field of its own")
    loops = [key for key in fields if key in LOOP_FIELDS + ARM_MAPS]
    if loops:
        raise ValueError(f"arm {name!r}: the round's {loops[0]!r} is the loop's; name a field of its own in round_fields")
    ARM_CLASSES[name] = cls
    return cls


def registered() -> dict[str, Any]:
    """Every registered arm class by name, in training order (``order``, then name); the stock arms load on first call."""
    if not _LOADED:
        _LOADED.append(True)
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")
    return dict(sorted(ARM_CLASSES.items(), key=lambda item: (item[1].order, item[0])))


def check_arms(names: list[str]) -> list[str]:
    """``names`` in training order, or a one-line ``ValueError`` for an unknown, repeated or lonely arm."""
    arms = registered()
    if not names or len(set(names)) != len(names) or any(name not in arms for name in names):
        raise ValueError(f"--arms: got {','.join(names)!r}; give distinct arms from {','.join(arms)}")
    for name in names:
        unknown = [need for need in arms[name].needs if need not in arms]
        if unknown:
            raise ValueError(f"--arms: {name} needs the {unknown[0]} arm, which no module registers; register it or remove {name}")
        missing = [need for need in arms[name].needs if need not in names]
        if missing:
            lonely = [n for n in names if missing[0] in arms[n].needs]
            raise ValueError(f"--arms: {','.join(lonely)} train on what the {missing[0]} arm admits; add {missing[0]} to --arms")
    return [name for name in arms if name in names]  # a fixed order, so every run trains arms alike


__all__ = ["ARM_CLASSES", "ARM_MAPS", "LOOP_FIELDS", "check_arms", "register_arm", "registered"]
