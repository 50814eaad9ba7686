"""The finding vocabulary: transforms target only names detectors produce, and the docs list every name.

A transform's ``targets`` are matched against finding names by the proposer
(:func:`envrigger.diagnose.remedies.matching_transforms`): a target no detector produces is
never offered, silently. These tests make that, and a finding no transform answers, seen.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from envharness.transforms import TRANSFORMS
from envrigger.diagnose import FINDING_NAMES, DiagnoseConfig
from envrigger.diagnose.detectors import EPISODE_DETECTORS, produced
from envrigger.diagnose.finding_names import FindingName, produces
from envrigger.diagnose.flags import Flag

ROOT = Path(__file__).resolve().parents[3]

# The findings no catalog transform targets: `envrigger run` proposes nothing for them (unless
# --target-all eases their levels) and `envrigger diagnose` has nothing to try. A new detector's
# names land here until a transform targets them; a transform that targets one takes it off.
UNTARGETED = {
    "context_truncated",
    "episode_error",
    "giving_up",
    "malformed_output",
    "return_gap",
    "revisit",
    "slow_calls",
    "verbose_output",
}


def test_every_transform_targets_only_finding_names_a_detector_produces():
    dead = sorted(f"{name} targets {target!r}" for name, cls in TRANSFORMS.items() for target in cls.targets if not produced(target))
    assert dead == [], "no detector produces these names, so the proposer never offers these transforms for them"


def test_the_finding_names_no_transform_targets_are_the_written_down_ones():
    proposable = [cls for cls in TRANSFORMS.values() if cls.kind != "link"]  # the proposer never offers a link
    targeted = {target.split(":", 1)[0] for cls in proposable for target in cls.targets}
    assert set(FINDING_NAMES) - targeted == UNTARGETED


def _docs_table() -> dict[str, list[str]]:
    """docs/diagnose.md's detector table: each row's cells, by the row's first cell."""
    page = (ROOT / "docs" / "diagnose.md").read_text(encoding="utf-8")
    table = page[page.index("## Detectors") :]
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines() if line.startswith("| `")]
    return {row[0]: row for row in rows}


def test_every_finding_name_is_in_the_docs_with_its_detector_and_the_transforms_that_target_it():
    rows = _docs_table()
    for entry in FINDING_NAMES.values():
        row = rows.get(f"`{entry.pattern}`")
        assert row is not None, f"docs/diagnose.md's detector table has no row for `{entry.pattern}`"
        assert row[1] == f"`{entry.detector}`", f"the row of `{entry.pattern}` does not name its detector `{entry.detector}`"
        listed = {word.strip("`") for word in re.findall(r"`[A-Za-z]+`", row[4])}
        targeting = {
            name for name, cls in TRANSFORMS.items() if cls.kind != "link" and any(t.split(":", 1)[0] == entry.name for t in cls.targets)
        }
        assert listed == targeting, f"the row of `{entry.pattern}`: targeted by {sorted(targeting)}"
    assert len(rows) == len(FINDING_NAMES), "a row of the table names no registered finding"


def test_targets_are_tuples_of_names():
    # ("timeout") is a string, and `in` on a string matches its substrings: "time" would target it.
    assert [name for name, cls in TRANSFORMS.items() if not isinstance(cls.targets, tuple)] == []


def test_a_target_may_name_a_family_or_one_member_but_not_a_detail_of_a_plain_name():
    assert produced("feature_region") and produced("feature_region:goal_distance") and produced("timeout")
    assert not produced("timeout:soon") and not produced("early_failure")


def test_every_episode_detector_declares_its_names():
    declared = {entry.detector for entry in FINDING_NAMES.values()}
    assert {detector.__name__ for detector in EPISODE_DETECTORS} <= declared


def test_a_name_is_produced_by_one_detector_only():
    with pytest.raises(ValueError, match="'loop' is produced by flag_behaviours already"):

        @produces(FindingName("loop", "behaviour", "goes round in circles"))
        def circles(frame: object, config: DiagnoseConfig) -> list[Flag]:
            return []

    assert FINDING_NAMES["loop"].detector == "flag_behaviours"


def test_a_detector_returning_a_name_of_another_kind_than_declared_is_refused():
    @produces(FindingName("dawdles", "behaviour", "takes its time"))
    def dawdles(frame: object, config: DiagnoseConfig) -> list[Flag]:
        return [Flag("dawdles", "dawdles", np.ones(3, dtype=bool))]  # kind left at its default, "ending"

    try:
        with pytest.raises(ValueError, match="'dawdles' \\(kind ending\\), which its @produces does not declare"):
            dawdles(None, DiagnoseConfig())
    finally:
        del FINDING_NAMES["dawdles"]


def test_a_detector_registered_with_episode_detector_runs_in_every_diagnosis(tmp_path):
    # What a new detector module does: nothing else lists it, and diagnose() runs it.
    from envrigger.diagnose import diagnose
    from envrigger.diagnose.finding_names import _EPISODE_DETECTORS, episode_detector
    from envrigger.rollout import rollout

    seen: list[int] = []

    @episode_detector(order=995)
    @produces(FindingName("dawdling", "behaviour", "failed after long episodes"))
    def dawdling(frame, config):
        seen.append(frame.n)
        return [Flag("dawdling", "failed after long episodes", ~frame.success, kind="behaviour")]

    run = rollout("MiniGrid-Empty-5x5-v0", "random", seeds=range(12), out=tmp_path / "run")
    try:
        diagnose(run)
    finally:
        del _EPISODE_DETECTORS["dawdling"], FINDING_NAMES["dawdling"]
    assert seen == [12]  # it ran, on the whole run
    diagnose(run)
    assert seen == [12]  # unregistered, it runs no more
