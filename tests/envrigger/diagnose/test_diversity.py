"""Behaviour diversity: the loop's reading of a run is the ledger's, to the bit, and a collapse is found only when play narrows."""

from __future__ import annotations

import gymnasium as gym
import pytest

from envrigger.data import TrajectoryError
from envrigger.diagnose.diversity import collapse, diversity
from envrigger.ledger.attribution import summarize
from envrigger.ledger.evaluate import results_of
from envrigger.policies import RandomPolicy
from envrigger.rollout import rollout


@pytest.mark.parametrize("env_id", ["FrozenLake-v1", "MiniGrid-Empty-5x5-v0"])
def test_the_loops_diversity_is_the_ledgers_to_the_bit(tmp_path, env_id):
    seeds = list(range(40, 0, -1))  # not in the order played
    store = rollout(env_id, "random", seeds=seeds, out=tmp_path / "run", backend="serial")
    ledger = summarize(results_of(store, sorted(store.episodes_table(["seed"]).column("seed").to_pylist())))
    ledger_in_store_order = summarize(results_of(store, store.episodes_table(["seed"]).column("seed").to_pylist()))
    mine = diversity(store)
    assert mine == {k: ledger_in_store_order[k] for k in ("distinct_actions", "visit_entropy")}
    assert mine["distinct_actions"] == pytest.approx(ledger["distinct_actions"]) and 0 < mine["visit_entropy"]


def test_a_run_with_a_seed_played_twice_has_no_diversity(tmp_path):
    store = rollout("FrozenLake-v1", RandomPolicy(gym.spaces.Discrete(4), seed=0), seeds=[1, 1, 2], out=tmp_path / "r")
    assert diversity(store) == {"distinct_actions": None, "visit_entropy": None}
    with pytest.raises(TrajectoryError, match="no episode for task seeds"):
        results_of(store, [99])


def test_a_collapse_needs_diversity_to_fall_by_the_share_without_the_rate_rising():
    before = {"accepted": 40.0, "distinct_actions": 80.0, "visit_entropy": 4.0}
    assert collapse(before, {"accepted": 40.0, "distinct_actions": 50.0, "visit_entropy": 3.9})["fell"] == {
        "distinct_actions": [80.0, 50.0]
    }
    assert collapse(before, {"accepted": 45.0, "distinct_actions": 10.0, "visit_entropy": 1.0}) is None  # it got better
    assert collapse(before, {"accepted": 40.0, "distinct_actions": 70.0, "visit_entropy": 3.5}) is None  # within the share
