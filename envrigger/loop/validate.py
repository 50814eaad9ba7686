"""Validate: run the admission gates on fresh rollouts, each a number compared with a threshold.

Contains :class:`Validation` (one candidate's outcome) and :class:`Validator` (the agent's
rollouts, caches, and the one fail-closed loop over the gates). The gates themselves live
in :mod:`envrigger.loop.gates`, one module each: verifier integrity, solvability, no
shortcut, learnability, targeting, novelty, and the opt-in transfer gate. They run in order
and stop at the first failure. Fail closed: an exception, a blown time budget, an
inconclusive statistic or a gate left undecided rejects; so does a validation past its budget in env
steps (``max_steps``), which decides alike on any machine, or past ``timeout_s`` seconds when one is set. :class:`ValidationConfig` (every
threshold and budget) lives in :mod:`envrigger.loop.config`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from envharness.offclock import steps_taken as _steps_taken
from envharness.spec import HarnessSpec
from envrigger.data import TrajectoryStore
from envrigger.loop.config import ValidationConfig
from envrigger.loop.gates import GATES, Gate, GateContext, GateResult, Rejected, RoundContext
from envrigger.loop.propose import Candidate
from envrigger.loop.solvability import Subgoal, subgoals
from envrigger.policies import reference_policy
from envrigger.rollout import backend_for, rollout

__all__ = ["GATES", "GateResult", "Validation", "ValidationConfig", "Validator"]


class Validation(BaseModel):
    """The outcome of validating one candidate: every gate's statistic, the seeds, the budget used."""

    candidate: str
    passed: bool
    gates: list[GateResult]
    seeds: list[int]
    rollouts: int
    wall_time: float
    env_steps: int = 0  # validation's env steps (rollouts, reference play, replays, the gates' searches); the budget's measure
    error: str | None = None


def steps_taken() -> int:
    """Env steps off the agent's clock (searches, setup) this process has taken, on any thread: a gate's helper threads are validation's too."""
    return _steps_taken(all_threads=True)


def _interaction(store: TrajectoryStore) -> int:
    """Env steps a stored run took: its episodes' steps and the env's own searches in them."""
    table = store.episodes_table(["length", "search_steps"])
    searched = table.column("search_steps").fill_null(0).to_numpy()
    return int(np.sum(table.column("length").to_numpy())) + int(np.sum(searched))


def _play(env: Any, solver: Any, seed: int, actions: list[Any]) -> list[tuple[bool, str]]:
    """One episode of ``solver`` on ``env``: the verdicts published after each step; each action is in ``actions`` as it is tried."""
    if hasattr(solver, "reset"):
        solver.reset(seed)
    obs, info = env.reset(seed=seed)
    verdicts, done = [], False
    while not done:
        action = solver.act(obs, info)
        actions.append(action)  # before the step: a step that raises was taken too
        obs, _, terminated, truncated, info = env.step(action)
        verdicts.append((info["verdict"].success, info["verdict"].reason))
        done = terminated or truncated
    return verdicts


def _replay(spec: HarnessSpec, actions: list[Any], seed: int, tried: list[int]) -> list[tuple[bool, str]]:
    env = spec.build()
    env.reset(seed=seed)
    verdicts = []
    try:
        for action in actions:
            tried[0] += 1
            *_, terminated, truncated, info = env.step(action)
            verdicts.append((info["verdict"].success, info["verdict"].reason))
            if terminated or truncated:
                break
    finally:
        env.close()
    return verdicts


class Validator:
    """Validates candidates for one agent on fresh seeds; caches behaviour for novelty.

    Args:
        agent: the current agent (a policy object, picklable for parallel rollouts).
        base: the original environment's spec.
        workdir: where validation runs are stored (one run directory per candidate).
        config: thresholds and budgets.
        round: the rigger round's state, for gates that train (the transfer gate); None outside a loop.

    Every gate registered in :data:`~envrigger.loop.gates.GATES` is built once per
    validator (:attr:`gates`, in order); :meth:`validate` runs them, :meth:`check` runs one.
    """

    def __init__(
        self, agent: Any, base: HarnessSpec, workdir: str | Path, config: ValidationConfig | None = None, round: RoundContext | None = None
    ) -> None:
        self.agent, self.base, self.workdir = agent, base, Path(workdir)
        self.config = config or ValidationConfig()
        self.round = round
        self.gates: list[Gate] = [cls() for cls in GATES.values()]
        self._behaviour: dict[tuple[str, tuple[int, ...]], tuple[float, float]] = {}
        self._base_reference: dict[tuple[int, ...], float] = {}
        self._subgoals: dict[int, list[Subgoal] | None] = {}
        self.env_steps = 0  # every env step validation took (rollouts, reference play, replays): charged to the loop
        # Searches inside rollouts (resets along a solution), on this thread (the serial backend): each
        # episode records its own (``search_steps``, on every backend) and is charged with it, so the
        # gates' own searches are counted without them.
        self._rollout_searches = 0

    # -- what gates use ------------------------------------------------------------------
    def run_agent(self, spec: HarnessSpec, seeds: list[int], name: str) -> TrajectoryStore:
        """Roll the agent out on ``seeds`` into run ``name`` (appending if it exists); charge the new steps."""
        path = self.workdir / name
        before = _interaction(TrajectoryStore(path)) if (path / "run.json").is_file() else 0
        searched = steps_taken()
        store = rollout(
            spec,
            self.agent,
            seeds=seeds,
            out=path,
            **backend_for(self.agent, self.config.backend, self.config.workers, self.config.rollout_batch),
        )
        self._rollout_searches += steps_taken() - searched
        self.env_steps += _interaction(store) - before
        return store

    def play(self, env: Any, solver: Any, seed: int) -> tuple[list[Any], list[tuple[bool, str]]]:
        """One episode of ``solver`` on ``env`` (charged): its actions and the verdict after each."""
        actions: list[Any] = []
        try:
            return actions, _play(env, solver, seed, actions)
        finally:  # an episode that raised took its steps too
            self.env_steps += len(actions)

    def replay(self, spec: HarnessSpec, actions: list[Any], seed: int) -> list[tuple[bool, str]]:
        """``actions`` replayed on a fresh build of ``spec`` at ``seed`` (charged): the verdict after each."""
        tried = [0]
        try:
            return _replay(spec, actions, seed, tried)
        finally:
            self.env_steps += tried[0]

    def behaviour(self, spec: HarnessSpec, seeds: list[int]) -> tuple[float, float]:
        """The agent's success rate and mean episode length on ``spec`` over ``seeds`` (cached)."""
        key = (spec.hash(), tuple(seeds))
        if key not in self._behaviour:
            table = self.run_agent(spec, seeds, f"behaviour-{spec.hash()}-{len(self._behaviour)}").episodes_table(["success", "length"])
            self._behaviour[key] = (
                float(np.mean(table.column("success").to_numpy(zero_copy_only=False))),
                float(np.mean(table.column("length").to_numpy())),
            )
        return self._behaviour[key]

    def remember_behaviour(self, spec_hash: str, seeds: list[int], behaviour: tuple[float, float]) -> None:
        """Cache what :meth:`behaviour` would measure for ``spec_hash`` on ``seeds`` (from rollouts already played)."""
        self._behaviour[(spec_hash, tuple(seeds))] = behaviour

    def base_reference_rate(self, seeds: list[int]) -> float:
        """The reference solver's success rate on the original env over ``seeds`` (cached)."""
        key = tuple(seeds)
        if key not in self._base_reference:
            env = self.base.build()
            solver = reference_policy(env)
            self._base_reference[key] = float(np.mean([self.play(env, solver, seed)[1][-1][0] for seed in seeds]))
            env.close()
        return self._base_reference[key]

    def subgoals_of(self, seed: int) -> list[Subgoal] | None:
        """The subgoals of the original level at ``seed`` (cached; None when the search cannot decide)."""
        if seed not in self._subgoals:
            self._subgoals[seed] = subgoals(self.base, seed)
        return self._subgoals[seed]

    def gate(self, name: str) -> Gate:
        """This validator's instance of the gate registered as ``name``."""
        for gate in self.gates:
            if gate.name == name:
                return gate
        raise KeyError(f"no gate named {name!r}; registered: {', '.join(GATES)}")

    def _searched(self, since: int, inside_rollouts: int) -> None:
        """Charge the env steps the gates' own searches took since ``since`` (not those inside rollouts, on any backend)."""
        self.env_steps += steps_taken() - since - (self._rollout_searches - inside_rollouts)

    def _seeds(self, gate: Gate, seeds: list[int]) -> list[int]:
        if gate.seeds == "reference":
            return seeds[: self.config.reference_rollouts]
        if gate.seeds == "first":
            return seeds[: self.config.min_rollouts]
        return list(seeds)

    # -- running gates ---------------------------------------------------------------------
    def check(self, name: str, candidate: Candidate, seeds: list[int], **notes: Any) -> GateResult | None:
        """Run the one gate ``name`` on ``candidate`` over exactly ``seeds``, with ``notes`` as earlier gates would leave them.

        For looking at one gate (tests, notebooks); :meth:`validate` runs them all.
        """
        context = GateContext(candidate=candidate, validator=self, round=self.round, notes=dict(notes))
        searched, inside_rollouts = steps_taken(), self._rollout_searches
        try:
            return self.gate(name).run(context, list(seeds))
        finally:
            self._searched(searched, inside_rollouts)

    def validate(
        self, candidate: Candidate, seeds: list[int], admitted: Sequence[tuple[str, HarnessSpec]] = (), index: int = 0
    ) -> Validation:
        """Run the gates in order on ``seeds`` (disjoint from the diagnosis seeds); stop at the first failure.

        ``index`` is the candidate's place in its round (gates that train pick their seeds by it).
        A candidate passes only when every gate that applied has a passing result under its
        name: a gate left undecided that no later gate decided refuses it (fail closed).
        """
        context = GateContext(candidate=candidate, validator=self, admitted=list(admitted), round=self.round, index=index)
        searched, inside_rollouts, before = steps_taken(), self._rollout_searches, self.env_steps
        theirs = [0]  # searches inside gates that count their own budget (the transfer gate's training): not validation's

        def pending() -> int:  # the gates' searches not charged yet: not those inside rollouts (charged with their episodes)
            return steps_taken() - searched - (self._rollout_searches - inside_rollouts) - theirs[0]

        def spent() -> int:  # env steps so far
            return self.env_steps - before + pending()

        context.spent = spent
        results: list[GateResult] = []
        required: set[str] = set()
        error = None
        try:
            for gate in self.gates:
                if not gate.applies(context):
                    continue
                required.add(gate.result_name())
                context.check_budget(clock=gate.timed)  # the steps before every gate; the clock before a timed one
                if gate.own_budget:  # its searches are its own budget's; every other gate's, before or after it, validation's
                    mark, in_rollouts = steps_taken(), self._rollout_searches
                    try:
                        result = gate.run(context, self._seeds(gate, seeds))
                    finally:
                        theirs[0] += steps_taken() - mark - (self._rollout_searches - in_rollouts)
                else:
                    result = gate.run(context, self._seeds(gate, seeds))
                if result is None:
                    continue
                results.append(result)
                if not result.passed:
                    break
        except Rejected as reason:
            error = str(reason)
        except Exception as exc:  # fail closed: anything unexpected rejects the candidate
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if error is None:
            try:  # what the last gates took counts too: a validation past its budget is refused, whichever gate took it there
                context.check_budget(clock=False)
            except Rejected as reason:
                error = str(reason)
        self.env_steps += pending()
        order = {gate.result_name(): place for place, gate in reversed(list(enumerate(self.gates)))}
        results.sort(key=lambda result: order.get(result.gate, len(order)))  # a later gate deciding an earlier name sits in its place
        passed = error is None and required <= {r.gate for r in results} and all(r.passed for r in results)
        rollouts = sum(r.statistic.get("rollouts", 0) for r in results) + self.config.reference_rollouts
        return Validation(
            candidate=candidate.hash,
            passed=passed,
            gates=results,
            seeds=list(seeds),
            rollouts=rollouts,
            wall_time=time.perf_counter() - context.started,
            env_steps=self.env_steps - before,
            error=error,
        )
