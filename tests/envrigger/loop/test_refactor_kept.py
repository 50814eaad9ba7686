"""The loop's refactors change nothing it reports: small runs of every arm rerun to the files kept before the refactor.

Each case is a small ``run_loop`` (the same as ``envrigger run`` writes) whose ``final.json``,
level records and round summaries were kept in ``kept/`` by the code before the arms became
registered units. ``final.json`` must match bit for bit; every field a kept round summary
holds must hold the same value (a summary may gain fields). Wall-clock times are the only
fields left out: they are not stable on any code. ``ENVRIGGER_KEEP=1`` writes the files anew
(only after a change meant to change the numbers, saying so in the commit).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from loop_cases import SHORT_DOORKEY, SMALL

from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.library import Library

KEPT = Path(__file__).parent / "kept"
CASES: dict[str, dict[str, Any]] = {
    # every arm, the default credit (one chunk, the shadow baseline)
    "every-arm": {
        **SMALL,
        "arms": ["original", "original-select", "dr", "dr-any", "plr", "plr-random", "rigger-noreplay", "rigger"],
        "dr_pool": 4,
        "rounds": 3,
    },
    # the rigger arm without credit (its evidence from train_arm), retiring mastered components, stepping out
    "no-credit": {**SMALL, "arms": ["original", "plr", "rigger"], "credit_chunks": 0, "retire_mastered": True, "step_out": True},
    # the fork baseline in two chunks, the transfer gate, and the selection ablation
    "fork-transfer": {
        **SMALL,
        "arms": ["original", "original-select", "rigger"],
        "credit_chunks": 2,
        "credit_baseline": "fork",
        "transfer_steps": 600,
        "transfer_episodes": 10,
    },
    # PPO on a MiniGrid family: whole-rollout chunks, starts along the walkthrough (the search's steps), batched rollouts
    "ppo-doorkey": {
        **SMALL,
        "spec": SHORT_DOORKEY,
        "learner": "ppo",
        "arms": ["original", "plr", "rigger"],
        "budget_steps": 1024,
        "candidates_per_round": 2,
        "min_rollouts": 10,
        "max_rollouts": 20,
        "band": (0.02, 0.98),
        "allow_seen_levels": False,
        "learner_params": {"n_steps": 128},
    },
}
CLOCKS = {"wall_time", "stage_seconds", "seconds"}


def _without_clocks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clocks(v) for k, v in value.items() if k not in CLOCKS}
    if isinstance(value, list):
        return [_without_clocks(v) for v in value]
    return value


def _record(out: Path) -> dict[str, Any]:
    library = Library(out / "library.db", create=False)
    try:
        rounds = [_without_clocks(r) for r in library.rounds()]
        components = [(c.hash, c.round, c.finding) for c in library.components()]
    finally:
        library.close()
    levels = {p.name: json.loads(p.read_text()) for p in sorted(out.glob("levels-round-*.json"))}
    return {"final": (out / "final.json").read_text(), "rounds": rounds, "components": components, "levels": levels}


def _holds(kept: Any, now: Any, where: str) -> list[str]:
    """Where ``now`` differs from ``kept`` in any field ``kept`` has (``now`` may have more fields)."""
    if isinstance(kept, dict) and isinstance(now, dict):
        return [d for k, v in kept.items() for d in (_holds(v, now[k], f"{where}.{k}") if k in now else [f"{where}.{k}: missing"])]
    if isinstance(kept, list) and isinstance(now, list) and len(kept) == len(now):
        return [d for i, (a, b) in enumerate(zip(kept, now, strict=True)) for d in _holds(a, b, f"{where}[{i}]")]
    return [] if kept == now else [f"{where}: kept {kept!r}, now {now!r}"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_small_run_reports_exactly_what_it_did_before_the_refactor(tmp_path, case):
    run_loop(tmp_path / case, LoopConfig(**CASES[case]))
    now = json.loads(json.dumps(_record(tmp_path / case)))  # tuples as JSON keeps them
    path = KEPT / f"{case}.json"
    if os.environ.get("ENVRIGGER_KEEP") == "1":
        path.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    kept = json.loads(path.read_text())
    assert now["final"] == kept["final"]  # bit for bit
    assert now["levels"] == kept["levels"] and now["components"] == kept["components"]
    assert _holds(kept["rounds"], now["rounds"], "rounds") == []
