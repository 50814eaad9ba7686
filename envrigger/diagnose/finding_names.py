"""The finding vocabulary: every finding name, registered by the detector that produces it.

Contains :class:`FindingName`, :data:`FINDING_NAMES` (the registry, keyed by name), the
:func:`produces` decorator a detector declares its names with, :func:`episode_detector`
(which registers a detector to run, in order) with :func:`episode_detectors`, and :func:`produced`, whether
a name (a transform's target, say) is one some detector can give. A name is a word
(``loop``) or a family with a detail after the colon (``terminal_cause:lava``,
``feature_region:goal_distance``), declared as ``terminal_cause:CAUSE``; a target may name a
whole family (``feature_region``) or one member (``feature_region:goal_distance``).

The registry fills as the detectors are imported: read it through
:mod:`envrigger.diagnose.detectors`, which imports them all.

Example:
    >>> from envrigger.diagnose.detectors import FINDING_NAMES
    >>> FINDING_NAMES["terminal_cause"].detector, FINDING_NAMES["terminal_cause"].pattern
    ('endings', 'terminal_cause:CAUSE')
    >>> produced("terminal_cause:lava"), produced("feature_region"), produced("early_failure")
    (True, True, False)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

KINDS = ("ending", "region", "level", "behaviour", "cost")  # how a finding is judged: see envrigger.diagnose.judge


@dataclass(frozen=True)
class FindingName:
    """One name a detector gives its findings: the word or ``family:DETAIL`` pattern, its kind and what it means."""

    pattern: str
    kind: str
    meaning: str
    detector: str = ""  # filled in by @produces

    @property
    def name(self) -> str:
        """The name, or the family before the colon: the registry's key and what a target may name."""
        return self.pattern.split(":", 1)[0]

    @property
    def has_detail(self) -> bool:
        """Whether findings carry a detail after the colon (``terminal_cause:lava``)."""
        return ":" in self.pattern


FINDING_NAMES: dict[str, FindingName] = {}

D = TypeVar("D", bound=Callable[..., list[Any]])


def produces(*names: FindingName) -> Callable[[D], D]:
    """Register the finding names a detector produces; the detector then refuses to return a name it has not declared.

    Example:
        >>> from envrigger.diagnose.flags import Flag
        >>> @produces(FindingName("sulking", "behaviour", "does nothing for a while"))
        ... def sulks(frame, config):
        ...     return [Flag("sulking", "sulks", frame, kind="behaviour"), Flag("pouting", "pouts", frame, kind="behaviour")]
        >>> FINDING_NAMES["sulking"].detector
        'sulks'
        >>> sulks([], None)
        Traceback (most recent call last):
        ...
        ValueError: detector sulks returned the finding 'pouting' (kind behaviour), which its @produces does not declare
        >>> del FINDING_NAMES["sulking"]
    """
    for name in names:
        if name.kind not in KINDS:
            raise ValueError(f"finding name {name.pattern!r}: kind {name.kind!r} is none of {', '.join(KINDS)}")
    declared = {name.name: name for name in names}

    def register(detector: D) -> D:
        for name in names:
            known = FINDING_NAMES.get(name.name)
            if known is not None and known.detector != detector.__name__:
                raise ValueError(
                    f"finding name {name.name!r} is produced by {known.detector} already; give {detector.__name__}'s another name"
                )
            FINDING_NAMES[name.name] = replace(name, detector=detector.__name__)

        @functools.wraps(detector)
        def checked(*args: Any, **kwargs: Any) -> list[Any]:
            flags = detector(*args, **kwargs)
            for flag in flags:
                family, _, detail = flag.name.partition(":")
                entry = declared.get(family)
                if entry is None or bool(detail) != entry.has_detail or flag.kind != entry.kind:
                    raise ValueError(
                        f"detector {detector.__name__} returned the finding {flag.name!r} (kind {flag.kind}), which its @produces does not declare"
                    )
            return flags

        return cast(D, checked)

    return register


_EPISODE_DETECTORS: dict[str, tuple[int, Callable[..., list[Any]]]] = {}


def episode_detector(order: int) -> Callable[[D], D]:
    """Register a ``(frame, config) -> flags`` detector to run on every diagnosis, at ``order`` (lower runs first).

    A new detector is a module in :mod:`envrigger.diagnose.detectors` with its function under
    ``@episode_detector(order=N)`` and ``@produces(...)``: the package imports every module in
    it, so nothing else lists it.

    Example:
        >>> @episode_detector(order=999)
        ... def sighs(frame, config):
        ...     return []
        >>> sighs in episode_detectors()
        True
        >>> episode_detector(order=999)(sighs)
        Traceback (most recent call last):
        ...
        ValueError: episode detector order 999 is taken by sighs; give sighs another order
        >>> del _EPISODE_DETECTORS["sighs"]
    """

    def register(detector: D) -> D:
        taken = next((name for name, (at, _) in _EPISODE_DETECTORS.items() if at == order), None)
        if taken is not None or detector.__name__ in _EPISODE_DETECTORS:
            raise ValueError(
                f"episode detector order {order} is taken by {taken or detector.__name__}; give {detector.__name__} another order"
            )
        _EPISODE_DETECTORS[detector.__name__] = (order, detector)
        return detector

    return register


def episode_detectors() -> tuple[Callable[..., list[Any]], ...]:
    """Every registered episode detector, in the order they run."""
    return tuple(detector for _, detector in sorted(_EPISODE_DETECTORS.values(), key=lambda entry: entry[0]))


def produced(name: str) -> bool:
    """Whether some registered detector gives findings called ``name`` (or, for a family, any of its members)."""
    family, _, detail = name.partition(":")
    entry = FINDING_NAMES.get(family)
    return entry is not None and (not detail or entry.has_detail)


__all__ = ["FINDING_NAMES", "KINDS", "FindingName", "episode_detector", "episode_detectors", "produced", "produces"]
