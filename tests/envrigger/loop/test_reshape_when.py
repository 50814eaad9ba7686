"""``reshape_when="stalled"``: the rigger arm reshapes only once the original env stopped teaching it.

Until it admits a component it trains exactly as the original arm does (the same levels,
the same updates), and a round in which its success on the original env still rose from
the first half of its episodes to the second spends no env step on diagnosis or
validation. Once the env gives no more signal (nothing won, a flat rate, or mastered) it
diagnoses, proposes and validates as with ``"always"``.
"""

from __future__ import annotations

import json

import pytest
from loop_cases import LAKE, SMALL

from envharness import HarnessSpec
from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.arms.rigger import still_teaches
from envrigger.loop.library import Library

LEARNS = HarnessSpec(env_id="FrozenLake-v1")  # the 4x4 map: tabular Q-learning's success rises within a 4,000-step round


def rounds(out):
    library = Library(out / "library.db", create=False)
    try:
        return library.rounds()
    finally:
        library.close()


@pytest.fixture(scope="module")
def teaching(tmp_path_factory):
    out = tmp_path_factory.mktemp("teaching") / "run"
    config = LoopConfig(
        **{**SMALL, "spec": LEARNS, "rounds": 2, "arms": ["original", "rigger"]},
        budget_counts="all",
        reshape_when="stalled",
        credit_chunks=0,
    )
    run_loop(out, config)
    return out, rounds(out)


def test_while_the_original_env_teaches_the_rigger_arm_trains_exactly_as_the_original_arm(teaching):
    _, (first, _) = teaching
    rigger, original = first["arms"]["rigger"], first["arms"]["original"]
    assert first["original_env"].startswith("still teaching"), first["original_env"]
    for key in ("steps", "episodes", "picks", "wins"):
        assert rigger["train"][key] == original["train"][key], key
    assert rigger["validation"]["success"] == original["validation"]["success"]


def test_a_round_in_which_the_original_env_teaches_spends_nothing_on_reshaping(teaching):
    _, (first, _) = teaching
    spent = first["arms"]["rigger"]["interaction"]
    assert spent["collect"] == spent["validate"] == spent["credit"] == 0
    assert spent["total"] == spent["train"]
    assert first.get("candidates") is None and first.get("admitted") is None


def test_the_halves_count_every_training_episode_on_the_original_env(teaching):
    _, (first, _) = teaching
    trained = first["arms"]["rigger"]["train"]
    (w1, n1), (w2, n2) = trained["halves"]
    assert n1 + n2 == trained["picks"][0] and w1 + w2 == trained["wins"][0]
    assert n2 - n1 in (0, 1)


def test_once_the_original_env_gives_no_signal_the_rigger_arm_diagnoses_and_validates(tmp_path):
    # The 8x8 lake in 600 steps: the learner wins nothing, so the original env is not teaching it.
    config = LoopConfig(
        **{**SMALL, "spec": LAKE, "rounds": 2, "budget_steps": 600, "arms": ["original", "rigger"]},
        budget_counts="all",
        reshape_when="stalled",
        credit_chunks=0,
    )
    run_loop(tmp_path / "run", config)
    first = rounds(tmp_path / "run")[0]
    assert first["original_env"].startswith("stalled"), first["original_env"]
    assert first["candidates"] > 0 and first["arms"]["rigger"]["interaction"]["validate"] > 0


def test_always_reshapes_every_round_and_records_no_halves(tmp_path):
    config = LoopConfig(**{**SMALL, "spec": LEARNS, "rounds": 2, "arms": ["original", "rigger"]}, credit_chunks=0)
    run_loop(tmp_path / "run", config)
    first = rounds(tmp_path / "run")[0]
    assert "original_env" not in first and first["candidates"] > 0
    assert "halves" not in first["arms"]["rigger"]["train"]
    assert json.loads((tmp_path / "run" / "loop.json").read_text())["reshape_when"] == "always"


@pytest.mark.parametrize(
    ("halves", "before", "teaches", "why"),
    [
        ([[3, 100], [15, 100]], None, True, "still teaching"),
        ([[20, 100], [21, 100]], None, True, "too early to tell"),  # flat in its first round: given a round more
        ([[20, 100], [21, 100]], [[10, 100], [20, 100]], False, "stalled: 20 of 100 then 21"),  # and flat since the last
        ([[20, 100], [21, 100]], [[5, 100], [9, 100]], True, "up from 9 of 100"),  # flat in the round, up since the last
        ([[15, 100], [3, 100]], [[15, 100], [15, 100]], False, "stalled"),  # falling
        ([[0, 100], [0, 100]], None, False, "stalled: 0 of 100"),  # nothing won: no signal at all
        ([[70, 100], [95, 100]], None, False, "mastered"),  # rising, but above the band: a harder variant teaches
        ([[0, 2], [2, 2]], None, False, "too few episodes"),
        (None, None, False, "trained with credit"),
    ],
)
def test_still_teaches_reads_a_rise_a_plateau_no_signal_and_mastery(halves, before, teaches, why):
    got, reason = still_teaches(halves, (0.2, 0.8), before)
    assert got is teaches and why in reason, reason
