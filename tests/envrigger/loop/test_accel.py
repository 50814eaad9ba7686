"""The ``accel`` arm: PLR that also replays random edits of its levels, keeping and mutating the edits scored highest.

An ACCEL-style anchor (Parker-Holder et al., 2022) beside ``plr``: what random edits of
levels, chosen by the same score, add without the diagnosis, the gates or a search.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from loop_cases import SHORT_DOORKEY, SMALL

from envharness.transforms import TRANSFORMS
from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.arms.accel import ACCEL, EDITS
from envrigger.loop.library import Library
from envrigger.loop.samplers import PLR


@pytest.fixture(scope="module")
def accel_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("accel") / "run"
    config = LoopConfig(
        **{
            **SMALL,
            "spec": SHORT_DOORKEY,
            "learner": "ppo",
            "arms": ["original", "accel"],
            "rounds": 2,
            "budget_steps": 2048,
            "allow_seen_levels": False,
        },
        learner_params={"n_steps": 128},
    )
    run_loop(out, config)
    return out


def test_accel_trains_on_the_original_and_its_state_edits_and_replays_edited_levels(accel_run):
    edits = json.loads((accel_run / "accel-edits.json").read_text())
    assert len(edits) == EDITS and all(len(e["transforms"]) == 1 for e in edits)
    assert all(TRANSFORMS[e["transforms"][0]["name"]].kind == "state" for e in edits)
    library = Library(accel_run / "library.db", create=False)
    try:
        rounds = library.rounds()
    finally:
        library.close()
    trained = rounds[-1]["arms"]["accel"]["train"]
    assert len(trained["envs"]) == 1 + EDITS and sum(trained["picks"][1:]) > 0
    buffer = json.loads((accel_run / "accel-replay.json").read_text())
    assert {index for index, *_ in buffer["levels"]} - {0}  # edited levels are in the buffer, to be replayed
    final = json.loads((accel_run / "final.json").read_text())
    assert final["levels"]["disjoint"] and final["arms"]["accel"]["heldout"]["seen_in_training"] == 0.0


def test_the_edits_scored_highest_are_kept_with_their_mutations_and_the_rest_replaced():
    arm = ACCEL.__new__(ACCEL)
    arm.run = type("Run", (), {"base": SHORT_DOORKEY})()
    arm.edits = [SHORT_DOORKEY.extended({"name": "MoveAgent", "params": {"min_dist": d, "max_dist": d + 1}}) for d in (1, 2, 3, 4)]
    arm.replay = PLR(np.random.default_rng(0), score="value_loss", replay_reshaped=True)
    for index, loss in ((1, 0.01), (2, 0.02), (3, 0.9), (4, 0.5)):  # edit 3 (index 3) and edit 4 scored highest
        arm.replay.update(index, 100 + index, success=False)
        arm.replay.score(index, 100 + index, loss)
    population = arm._evolved(np.random.default_rng(0))
    hashes = [s.hash() for s in population]
    assert arm.edits[2].hash() in hashes and arm.edits[3].hash() in hashes
    assert arm.edits[0].hash() not in hashes and len(population) == EDITS
