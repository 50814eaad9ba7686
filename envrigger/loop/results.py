"""What a loop run reports, as versioned models: written and read through them, old files still load.

Contains :data:`SCHEMA_VERSION`, :class:`Evaluation` (one policy scored on the original
env), :class:`ArmRound` and :class:`RoundSummary` (one round, as the library commits
it), :class:`ArmFinal`, :class:`LevelCounts` and :class:`FinalResults` (``final.json``),
:class:`AcrossSeeds` (a multi-seed run's ``result.json``, with :class:`ArmAcrossSeeds`,
:class:`Interval` and :class:`Difference`) and :class:`LoopResult` (what :func:`~envrigger.loop.run.run_loop` returns). A file
written before versions were recorded loads as version 0 (the same fields); a file from a
newer version than this code knows is refused with one line.

Example:
    >>> final = FinalResults.model_validate({
    ...     "arms": {"original": {"round": 2, "validation": 0.5, "heldout": None, "interaction": {"train": 100, "total": 100}}},
    ...     "warnings": [], "levels": {"disjoint": True, "heldout": 200, "validation": 100, "overlap": {}}})
    >>> final.schema_version, final.arms["original"].round, final.arms["original"].interaction["total"]
    (0, 2, 100)
    >>> FinalResults.model_validate({**final.model_dump(), "schema_version": 99})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for FinalResults
      Value error, schema_version 99 is newer than this envrigger reads (1); upgrade envrigger to read it [type=value_error, ...]
    ...
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from envharness.reading import read_model
from envrigger.data.versioned import Readable, Versioned
from envrigger.errors import TrajectoryError

SCHEMA_VERSION = 1  # 1: schema_version recorded in final.json and every round summary
FIX_SAVED = "restore it from a copy, or delete it and resume the run to write it again"


STEP_KINDS = ("train", "collect", "validate", "transfer", "credit", "search", "setup")  # what an arm's env steps are spent on


class _Versioned(Versioned):
    CURRENT = SCHEMA_VERSION


class Evaluation(Readable):
    """A policy scored on the original env with its original verifier, one episode per seed (:func:`~envrigger.loop.evaluate.evaluate`)."""

    model_config = ConfigDict(extra="allow")

    success: float
    ci: list[float]
    episodes: int
    mean_length: float = 0.0
    steps_to_success: float | None = None
    env_steps: int = 0
    levels: int = 0
    diversity: dict[str, float | None] = Field(default_factory=dict)
    seen_in_training: float | None = None
    outcomes: dict[int, bool] | None = None  # each seed's success, when asked for (what a paired comparison reads)
    spent: dict[str, int] | None = None  # an LLM agent's model calls and tokens, when asked for

    def dump(self) -> dict[str, Any]:
        return dict(self.model_dump(mode="json", exclude_unset=True))


# A kind of step is named `validate`, which BaseModel's deprecated `validate` classmethod also is: the field wins, as meant.
warnings.filterwarnings("ignore", message='Field name "validate" in "Steps" shadows', category=UserWarning)


class Steps(Readable):
    """An arm's env steps in one round, by what they were spent on, and their ``total``.

    ``train`` is the learner's training, ``collect`` fresh diagnosis episodes, ``validate``
    candidate validation, ``transfer`` the transfer gate's copies, ``credit`` the credit's
    thrown-away copies and scoring, ``search`` the searches behind starts along a solution,
    ``setup`` the actions played at reset before the agent's clock (a replayed prefix, the
    walked part of a start along a solution).
    A round written before the kinds were typed holds only the kinds it spent on.

    Example:
        >>> Steps.counted({"train": 100, "credit": 40}).dump()
        {'train': 100, 'collect': 0, 'validate': 0, 'transfer': 0, 'credit': 40, 'search': 0, 'setup': 0, 'total': 140}
    """

    model_config = ConfigDict(extra="allow")

    train: int = 0
    collect: int = 0
    validate: int = 0  # type: ignore[assignment]  # the field, not BaseModel's deprecated classmethod
    transfer: int = 0
    credit: int = 0
    search: int = 0
    setup: int = 0
    total: int = 0

    @classmethod
    def counted(cls, spent: dict[str, int]) -> Steps:
        """Steps of every kind (absent kinds 0; a kind of a gate's own, under its name) with their total."""
        kinds = {kind: int(spent.get(kind, 0)) for kind in STEP_KINDS}
        kinds |= {kind: int(n) for kind, n in spent.items() if kind not in kinds and kind != "total"}
        return cls(**kinds, total=sum(kinds.values()))

    def dump(self) -> dict[str, int]:
        return dict(self.model_dump(mode="json", exclude_unset=True))


class Trained(Readable):
    """One arm's training in a round, or in a chunk of it: its env steps, episodes and what it played.

    ``picks`` and ``wins`` are episodes and verified successes per env, in the order the arm
    trained on them (the original first; ``envs`` names them); ``levels`` are the training
    levels played, which the loop's level record keeps and the round record does not.

    Example:
        >>> t = Trained(steps=120, episodes=6, picks=[4, 2], wins=[1, 2], levels={"a", "b"})
        >>> t.dump()["wins"], "levels" in t.dump(), t["steps"]
        ([1, 2], False, 120)
    """

    model_config = ConfigDict(extra="allow")

    steps: int = 0
    episodes: int = 0
    picks: list[int] = Field(default_factory=list)
    wins: list[int] = Field(default_factory=list)  # verified successes per env, in the order of picks
    skipped_reserved: int = 0
    refused: int = 0
    env_errors: int = 0  # episodes the env crashed in: failed, and their levels dropped
    env_error_examples: list[str] = Field(default_factory=list)
    replays: int = 0
    search_steps: int = 0  # env steps the resets' searches took: interaction, not training
    setup_steps: int = 0  # env steps the resets' setup played (a prefix, a walked start): interaction, not training
    levels: set[str] = Field(default_factory=set, exclude=True)
    envs: list[str] | None = None  # what it trained on, by name: the original and each reshaping
    components: list[str] | None = None  # the library component behind each pick after the first (the rigger arm)
    credit: dict[str, Any] | None = None  # the credit chunks' record (an arm trained in credit chunks)
    halves: list[list[int]] | None = None  # [wins, episodes] on the original env, first and second half (--reshape-when stalled)

    def dump(self) -> dict[str, Any]:
        return dict(self.model_dump(mode="json", exclude_unset=True))


class ArmRound(Readable):
    """One arm in one round: what it trained on (``train``), the env steps it took by use, its validation-level score."""

    model_config = ConfigDict(extra="allow")

    train: Trained = Field(default_factory=Trained)
    interaction: Steps = Field(default_factory=Steps)
    validation: Evaluation


class RoundSummary(_Versioned):
    """One finished round, as the library commits it; the rigger round's fields are there when it diagnosed and validated.

    Those (``findings``, ``candidates``, ``admitted``, ``rejected_by``, ``tried``...) are absent
    from the last round, which trains and scores but admits nothing.
    """

    model_config = ConfigDict(extra="allow")

    round: int
    arms: dict[str, ArmRound]
    wall_time: float = 0.0
    library_size: int | None = None
    library_version: int | None = None
    findings: list[str] | None = None
    candidates: int | None = None
    admitted: list[int] = Field(default_factory=list)
    admitted_labels: list[str] = Field(default_factory=list)
    rejected_by: dict[str, int] = Field(default_factory=dict)
    tried: list[dict[str, Any]] = Field(default_factory=list)
    arm_findings: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)

    @property
    def validated(self) -> bool:
        """Whether the rigger arm diagnosed, proposed and validated this round (every round but the last)."""
        return self.findings is not None


class ArmFinal(Readable):
    """One arm's result: the round picked on validation levels, its validation success, held-out score, interaction."""

    model_config = ConfigDict(extra="allow")

    round: int
    validation: float
    heldout: Evaluation | None = None
    interaction: dict[str, int] = Field(default_factory=dict)


class LevelCounts(Readable):
    """The level split the result stands on: disjoint or not, how many held-out and validation levels, any overlap."""

    model_config = ConfigDict(extra="allow")

    disjoint: bool
    heldout: int
    validation: int
    overlap: dict[str, int] = Field(default_factory=dict)  # levels of each use that were reserved (0 on a disjoint split)
    heldout_digest: str | None = None  # names the held-out level set (its sorted level ids): equal digests, the same levels


class FinalResults(_Versioned):
    """A run's ``final.json``: per arm the picked round and its held-out score, warnings, the level split."""

    arms: dict[str, ArmFinal]
    warnings: list[str] = Field(default_factory=list)
    levels: LevelCounts

    @classmethod
    def load(cls, path: Path) -> FinalResults:
        """Read a ``final.json`` (any version this code knows); one that is not one is a one-line TrajectoryError naming it."""
        return read_model(cls, path, fix=FIX_SAVED, error=TrajectoryError)


class Interval(Readable):
    """A mean across master seeds with its 95% t interval (:func:`~envrigger.stats.t_interval`)."""

    model_config = ConfigDict(extra="allow")

    mean: float
    ci: list[float]
    n: int


class ArmAcrossSeeds(Readable):
    """One arm over every master seed: held-out success with its interval, steps to success, env steps, picked rounds."""

    model_config = ConfigDict(extra="allow")

    success: Interval
    steps_to_success: float | None = None
    env_steps: dict[str, float] = Field(default_factory=dict)
    rounds: list[int] = Field(default_factory=list)
    collapsed: int = 0


class Difference(Interval):
    """The focus arm minus another, paired by master seed, and the relative change in steps to success."""

    steps_to_success_change: float | None = None


class AcrossSeeds(_Versioned):
    """A multi-seed run's ``result.json``: each arm across master seeds and the focus arm's paired differences.

    Example:
        >>> r = AcrossSeeds.model_validate({"seeds": [0, 1], "focus": "rigger", "arms": {"rigger": {
        ...     "success": {"mean": 0.5, "ci": [0.4, 0.6], "n": 2}}}, "difference": {}})
        >>> r.schema_version, r.arms["rigger"].success.mean, r["focus"]
        (0, 0.5, 'rigger')
    """

    seeds: list[int]
    arms: dict[str, ArmAcrossSeeds]
    difference: dict[str, Difference] = Field(default_factory=dict)
    focus: str

    @classmethod
    def load(cls, path: Path) -> AcrossSeeds:
        """Read a ``result.json`` (any version this code knows); one that is not one is a one-line TrajectoryError naming it."""
        return read_model(cls, path, fix=FIX_SAVED, error=TrajectoryError)


def read_rounds(records: list[Any], where: str) -> list[RoundSummary]:
    """Round records as a library keeps them, typed; a damaged one is a one-line ``TrajectoryError`` naming the round and field.

    Example:
        >>> read_rounds([{"round": 1, "arms": {}, "rejected_by": ["x"]}], "runs/a/library.db")
        Traceback (most recent call last):
        ...
        envrigger.errors.TrajectoryError: runs/a/library.db: round 1: rejected_by: Input should be a valid dictionary; the run's record is damaged: start a new run
    """
    rounds = []
    for number, record in enumerate(records, 1):
        try:
            rounds.append(RoundSummary.model_validate(record))
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "the record"
            named = record.get("round", number) if isinstance(record, dict) else number
            message = str(first["msg"]).removeprefix("Value error, ")
            raise TrajectoryError(f"{where}: round {named}: {field}: {message}; the run's record is damaged: start a new run") from None
    return rounds


class LoopResult(Readable):
    """What a loop run returns: every round's summary and the final results."""

    rounds: list[RoundSummary]
    final: FinalResults
