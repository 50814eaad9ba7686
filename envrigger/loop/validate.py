"""Validate: admission gates, each a number compared with a threshold, on fresh rollouts.

Contains :class:`ValidationConfig` (every threshold and budget), :class:`GateResult`,
:class:`Validation` and :class:`Validator`. Gates run in order and stop at the first
failure: verifier integrity, solvability, no shortcut, learnability band, targeting, novelty. Fail
closed: an exception, a blown time budget or an inconclusive statistic rejects.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from envharness.adapters import ADAPTERS
from envharness.adapters.minigrid_search import steps_taken
from envharness.harness import Harness
from envharness.spec import HarnessSpec
from envharness.transforms import CATALOG, TRANSFORMS, transform_from_spec
from envrigger.data import TrajectoryStore
from envrigger.diagnose import DiagnoseConfig, diagnose
from envrigger.loop.propose import Candidate
from envrigger.loop.solvability import Subgoal, bypassed, search_levels, searchable, subgoals
from envrigger.policies import reference_policy
from envrigger.rollout import backend_for, rollout
from envrigger.stats import wilson

GATES = ("verifier_integrity", "solvability", "no_shortcut", "learnability", "targeting", "novelty")
STOCK_ADAPTERS = frozenset({"Adapter", *(cls.__name__ for cls in ADAPTERS)})


@dataclass(frozen=True)
class ValidationConfig:
    """Gate thresholds and budgets (see docs/envrigger.md for what each means)."""

    band: tuple[float, float] = (0.2, 0.8)
    confidence: float = 0.9
    min_rollouts: int = 30
    max_rollouts: int = 90
    reference_rollouts: int = 8
    solvable_min: float = 0.5
    solvable_fraction: float = 0.5
    region_min_share: float = 0.25
    novelty_success_tol: float = 0.05
    novelty_length_tol: float = 0.05
    timeout_s: float = 300.0
    backend: str = "process"
    workers: int | None = None
    batch: int = 32  # a policy that acts in batches plays this many episodes at once, in this process (see backend_for)


class GateResult(BaseModel):
    gate: str
    passed: bool
    statistic: dict[str, Any] = Field(default_factory=dict)
    detail: str = ""


class Validation(BaseModel):
    """The outcome of validating one candidate: every gate's statistic, the seeds, the budget used."""

    candidate: str
    passed: bool
    gates: list[GateResult]
    seeds: list[int]
    rollouts: int
    wall_time: float
    error: str | None = None


class _Rejected(Exception):
    pass


def _z(confidence: float) -> float:
    return statistics.NormalDist().inv_cdf((1 + confidence) / 2)


def _play(env: Any, solver: Any, seed: int) -> tuple[list[Any], list[tuple[bool, str]]]:
    """One episode of ``solver`` on ``env``: its actions and the verdicts published after each."""
    if hasattr(solver, "reset"):
        solver.reset(seed)
    obs, info = env.reset(seed=seed)
    actions, verdicts, done = [], [], False
    while not done:
        action = solver.act(obs, info)
        obs, _, terminated, truncated, info = env.step(action)
        actions.append(action)
        verdicts.append((info["verdict"].success, info["verdict"].reason))
        done = terminated or truncated
    return actions, verdicts


def _replay(spec: HarnessSpec, actions: list[Any], seed: int) -> list[tuple[bool, str]]:
    env = spec.build()
    env.reset(seed=seed)
    verdicts = []
    for action in actions:
        *_, terminated, truncated, info = env.step(action)
        verdicts.append((info["verdict"].success, info["verdict"].reason))
        if terminated or truncated:
            break
    env.close()
    return verdicts


def _preserves_dynamics(spec: HarnessSpec) -> bool:
    """No state transform and no rule that changes actions: the base env sees the same actions."""
    from envharness.transforms import RuleTransform

    for t in spec.transforms:
        cls = type(transform_from_spec(t))
        if cls.kind in ("state", "link") or (cls.kind == "rule" and getattr(cls, "on_action", None) is not RuleTransform.on_action):
            return False
    return True


class Validator:
    """Validates candidates for one agent on fresh seeds; caches behaviour for novelty.

    Args:
        agent: the current agent (a policy object, picklable for parallel rollouts).
        base: the original environment's spec.
        workdir: where validation runs are stored (one run directory per candidate).
        config: thresholds and budgets.
    """

    def __init__(self, agent: Any, base: HarnessSpec, workdir: str | Path, config: ValidationConfig | None = None) -> None:
        self.agent, self.base, self.workdir = agent, base, Path(workdir)
        self.config = config or ValidationConfig()
        self._behaviour: dict[tuple[str, tuple[int, ...]], tuple[float, float]] = {}
        self._base_reference: dict[tuple[int, ...], float] = {}
        self._subgoals: dict[int, list[Subgoal] | None] = {}
        self.env_steps = 0  # every env step validation took (rollouts, reference play, replays): charged to the loop
        self._rollout_searches = (
            0  # searches inside rollouts (resets along a solution): not charged, since worker processes cannot report them
        )

    # -- helpers -------------------------------------------------------------------------
    def _run(self, spec: HarnessSpec, seeds: list[int], name: str) -> TrajectoryStore:
        """Roll the agent out on ``seeds`` into run ``name`` (appending if it exists); charge the new steps."""
        path = self.workdir / name
        before = (
            int(np.sum(TrajectoryStore(path).episodes_table(["length"]).column("length").to_numpy()))
            if (path / "run.json").is_file()
            else 0
        )
        searched = steps_taken()
        store = rollout(
            spec, self.agent, seeds=seeds, out=path, **backend_for(self.agent, self.config.backend, self.config.workers, self.config.batch)
        )
        self._rollout_searches += steps_taken() - searched
        self.env_steps += int(np.sum(store.episodes_table(["length"]).column("length").to_numpy())) - before
        return store

    def _played(self, env: Any, solver: Any, seed: int) -> tuple[list[Any], list[tuple[bool, str]]]:
        actions, verdicts = _play(env, solver, seed)
        self.env_steps += len(actions)
        return actions, verdicts

    def _replayed(self, spec: HarnessSpec, actions: list[Any], seed: int) -> list[tuple[bool, str]]:
        verdicts = _replay(spec, actions, seed)
        self.env_steps += len(verdicts)
        return verdicts

    def behaviour(self, spec: HarnessSpec, seeds: list[int]) -> tuple[float, float]:
        """The agent's success rate and mean episode length on ``spec`` over ``seeds`` (cached)."""
        key = (spec.hash(), tuple(seeds))
        if key not in self._behaviour:
            table = self._run(spec, seeds, f"behaviour-{spec.hash()}-{len(self._behaviour)}").episodes_table(["success", "length"])
            self._behaviour[key] = (
                float(np.mean(table.column("success").to_numpy(zero_copy_only=False))),
                float(np.mean(table.column("length").to_numpy())),
            )
        return self._behaviour[key]

    def _searched(self, since: int, inside_rollouts: int) -> None:
        """Charge the env steps the gates' own searches took since ``since`` (not those inside rollouts, on any backend)."""
        self.env_steps += steps_taken() - since - (self._rollout_searches - inside_rollouts)

    def _check_time(self, started: float) -> None:
        if time.perf_counter() - started > self.config.timeout_s:
            raise _Rejected(f"timeout: validation took longer than {self.config.timeout_s:.0f} s")

    # -- gates ---------------------------------------------------------------------------
    def verifier_integrity(self, candidate: Candidate, seeds: list[int]) -> tuple[GateResult, float]:
        """The verdict path is the stock one, and reference play is judged the same on replay and on the base env."""
        foreign = [t.name for t in candidate.spec.transforms if TRANSFORMS.get(t.name) not in CATALOG]
        env = candidate.spec.build()
        stock = type(env).step is Harness.step and type(env).reset is Harness.reset and env.adapter.name in STOCK_ADAPTERS
        if foreign or not stock:
            env.close()
            return GateResult(
                gate="verifier_integrity",
                passed=False,
                statistic={"foreign_transforms": foreign},
                detail="only catalog transforms over the stock harness are admitted; run other code in the sandbox",
            ), 0.0
        solver = reference_policy(env)
        compared = mismatches = base_compared = base_mismatches = successes = 0
        dynamics_kept = _preserves_dynamics(candidate.spec)
        for seed in seeds:
            actions, verdicts = self._played(env, solver, seed)
            successes += verdicts[-1][0]
            compared += 1
            mismatches += self._replayed(candidate.spec, actions, seed) != verdicts
            if dynamics_kept:
                base = self._replayed(self.base, actions, seed)
                base_compared += 1
                # Rules may end an episode early (a failure); until then the base env must judge alike.
                base_mismatches += [s for s, _ in base[: len(verdicts) - 1]] != [s for s, _ in verdicts[:-1]] or (
                    verdicts[-1][0] and not (len(base) >= len(verdicts) and base[len(verdicts) - 1][0])
                )
        env.close()
        passed = mismatches == 0 and base_mismatches == 0
        return GateResult(
            gate="verifier_integrity",
            passed=passed,
            statistic={
                "episodes": compared,
                "replay_mismatches": mismatches,
                "base_compared": base_compared,
                "base_mismatches": base_mismatches,
            },
            detail="verdicts reproduce on replay" + (" and match the base env" if base_compared else ""),
        ), successes / max(compared, 1)

    def base_reference_rate(self, seeds: list[int]) -> float:
        """The reference solver's success rate on the original env over ``seeds`` (cached)."""
        key = tuple(seeds)
        if key not in self._base_reference:
            env = self.base.build()
            solver = reference_policy(env)
            self._base_reference[key] = float(np.mean([self._played(env, solver, seed)[1][-1][0] for seed in seeds]))
            env.close()
        return self._base_reference[key]

    def solvability(self, candidate: Candidate, reference_rate: float, seeds: list[int]) -> GateResult | None:
        """The reshaped levels can be won; None when only the agent's own success can tell (see :meth:`solvable_by_agent`).

        Proof, in this order: the reference solver wins at least ``solvable_min`` of the
        levels or that fraction of its rate on the original (relative, so that envs where even
        the solver often fails, slippery maps, keep reshapings as solvable as they were); else
        a search over the level's states with the env's own step
        (:mod:`envrigger.loop.solvability`: MiniGrid without rule transforms) decides either
        way; else a solver that wins original levels and not these rejects them; a solver
        that wins no original level knows nothing of the task and decides nothing.
        """
        base_rate = self.base_reference_rate(seeds)
        needed = min(self.config.solvable_min, self.config.solvable_fraction * base_rate)
        stat: dict[str, Any] = {"reference_success": reference_rate, "base_reference_success": base_rate, "needed": needed}
        if reference_rate > 0 and reference_rate >= needed:
            return GateResult(
                gate="solvability",
                passed=True,
                statistic={**stat, "method": "reference solver"},
                detail="the reference solver succeeds as it does on the original",
            )
        if searchable(candidate.spec):
            found = search_levels(candidate.spec, seeds)
            solved, unsolvable = found.count(True), found.count(False)
            stat = {
                **stat,
                "method": "search",
                "searched": len(found),
                "solvable": solved,
                "unsolvable": unsolvable,
                "undecided": found.count(None),
            }
            if solved >= self.config.solvable_min * len(found):
                return GateResult(
                    gate="solvability", passed=True, statistic=stat, detail="a search with the env's own step wins the levels"
                )
            if unsolvable > (1 - self.config.solvable_min) * len(found):
                return GateResult(
                    gate="solvability", passed=False, statistic=stat, detail="a search with the env's own step proves the levels lost"
                )
        if base_rate > 0:
            return GateResult(
                gate="solvability",
                passed=False,
                statistic={**stat, "method": "reference solver"},
                detail="the reference solver wins the original's levels, not these",
            )
        return None

    def solvable_by_agent(self, store: TrajectoryStore, undecided: dict[str, Any]) -> GateResult:
        """At least one success the verifier gave the agent on the candidate's levels: the last proof, failing closed without one."""
        wins = int(np.sum(store.episodes_table(["success"]).column("success").to_numpy(zero_copy_only=False)))
        return GateResult(
            gate="solvability",
            passed=wins > 0,
            statistic={**undecided, "method": "agent", "agent_successes": wins, "agent_rollouts": len(store)},
            detail="the agent itself won a level (verified)"
            if wins
            else "nothing proves the levels winnable: no solver, search or agent won one (fail closed)",
        )

    def no_shortcut(self, candidate: Candidate, seeds: list[int]) -> GateResult:
        """Every subgoal of the original level stays on every solution of the reshaped one (or is already behind its start).

        The subgoals of a level are what every solution of the *original* level passes
        through (:func:`~envrigger.loop.solvability.subgoals`: the key picked up, the locked
        door opened, some door opened). A reshaped level that can be won without one of them,
        and whose start is not past it, teaches a way around the task: the candidate is
        refused if any level checked is such a shortcut. The search runs on the candidate's
        state and observation transforms: a rule only narrows what the agent may do, so a
        shortcut found without the rules is refused with them too. Fail closed: a link
        transform (a second env the search cannot follow) or a level the search cannot decide
        refuses. Where the family offers no search (not MiniGrid), the statistic says so and
        the gate passes: the other gates and the credit from the original env decide.
        """
        if not searchable(self.base):
            return GateResult(
                gate="no_shortcut",
                passed=True,
                statistic={"method": "none", "levels": 0},
                detail="no subgoal search for this env: not checked",
            )
        kinds = [type(transform_from_spec(t)).kind for t in candidate.spec.transforms]
        if "link" in kinds:
            return GateResult(
                gate="no_shortcut",
                passed=False,
                statistic={"method": "search", "levels": 0, "link": True},
                detail="a link transform chains another env the subgoal search cannot follow: refused (fail closed)",
            )
        levels = candidate.spec.model_copy(
            update={"transforms": [t for t, kind in zip(candidate.spec.transforms, kinds, strict=True) if kind in ("state", "observation")]}
        )
        with_goals = bypassed_levels = undecided = 0
        examples: list[str] = []
        for seed in seeds:
            if seed not in self._subgoals:
                self._subgoals[seed] = subgoals(self.base, seed)
            goals = self._subgoals[seed]
            if goals is None:
                undecided += 1
                continue
            if not goals:
                continue
            with_goals += 1
            skipped = bypassed(levels, seed, goals)
            if skipped is None:
                undecided += 1
            elif skipped:
                bypassed_levels += 1
                examples.append(f"seed {seed}: " + ", ".join(" ".join(map(str, g)) for g in skipped))
        if bypassed_levels:
            detail = "a reshaped level can be won without a subgoal of the original level: a shortcut around the task"
        elif undecided:
            detail = f"the search could not decide {undecided} level(s): refused (fail closed)"
        else:
            detail = "every subgoal of the original levels stays on the reshaped levels' solutions"
        return GateResult(
            gate="no_shortcut",
            passed=bypassed_levels == 0 and undecided == 0,
            statistic={
                "method": "search",
                "levels": len(seeds),
                "levels_with_subgoals": with_goals,
                "shortcut_levels": bypassed_levels,
                "undecided": undecided,
                "examples": examples[:3],
            },
            detail=detail,
        )

    def learnability(self, candidate: Candidate, seeds: list[int], started: float) -> tuple[GateResult, TrajectoryStore]:
        """The agent's success rate, with a Wilson interval, lies inside the band (adding rollouts while inconclusive)."""
        config, z = self.config, _z(self.config.confidence)
        lo_band, hi_band = config.band
        n, done = config.min_rollouts, 0
        while True:
            self._check_time(started)
            # Each batch adds only the new seeds to the candidate's run: episodes already played are kept, not replayed.
            store = self._run(candidate.spec, seeds[done:n], f"candidate-{candidate.hash}")
            done = n
            wins = int(np.sum(store.episodes_table(["success"]).column("success").to_numpy(zero_copy_only=False)))
            lo, hi = wilson(wins, n, z)
            stat = {
                "rollouts": n,
                "successes": wins,
                "rate": wins / n,
                "ci": [lo, hi],
                "band": list(config.band),
                "confidence": config.confidence,
            }
            if lo >= lo_band and hi <= hi_band:
                return GateResult(gate="learnability", passed=True, statistic=stat, detail="interval inside the band"), store
            if hi < lo_band or lo > hi_band:
                return GateResult(gate="learnability", passed=False, statistic=stat, detail="interval outside the band"), store
            if n >= config.max_rollouts:
                return GateResult(
                    gate="learnability",
                    passed=False,
                    statistic={**stat, "inconclusive": True},
                    detail="inconclusive at the rollout budget: rejected (fail closed)",
                ), store
            n = min(config.max_rollouts, max(n + 1, (3 * n + 1) // 2))  # half as many again: stop soon after it is decided

    def targeting(self, candidate: Candidate, store: TrajectoryStore) -> GateResult:
        """The targeted weakness occurs in the candidate's rollouts (or its feature region is exercised)."""
        stats = candidate.finding_stats
        if candidate.finding.startswith("feature_region:") and {"feature", "op", "threshold"} <= set(stats):
            feature, op, threshold = stats["feature"], stats["op"], float(stats["threshold"])
            values = [e.level_features.get(feature) for e in store.iter_episodes()]
            inside = [v is not None and (v > threshold if op == ">" else v <= threshold) for v in values]
            share = sum(inside) / max(len(inside), 1)
            return GateResult(
                gate="targeting",
                passed=share >= self.config.region_min_share,
                statistic={"feature": feature, "region": f"{op} {threshold:g}", "share_in_region": share},
                detail="levels fall in the failing region",
            )
        found = diagnose(store, DiagnoseConfig(min_episodes=1, min_rate=0.0)).finding(candidate.finding)
        episodes = found.episodes if found is not None else 0
        return GateResult(
            gate="targeting",
            passed=episodes > 0,
            statistic={"finding": candidate.finding, "episodes": episodes, "rate": found.rate if found is not None else 0.0},
            detail="the weakness occurs in the candidate's rollouts",
        )

    def novelty(self, candidate: Candidate, seeds: list[int], admitted: list[tuple[str, HarnessSpec]]) -> GateResult:
        """Not an admitted hash, and not behaviourally identical to an admitted component or the base env."""
        hashes = {h for h, _ in admitted}
        if candidate.hash in hashes:
            return GateResult(gate="novelty", passed=False, statistic={"duplicate_of": candidate.hash}, detail="already admitted")
        mine = self.behaviour(candidate.spec, seeds)
        closest: tuple[float, float] | None = None
        twin: str | None = None
        for name, spec in [("base", self.base), *admitted]:
            other = self.behaviour(spec, seeds)
            gap = (abs(mine[0] - other[0]), abs(mine[1] - other[1]) / max(mine[1], other[1], 1.0))
            if closest is None or sum(gap) < sum(closest):
                closest, twin = gap, name
        assert closest is not None  # the base env is always compared
        same = closest[0] <= self.config.novelty_success_tol and closest[1] <= self.config.novelty_length_tol
        return GateResult(
            gate="novelty",
            passed=not same,
            statistic={"closest": twin, "success_gap": closest[0], "length_gap": closest[1], "success": mine[0], "mean_length": mine[1]},
            detail="behaves like an existing environment" if same else "behaves differently from every admitted one",
        )

    # -- all gates -----------------------------------------------------------------------
    def validate(self, candidate: Candidate, seeds: list[int], admitted: Sequence[tuple[str, HarnessSpec]] = ()) -> Validation:
        """Run the gates in order on ``seeds`` (disjoint from the diagnosis seeds); stop at the first failure."""
        started = time.perf_counter()
        searched, inside_rollouts = steps_taken(), self._rollout_searches
        gates: list[GateResult] = []
        error = None
        try:
            integrity, reference_rate = self.verifier_integrity(candidate, seeds[: self.config.reference_rollouts])
            gates.append(integrity)
            solvable: GateResult | None = None
            if integrity.passed:
                self._check_time(started)
                solvable = self.solvability(candidate, reference_rate, seeds[: self.config.reference_rollouts])
                if solvable is not None:
                    gates.append(solvable)
            if all(g.passed for g in gates):
                self._check_time(started)
                gates.append(self.no_shortcut(candidate, seeds[: self.config.reference_rollouts]))
            if all(g.passed for g in gates):
                learn, store = self.learnability(candidate, seeds, started)
                if solvable is None:  # nothing else could tell: the agent's own verified successes decide, before learnability counts
                    gates.insert(1, self.solvable_by_agent(store, {"reference_success": reference_rate}))
                gates.append(learn)
                first = store.episodes_table(["success", "length"]).slice(0, self.config.min_rollouts)
                self._behaviour[(candidate.hash, tuple(seeds[: self.config.min_rollouts]))] = (
                    float(np.mean(first.column("success").to_numpy(zero_copy_only=False))),
                    float(np.mean(first.column("length").to_numpy())),
                )
                if all(g.passed for g in gates):
                    self._check_time(started)
                    gates.append(self.targeting(candidate, store))
                if all(g.passed for g in gates):
                    self._check_time(started)
                    gates.append(self.novelty(candidate, seeds[: self.config.min_rollouts], list(admitted)))
        except _Rejected as reason:
            error = str(reason)
        except Exception as exc:  # fail closed: anything unexpected rejects the candidate
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        self._searched(searched, inside_rollouts)
        passed = error is None and len(gates) == len(GATES) and all(g.passed for g in gates)
        rollouts = sum(g.statistic.get("rollouts", 0) for g in gates) + self.config.reference_rollouts
        return Validation(
            candidate=candidate.hash,
            passed=passed,
            gates=gates,
            seeds=list(seeds),
            rollouts=rollouts,
            wall_time=time.perf_counter() - started,
            error=error,
        )
