"""The gate protocol: :class:`Gate`, :class:`GateContext`, :class:`GateResult`, :class:`RoundContext`, the registry.

A gate is a class with a ``name``, an ``order`` and ``run(context, seeds) -> GateResult | None``,
registered with :func:`register_gate`. The validator builds one instance of every
registered gate, runs those that :meth:`Gate.applies` in ``order``, and stops at the first
failure. ``None`` means *undecided*: a later gate that ``records`` the same name must
decide, or the candidate is refused (fail closed).

Example:
    >>> from envrigger.loop.gates import GATES, Gate, GateResult, register_gate
    >>> [name for name in GATES][:3]
    ['verifier_integrity', 'solvability', 'no_shortcut']
    >>> @register_gate
    ... class ShortName(Gate):
    ...     '''Refuses a candidate whose finding name is longer than 40 characters.'''
    ...     name, order = "short_name_example", 95
    ...     def run(self, context, seeds):
    ...         ok = len(context.candidate.finding) <= 40
    ...         return GateResult(gate=self.name, passed=ok, statistic={"length": len(context.candidate.finding)})
    >>> "short_name_example" in GATES
    True
    >>> del GATES["short_name_example"]  # the example leaves the registry as it found it
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from envharness.spec import HarnessSpec
    from envrigger.data import TrajectoryStore
    from envrigger.loop.config import LoopConfig, ValidationConfig
    from envrigger.loop.propose import Candidate
    from envrigger.loop.solvability import Subgoal


class GateResult(BaseModel):
    """One gate's outcome: passed or not, the statistic it decided on, and a sentence saying why."""

    gate: str
    passed: bool
    statistic: dict[str, Any] = Field(default_factory=dict)
    detail: str = ""


class Rejected(Exception):
    """Raised inside a gate to refuse the candidate with a reason (a blown time budget)."""


class Rollouts(Protocol):
    """What a gate may ask of the validator running it (:class:`~envrigger.loop.validate.Validator`): charged play and caches."""

    base: HarnessSpec
    config: ValidationConfig

    def run_agent(self, spec: HarnessSpec, seeds: list[int], name: str) -> TrajectoryStore: ...
    def play(self, env: Any, solver: Any, seed: int) -> tuple[list[Any], list[tuple[bool, str]]]: ...
    def replay(self, spec: HarnessSpec, actions: list[Any], seed: int) -> list[tuple[bool, str]]: ...
    def behaviour(self, spec: HarnessSpec, seeds: list[int]) -> tuple[float, float]: ...
    def remember_behaviour(self, spec_hash: str, seeds: list[int], behaviour: tuple[float, float]) -> None: ...
    def base_reference_rate(self, seeds: list[int]) -> float: ...
    def subgoals_of(self, seed: int) -> list[Subgoal] | None: ...


@dataclass
class RoundContext:
    """The loop's state during a rigger round, for gates that train copies of the learner (the transfer gate)."""

    workdir: Path
    config: LoopConfig
    learner: Any
    number: int
    reserved: set[str]
    log: Callable[[str], None] = lambda message: None


@dataclass
class GateContext:
    """What a gate sees: the candidate, the validator's rollouts and caches, what earlier gates left in ``notes``.

    ``notes`` carries facts between gates of one validation: the reference solver's rate on
    the candidate (``reference_rate``), an undecided solvability (``solvability_undecided``),
    the agent's rollouts on the candidate (``store``).
    """

    candidate: Candidate
    validator: Rollouts
    admitted: list[tuple[str, HarnessSpec]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    round: RoundContext | None = None
    index: int = 0  # the candidate's place in its round (the transfer gate's seeds depend on it)
    notes: dict[str, Any] = field(default_factory=dict)
    spent: Callable[[], int] = lambda: 0  # env steps this validation has taken so far (the validator sets it)

    def check_budget(self, clock: bool = True, upcoming: int = 0) -> None:
        """Refuse the candidate once validation has taken more env steps than ``max_steps``, or longer than ``timeout_s`` when set.

        ``upcoming`` is the most the gate's next piece of work can take (a batch of rollouts:
        episodes x the episode limit, :meth:`episode_limit`); a piece that could carry the
        validation past its budget is refused before it is played, so a validation ends at
        most its budget, not a batch beyond it. The step budget is checked first and decides
        alike on any machine; the wall-clock limit (off by default; ``clock=False`` skips it)
        is for a user who prefers a bound in seconds to the same admissions everywhere.
        """
        config = self.validator.config
        cap = config.candidate_max_steps
        if cap is not None and (steps := self.spent()) > cap:
            raise Rejected(f"budget: validation took {steps:,} env steps, more than candidate_max_steps ({cap:,})")
        if cap is not None and upcoming and steps + upcoming > cap:
            raise Rejected(
                f"budget: validation took {steps:,} env steps and its next rollouts may take up to {upcoming:,} more, past "
                f"candidate_max_steps ({cap:,}): refused before playing them"
            )
        if clock and config.candidate_timeout_s is not None and time.perf_counter() - self.started > config.candidate_timeout_s:
            raise Rejected(f"timeout: validation took longer than {config.candidate_timeout_s:g} s (candidate_timeout_s)")

    def episode_limit(self) -> int | None:
        """The candidate's longest episode in env steps (its time limit, or a MiniGrid env's ``max_steps``); None if it has none."""
        if "episode_limit" not in self.notes:
            env = self.candidate.spec.build()
            try:
                limit = getattr(getattr(env, "spec", None), "max_episode_steps", None) or getattr(env.unwrapped, "max_steps", None)
            finally:
                env.close()
            self.notes["episode_limit"] = int(limit) if isinstance(limit, int) and limit > 0 else None
        return self.notes["episode_limit"]  # type: ignore[no-any-return]

    def check_time(self) -> None:
        """The name :meth:`check_budget` had before the budget counted env steps (gates written for it still work)."""
        self.check_budget()


class Gate:
    """An admission gate. Subclass, set ``name`` and ``order``, write :meth:`run`, decorate with :func:`register_gate`.

    Class attributes:
        name: the registry key.
        records: the name its results carry (default ``name``); two gates may decide one name.
        order: where it runs; lower first (the stock gates use 10, 20, ... 80).
        seeds: which validation seeds :meth:`run` gets: the first ``reference_rollouts``
            (``"reference"``), the first ``min_rollouts`` (``"first"``) or all (``"all"``).
        timed: check the validation's wall-clock limit before it runs, when one is set (its env-step budget is
            checked before every gate: :meth:`GateContext.check_budget`).
        own_budget: its env steps are not validation's: it adds them to ``steps`` (and the levels it plays to
            ``levels``), and the loop charges them to the rigger arm under the gate's name (the transfer gate's).
    """

    name: ClassVar[str] = ""
    records: ClassVar[str] = ""
    order: ClassVar[float] = 100.0
    seeds: ClassVar[Literal["reference", "first", "all"]] = "reference"
    timed: ClassVar[bool] = True
    own_budget: ClassVar[bool] = False

    def __init__(self) -> None:
        self.steps, self.levels = 0, set[str]()  # an own-budget gate's env steps and levels, summed over a round's candidates

    @classmethod
    def used_in(cls, config: Any) -> bool:
        """Whether a loop run with ``config`` runs this gate at all (an opt-in gate says when); its spending is then reported."""
        return True

    def applies(self, context: GateContext) -> bool:
        """Whether this gate runs for this candidate (default: always)."""
        return True

    def run(self, context: GateContext, seeds: list[int]) -> GateResult | None:
        """Decide: a :class:`GateResult`, or ``None`` when undecided (a later gate recording the same name must decide)."""
        raise NotImplementedError

    @classmethod
    def result_name(cls) -> str:
        return cls.records or cls.name


GATES: dict[str, type[Gate]] = {}


def register_gate(cls: type[Gate]) -> type[Gate]:
    """Add a gate class to :data:`GATES` (kept sorted by ``order``); a second gate of the same name is refused."""
    if not cls.name:
        raise ValueError(f"{cls.__name__}: a gate needs a name")
    if cls.name in GATES and GATES[cls.name] is not cls:
        raise ValueError(f"gate {cls.name!r} is registered already (by {GATES[cls.name].__name__})")
    GATES[cls.name] = cls
    ordered = sorted(GATES.values(), key=lambda gate: gate.order)
    GATES.clear()
    GATES.update((gate.name, gate) for gate in ordered)
    return cls
