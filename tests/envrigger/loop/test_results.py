"""A run's results are versioned models: written and read through them; every kept result still loads, identically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envrigger.errors import TrajectoryError
from envrigger.loop.library import Library
from envrigger.loop.results import SCHEMA_VERSION, FinalResults, RoundSummary

ROOT = Path(__file__).resolve().parents[3]
KEPT = ROOT / "benchmarks" / "results"


def test_every_kept_final_json_loads_and_writes_back_the_same_fields():
    paths = sorted(KEPT.rglob("final.json"))
    assert len(paths) >= 100  # the suite, the hard tier, the ablations: written before versions were recorded
    for path in paths:
        raw = json.loads(path.read_text())
        final = FinalResults.load(path)
        assert final.schema_version == raw.get("schema_version", 0)
        written = final.dump()
        assert written.pop("schema_version") == SCHEMA_VERSION
        assert json.dumps(written) == json.dumps({k: v for k, v in raw.items() if k != "schema_version"}), path  # order too


def test_every_kept_round_summary_loads_and_writes_back_the_same_fields():
    checked = 0
    for path in sorted(KEPT.rglob("library.db"))[:60]:
        library = Library(path, create=False)
        try:
            for raw in library.rounds():
                summary = RoundSummary.model_validate(raw)
                assert summary.round == raw["round"] and set(summary.arms) == set(raw["arms"])
                assert summary.validated == ("findings" in raw)
                written = summary.dump()
                written.pop("schema_version")
                assert written == {k: v for k, v in raw.items() if k != "schema_version"}
                checked += 1
        finally:
            library.close()
    assert checked >= 100


def test_a_result_from_a_newer_envrigger_is_refused_in_one_line(tmp_path):
    path = next(KEPT.rglob("final.json"))
    newer = {**json.loads(path.read_text()), "schema_version": SCHEMA_VERSION + 1}
    (tmp_path / "final.json").write_text(json.dumps(newer))
    with pytest.raises(TrajectoryError, match=f"final.json: .*schema_version {SCHEMA_VERSION + 1} is newer than this envrigger reads"):
        FinalResults.load(tmp_path / "final.json")


def test_results_read_typed_and_as_the_dicts_they_were():
    final = FinalResults.load(next((KEPT / "heldout-v2" / "doorkey6").rglob("final.json")))
    rigger = final.arms["rigger"]
    assert rigger.heldout is not None and 0.0 <= rigger.heldout.success <= 1.0
    assert final["arms"]["rigger"]["heldout"]["success"] == rigger.heldout.success  # code written for the dicts still reads
    assert "warnings" in final and "nope" not in final and final.get("nope", 7) == 7
    with pytest.raises(KeyError):
        final["nope"]
