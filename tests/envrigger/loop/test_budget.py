"""Validation's budget per candidate is counted in env steps, so what is admitted does not depend on the machine's load.

A wall-clock limit refused a KeyCorridor candidate on a machine running four processes on
two cores that an idle machine admitted, and the held-out result moved (0.260 to 0.250).
The budget now counts env steps (rollouts, reference play, replays and the gates' own
searches); a limit in seconds is there for whoever asks for one.
"""

from __future__ import annotations

import time

import pytest
from loop_cases import LAKE, NEAR, SEEDS, candidate

from envharness import HarnessSpec
from envharness.adapters.minigrid_search import steps_taken
from envrigger.loop.config import LoopConfig, ValidationConfig
from envrigger.loop.gates import GATES, Gate, GateContext, GateResult, Rejected, register_gate
from envrigger.loop.gates import base as gates_base
from envrigger.loop.validate import Validator
from envrigger.policies import RandomPolicy, reference_policy

CORRIDOR = HarnessSpec(env_id="MiniGrid-KeyCorridorS3R2-v0")
CORRIDOR_SEEDS = list(range(3_000_000, 3_000_008))


def lake_validator(path, **config):
    env = LAKE.build()
    return Validator(RandomPolicy(env.action_space, seed=0), LAKE, path, ValidationConfig(backend="serial", **config))


def whole_then_one_step_short(path, gate: str):
    """Validate with no budget, then with one step less than that took; ``gate`` (registered by the test) is unregistered after."""
    try:
        whole = lake_validator(path / "whole", min_rollouts=30, max_rollouts=90).validate(candidate(NEAR), SEEDS)
        short = lake_validator(path / "short", candidate_max_steps=whole.env_steps - 1, min_rollouts=30, max_rollouts=90)
        return whole, short.validate(candidate(NEAR), SEEDS)
    finally:
        del GATES[gate]


def test_a_validation_past_its_step_budget_is_refused_with_the_same_count_on_every_run(tmp_path):
    first = lake_validator(tmp_path / "a", candidate_max_steps=60, min_rollouts=30, max_rollouts=90).validate(candidate(NEAR), SEEDS)
    again = lake_validator(tmp_path / "b", candidate_max_steps=60, min_rollouts=30, max_rollouts=90).validate(candidate(NEAR), SEEDS)
    assert not first.passed and first.error is not None and first.error.startswith("budget: validation took ")
    assert "candidate_max_steps (60)" in first.error
    assert (first.error, first.env_steps, [g.gate for g in first.gates]) == (again.error, again.env_steps, [g.gate for g in again.gates])
    assert first.env_steps > 60


def test_the_same_candidate_within_budget_passes_and_records_the_steps_it_took(tmp_path):
    result = lake_validator(tmp_path / "v", min_rollouts=30, max_rollouts=90).validate(candidate(NEAR), SEEDS)
    assert result.passed and result.error is None
    assert result.env_steps > 60  # what the budget above was refused at
    limited = lake_validator(tmp_path / "w", candidate_max_steps=result.env_steps, min_rollouts=30, max_rollouts=90).validate(
        candidate(NEAR), SEEDS
    )
    assert limited.passed and limited.env_steps == result.env_steps  # a budget exactly what it takes is enough


def test_a_slow_machine_admits_what_a_fast_one_does_by_default(tmp_path, monkeypatch):
    """With the defaults, a clock that runs 1,000 times fast (a loaded machine) changes nothing."""
    fast = lake_validator(tmp_path / "fast", min_rollouts=30, max_rollouts=90).validate(candidate(NEAR), SEEDS)
    real = time.perf_counter
    start = real()
    monkeypatch.setattr(gates_base.time, "perf_counter", lambda: start + 1_000 * (real() - start))
    slow = lake_validator(tmp_path / "slow", min_rollouts=30, max_rollouts=90).validate(candidate(NEAR), SEEDS)
    assert (slow.passed, slow.error, slow.env_steps) == (fast.passed, fast.error, fast.env_steps) == (True, None, fast.env_steps)
    refused = lake_validator(tmp_path / "clock", candidate_timeout_s=0.5, min_rollouts=30, max_rollouts=90).validate(candidate(NEAR), SEEDS)
    assert not refused.passed and refused.error is not None and refused.error.startswith("timeout")  # asked for, it still binds


def test_a_gates_own_search_is_stopped_between_levels_once_it_passes_the_budget(tmp_path):
    """KeyCorridor's solvability is proved by a search over eight levels; a budget that only the search exceeds stops it between levels."""
    proposal = candidate({"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 3}}, finding="timeout", base=CORRIDOR)
    env = CORRIDOR.build()

    def validator(path, **config):
        return Validator(RandomPolicy(env.action_space, seed=0), CORRIDOR, path, ValidationConfig(backend="serial", **config))

    probe = validator(tmp_path / "probe")
    probe.check("verifier_integrity", proposal, CORRIDOR_SEEDS)
    integrity = probe.env_steps  # the reference play and replays the first gate takes
    before = steps_taken()
    probe.check("solvability", proposal, CORRIDOR_SEEDS, reference_rate=0.0)
    searched = steps_taken() - before
    played = probe.env_steps - integrity - searched  # the solver's own episodes, charged as they are played
    assert searched > 1_000 and played >= 0
    budget = integrity + played + 1  # only the search takes validation past it
    result = validator(tmp_path / "v", candidate_max_steps=budget).validate(proposal, CORRIDOR_SEEDS)
    # The search is checked level by level: validation stops inside it, one level's search past the budget, not eight.
    assert [g.gate for g in result.gates] == ["verifier_integrity"]
    assert result.error is not None and result.error.startswith("budget") and not result.passed
    assert budget < result.env_steps < integrity + played + searched


def test_the_integrity_gates_replays_are_stopped_between_levels_once_they_pass_the_budget(tmp_path):
    """A start along a DoorKey solution searches at every reset; the integrity gate's play and replays of eight levels
    went 1.9x past a candidate's share on the equal suite (23,478 steps against 12,500). It now stops between levels."""
    doorkey = HarnessSpec(env_id="MiniGrid-DoorKey-6x6-v0")
    walk = {"name": "WalkthroughStart", "params": {"min_share": 0.5, "max_share": 0.9}}
    proposal = candidate(walk, finding="timeout", base=doorkey)
    seeds = list(range(3_000_000, 3_000_008))
    env = doorkey.build()

    def validator(path, **config):
        return Validator(RandomPolicy(env.action_space, seed=0), doorkey, path, ValidationConfig(backend="serial", **config))

    probe = validator(tmp_path / "probe", reference_rollouts=8)
    probe.check("verifier_integrity", proposal, seeds)
    whole = probe.env_steps  # eight levels, each played, replayed and replayed on the base env
    result = validator(tmp_path / "v", reference_rollouts=8, candidate_max_steps=whole // 4).validate(proposal, seeds)
    assert result.error is not None and result.error.startswith("budget") and not result.passed
    assert result.env_steps < whole // 2  # stopped a level or so past a quarter, not after all eight


def test_a_run_saved_before_the_step_budget_resumes_with_the_clock_it_started_with():
    saved = LoopConfig.saved({"spec": {"env_id": "FrozenLake-v1"}})
    assert (saved.candidate_max_steps, saved.candidate_timeout_s) == (None, 300.0)
    new = LoopConfig(spec=HarnessSpec(env_id="FrozenLake-v1"))
    assert (new.candidate_max_steps, new.candidate_timeout_s) == (10_000_000, None)
    assert (new.validation().candidate_max_steps, new.validation().candidate_timeout_s) == (10_000_000, None)


def test_steps_a_last_gate_takes_past_the_budget_refuse_the_candidate_too(tmp_path):
    """No check runs after the last gate's own: the validation's total is compared once more at the end."""

    @register_gate
    class PlaysLast(Gate):
        """Plays ten episodes of the reference solver on the candidate, after every stock gate."""

        name, order = "plays_last_example", 99

        def run(self, context, seeds):
            env = context.candidate.spec.build()
            solver = reference_policy(env)
            for seed in seeds[:10]:
                context.validator.play(env, solver, seed)
            env.close()
            return GateResult(gate=self.name, passed=True)

    whole, result = whole_then_one_step_short(tmp_path, "plays_last_example")
    assert whole.passed and [g.gate for g in whole.gates][-1] == "plays_last_example"
    assert [g.gate for g in result.gates] == [g.gate for g in whole.gates] and all(g.passed for g in result.gates)
    assert not result.passed and result.error is not None and result.error.startswith("budget")


def test_a_gate_written_for_the_old_name_still_checks_the_budget(tmp_path):
    validator = lake_validator(tmp_path / "v", candidate_max_steps=1)
    context = GateContext(candidate=candidate(NEAR), validator=validator, spent=lambda: 2)
    with pytest.raises(Rejected, match="budget"):
        context.check_time()


def test_a_gate_that_does_not_check_the_clock_is_not_run_past_the_step_budget(tmp_path):
    """The transfer gate trains two learner copies: a candidate already past its budget is refused before that is spent."""
    ran: list[str] = []

    @register_gate
    class Costly(Gate):
        """Stands for the transfer gate: its own budget, no clock check, after every stock gate."""

        name, order, timed, own_budget = "costly_example", 99, False, True

        def run(self, context, seeds):
            ran.append(context.candidate.hash)
            return GateResult(gate=self.name, passed=True)

    whole, result = whole_then_one_step_short(tmp_path, "costly_example")
    assert whole.passed and ran == [whole.candidate]  # run once, in the validation within budget
    assert not result.passed and result.error is not None and result.error.startswith("budget")
    assert "costly_example" not in [g.gate for g in result.gates]
