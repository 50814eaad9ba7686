"""Levels: which seeds an arm may play, and which levels a run keeps for validation and held-out evaluation.

Contains :class:`Seeds` (fresh training seeds in order, skipping every seed whose *base*
level, the original env's level for that seed before any state transform, is reserved;
level ids are read once per process and kept),
:func:`first_free`, :class:`LevelSplit` (the level ids training must
never see, a run's ``levels.json``) and :func:`read_used_levels` (a round's ``levels-round-N.json``). A level is reserved with its whole group (:func:`envharness.adapters.base.is_reserved`):
on HumanEvalFix, holding out one bug of a problem holds out the problem.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from envharness.adapters.base import is_reserved, level_group
from envharness.errors import TransformError
from envharness.reading import json_kind, read_json, read_model
from envharness.spec import HarnessSpec
from envrigger.data import TrajectoryError
from envrigger.loop.config import EVAL_SEED, SELECT_SEED, TRAIN_SEED, LoopConfig

REFUSED = "refused:"  # the level id Seeds gives a seed whose level the harness refuses
# Level ids already read, by (spec hash, seed): a seed's level is a function of the two (reset(seed) is
# deterministic), and every arm draws the same fresh training seeds, so each is read once per process, not once per arm.
_LEVELS: dict[tuple[str, int], str] = {}
_LEVELS_KEPT = 1 << 18
FIX_SAVED = "restore it from a copy, or start a new run"


class Seeds:
    """Fresh training seeds in order, skipping every seed whose base level is reserved.

    Example:
        >>> from envharness import HarnessSpec
        >>> spec = HarnessSpec(env_id="MiniGrid-Empty-Random-6x6-v0")
        >>> reserved = {Seeds(spec, 0).level(100)}
        >>> seeds = Seeds(spec, start=100, reserved=reserved)
        >>> seed = seeds.next()
        >>> seed > 100 and seeds.level(seed) not in reserved and seeds.skipped >= 1
        True
    """

    def __init__(self, base: HarnessSpec, start: int, reserved: set[str] | None = None) -> None:
        self.base, self.counter, self.reserved = base, start, reserved or set()
        self.skipped = 0
        self.unplayable = 0  # seeds whose base level the harness refuses (it starts solved)
        self.issued: list[int] = []
        self.levels: set[str] = set()  # base level ids of every issued seed
        self._probe: Any = None
        self._spec_hash = base.hash()

    def level(self, seed: int) -> str:
        """The original env's level id for ``seed`` (one reset of a plain base env); :data:`REFUSED` + seed if it refuses it.

        A level that starts solved (GoToDoor-5x5 at seed 3: ``done`` already wins) teaches and
        measures nothing, so it is never handed out, held out or validated on; the harness
        plays such an original level, and refuses it once reshaped.
        """
        key = (self._spec_hash, int(seed))
        known = _LEVELS.get(key)
        if known is not None:
            return known
        if self._probe is None:
            self._probe = self.base.build()
        try:
            level = self._probe.reset(seed=int(seed))[1].get("level_id")
            if self._probe.starts_solved() is not None:
                level = f"{REFUSED}{int(seed)}"
        except TransformError:
            level = f"{REFUSED}{int(seed)}"
        found = "" if level is None else str(level)
        if len(_LEVELS) >= _LEVELS_KEPT:
            _LEVELS.pop(next(iter(_LEVELS)))  # the oldest
        _LEVELS[key] = found
        return found

    def next(self) -> int:
        while True:
            seed, self.counter = self.counter, self.counter + 1
            level = self.level(seed)
            if is_reserved(level, self.reserved):
                self.skipped += 1
                continue
            if level.startswith(REFUSED):
                self.unplayable += 1
                continue
            self.levels.add(level)
            self.issued.append(seed)
            return seed

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None


def read_used_levels(path: Path) -> dict[str, set[str]]:
    """A round's ``levels-round-N.json``: the level ids each use played; a file of another shape is a one-line TrajectoryError naming it."""
    saved = read_json(path, dict, fix=FIX_SAVED, error=TrajectoryError)
    for use, levels in saved.items():
        if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
            raise TrajectoryError(f"{path}: {use}: holds {json_kind(levels)}, not a list of level ids; {FIX_SAVED}")
    return {use: set(levels) for use, levels in saved.items()}


def first_free(
    base: HarnessSpec,
    seeds: Iterable[int],
    reserved: set[str],
    count: int,
    levels: set[str] | None = None,
    tick: Callable[[int], None] = lambda n: None,
) -> list[int]:
    """The first ``count`` of ``seeds`` whose base level is not reserved (nor refused); ``levels``, if given, collects their levels.

    Example:
        >>> from envharness import HarnessSpec
        >>> spec = HarnessSpec(env_id="MiniGrid-Empty-Random-6x6-v0")
        >>> taken = Seeds(spec, 0).level(0)
        >>> 0 in first_free(spec, range(10), {taken}, 3)
        False
    """
    picker = Seeds(base, 0, reserved)
    out: list[int] = []
    try:
        for seed in seeds:
            if len(out) >= count:
                break
            level = picker.level(seed)
            tick(1)
            if not is_reserved(level, reserved) and not level.startswith(REFUSED):
                out.append(int(seed))
                if levels is not None:
                    levels.add(level)
    finally:
        picker.close()
    return out


class LevelSplit(BaseModel):
    """The reserved levels of a run: held-out (looked at once, at the end) and validation (picks rounds).

    Built once by :meth:`make` and saved as ``levels.json``. ``reserved`` is what training,
    collection and candidate validation must never play.
    """

    heldout_seeds: list[int]
    heldout_levels: list[str]
    validation_seeds: list[int]
    validation_levels: list[str]
    disjoint: bool = Field(description="False when the run allows seen levels and reserves nothing")

    @property
    def reserved(self) -> set[str]:
        return set(self.heldout_levels) | set(self.validation_levels) if self.disjoint else set()

    @classmethod
    def read(cls, path: Path) -> LevelSplit:
        """A run's ``levels.json``; one that is not one is a one-line TrajectoryError naming it and its first bad field."""
        return read_model(cls, path, fix=FIX_SAVED, error=TrajectoryError)

    @classmethod
    def make(cls, base: HarnessSpec, config: LoopConfig, probe: int = 200, tick: Callable[[int], None] = lambda n: None) -> LevelSplit:
        """Draw the held-out and validation levels, or refuse an env with too few distinct levels.

        ``tick(1)`` is called once per level drawn, about :meth:`draws` times in all (a progress bar's steps).
        """
        # The first seeds from EVAL_SEED whose level can be played (every one, in an env that starts no level solved).
        heldout = first_free(
            config.heldout_base,
            range(config.level(EVAL_SEED), config.level(EVAL_SEED) + 20 * config.eval_episodes),
            set(),
            config.eval_episodes,
            tick=tick,
        )
        scan = Seeds(base, 0)

        def level(seeds: Seeds, seed: int) -> str:
            found = seeds.level(seed)
            tick(1)
            return found

        try:
            if config.heldout_spec is None:
                held = {level(scan, s) for s in heldout}
            else:
                other = Seeds(config.heldout_spec, 0)
                try:
                    held = {level(other, s) for s in heldout}
                finally:
                    other.close()
            if config.allow_seen_levels:
                val = first_free(
                    base,
                    range(config.level(SELECT_SEED), config.level(SELECT_SEED) + 20 * config.val_episodes),
                    set(),
                    config.val_episodes,
                    tick=tick,
                )
                return cls(
                    heldout_seeds=heldout,
                    heldout_levels=sorted(held),
                    validation_seeds=val,
                    validation_levels=sorted({level(scan, s) for s in val}),
                    disjoint=False,
                )
            val_levels: set[str] = set()
            val = first_free(
                base,
                range(config.level(SELECT_SEED), config.level(SELECT_SEED) + 20 * config.val_episodes),
                held,
                config.val_episodes,
                val_levels,
                tick=tick,
            )
            reserved = held | val_levels
            taken = sum(is_reserved(level(scan, config.level(TRAIN_SEED) + i), reserved) for i in range(probe))
        finally:
            scan.close()
        if len(val) < config.val_episodes or taken > probe // 2:
            raise TrajectoryError(
                f"{base.env_id} has too few distinct levels for level-disjoint held-out evaluation: {len(held)} distinct levels "
                f"among {len(heldout)} held-out seeds, and {taken} of {probe} training seeds land on a held-out or validation level; "
                "use an env that draws more distinct levels (a larger or procedurally generated variant), fewer "
                "--eval-episodes/--val-episodes, or --allow-seen-levels to evaluate on "
                "seeds of levels the learners also train on"
            )
        return cls(
            heldout_seeds=heldout, heldout_levels=sorted(held), validation_seeds=val, validation_levels=sorted(val_levels), disjoint=True
        )

    @staticmethod
    def draws(config: LoopConfig, probe: int = 200) -> int:
        """About how many levels :meth:`make` draws: more where seeds are skipped."""
        return 2 * config.eval_episodes + (2 * config.val_episodes if config.allow_seen_levels else config.val_episodes + probe)

    def check(self, used: dict[str, set[str]]) -> dict[str, int]:
        """Overlap of each use (``"arm:train"``, ``"collect"``...) with the reserved levels; raises if a disjoint split overlaps.

        Example:
            >>> split = LevelSplit(heldout_seeds=[1], heldout_levels=["a"], validation_seeds=[2], validation_levels=["b"], disjoint=True)
            >>> split.check({"original:train": {"c", "d"}})
            {'original:train': 0}
            >>> split.check({"original:train": {"a", "c"}})
            Traceback (most recent call last):
            ...
            envrigger.errors.TrajectoryError: level overlap: original:train played 1 held-out or validation level(s) (a); the held-out result would not be on unseen levels
        """
        reserved = {level_group(level) for level in (*self.heldout_levels, *self.validation_levels)}
        overlap = {use: sorted(level for level in levels if level_group(level) in reserved) for use, levels in used.items()}
        if self.disjoint:
            for use, shared in overlap.items():
                if shared:
                    raise TrajectoryError(
                        f"level overlap: {use} played {len(shared)} held-out or validation level(s) "
                        f"({', '.join(shared[:3])}); the held-out result would not be on unseen levels"
                    )
        return {use: len(shared) for use, shared in overlap.items()}
