"""Setup steps are env steps: a replayed prefix and the walked part of a start are charged wherever they are played.

An outside review found a candidate's validation took 3,310 env steps while 241 were
charged: a ``ReplayPrefix`` plays its actions at every reset, before the agent's clock
starts, and nothing counted them. Every off-clock step now passes through
:mod:`envharness.offclock`; these attacks play setup where a count might not look: in
training, in validation on each backend, in another thread, in a subprocess.
"""

from __future__ import annotations

import threading

import numpy as np
from loop_cases import LAKE, candidate

import envharness
from envharness.offclock import steps_taken
from envharness.transforms import ReplayPrefix
from envrigger.loop.config import ValidationConfig
from envrigger.loop.levels import Seeds
from envrigger.loop.mixture import MixtureEnv
from envrigger.loop.samplers import Fixed
from envrigger.loop.validate import Validator
from envrigger.policies import RandomPolicy
from envrigger.rollout import rollout

PREFIX = [2, 2, 1, 1]  # right, right, down, down on the 8x8 lake: a safe walk, four setup steps every reset
PREFIXED = LAKE.extended({"name": "ReplayPrefix", "params": {"actions": PREFIX}})


def test_a_reset_reports_the_setup_it_played_and_the_agents_clock_starts_after_it():
    env = PREFIXED.build()
    _, info = env.reset(seed=0)
    assert info["setup_steps"] == len(PREFIX)
    assert "setup_steps" not in LAKE.build().reset(seed=0)[1]  # the original env's info is the registered env's


def test_training_charges_every_setup_step_to_the_arm(tmp_path):
    seeds = Seeds(LAKE, 4_000_000, set())
    env = MixtureEnv([LAKE, PREFIXED], _Alternate(), seeds)
    for _ in range(10):
        env.reset()
    assert env.setup_steps == 5 * len(PREFIX)  # the reshaped env's five resets, the original's none


class _Alternate(Fixed):
    n = 2

    def __init__(self) -> None:
        self.turn = 0

    def pick(self) -> int:
        self.turn += 1
        return self.turn % 2


def test_setup_in_another_thread_is_charged_to_that_thread_and_to_the_process():
    before_here, before_all = steps_taken(), steps_taken(all_threads=True)

    def play() -> None:
        env = PREFIXED.build()
        for seed in range(3):
            env.reset(seed=seed)

    worker = threading.Thread(target=play)
    worker.start()
    worker.join()
    assert steps_taken() == before_here  # this thread played nothing
    assert steps_taken(all_threads=True) - before_all == 3 * len(PREFIX)


def test_a_rollout_in_worker_processes_records_each_episodes_setup(tmp_path):
    env = LAKE.build()
    store = rollout(
        PREFIXED, RandomPolicy(env.action_space, seed=0), seeds=list(range(6)), out=tmp_path / "run", backend="process", workers=2
    )
    table = store.episodes_table(["search_steps"])
    assert table.column("search_steps").to_pylist() == [len(PREFIX)] * 6


def test_validation_is_charged_the_setup_its_rollouts_play(tmp_path):
    env = LAKE.build()
    prefixed = candidate({"name": "ReplayPrefix", "params": {"actions": PREFIX}}, finding="loop")
    plain = candidate({"name": "MoveAgent", "params": {"min_dist": 1, "max_dist": 2}}, finding="loop")
    charged = {}
    for name, proposal in (("prefixed", prefixed), ("plain", plain)):
        validator = Validator(RandomPolicy(env.action_space, seed=0), LAKE, tmp_path / name, ValidationConfig(backend="serial"))
        store = validator.run_agent(proposal.spec, list(range(3_000_000, 3_000_020)), "rollouts")
        lengths = int(np.sum(store.episodes_table(["length"]).column("length").to_numpy()))
        charged[name] = validator.env_steps - lengths
    assert charged == {"prefixed": 20 * len(PREFIX), "plain": 0}


def test_a_prefix_that_would_hide_steps_in_a_longer_walk_is_charged_in_full():
    long = [0, 3] * 5  # ten setup actions that bump the walls and leave the agent where it began: each is a base-env step
    env = envharness.wrap("FrozenLake-v1", ReplayPrefix(actions=long), map_name="8x8", is_slippery=False)
    before = steps_taken()
    _, info = env.reset(seed=0)
    assert info["setup_steps"] == len(long) == steps_taken() - before
