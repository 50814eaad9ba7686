"""Starts along the agent's own successes: a reverse curriculum with no search and no walkthrough (``--demo-start``).

Contains :func:`demo_candidate`. The rigger arm's diagnosis evidence is its own training
episodes on the original env; the few it won are recordings of levels it can finish. A
:class:`~envharness.transforms.DemoStart` over them starts each episode part-way along one
(between ``min_share`` and ``max_share`` of its actions played as setup), so the agent
practises the end of a task it has finished once, on every family that resets
deterministically by seed (Florensa et al. 2017's reverse curriculum, Salimans and Chen
2018's start from a demonstration), and is validated like any candidate.
"""

from __future__ import annotations

import json
from typing import Any

from envharness.spec import HarnessSpec
from envharness.transforms import DemoStart
from envrigger.loop.propose import Candidate

MAX_DEMOS = 20
"""The most recordings one candidate starts along (the shortest wins first)."""


def demos_from(store: Any, reserved: set[str], limit: int = MAX_DEMOS) -> list[dict[str, Any]]:
    """The won episodes of ``store`` as recordings (``{"seed", "actions"}``), shortest first, one per seed, none on a reserved level."""
    found: dict[int, list[Any]] = {}
    for episode, steps in store.iter_episode_steps():
        if not episode.success or episode.seed is None or episode.seed in found or episode.level_id in reserved:
            continue
        actions = [json.loads(step.action) for step in sorted(steps, key=lambda s: s.t)]
        if 2 <= len(actions) <= 1000 and not any(step.blocked for step in steps):
            found[int(episode.seed)] = actions
    ordered = sorted(found.items(), key=lambda item: (len(item[1]), item[0]))
    return [{"seed": seed, "actions": actions} for seed, actions in ordered[:limit]]


def demo_candidate(
    store: Any, base: HarnessSpec, diagnosis: Any, reserved: set[str], shares: tuple[float, float] = (0.5, 0.9)
) -> Candidate | None:
    """A DemoStart along the evidence's own successes, for the top finding it addresses (else the most severe); None without a success or a finding.

    Example:
        >>> from envrigger.data import TrajectoryStore
        >>> import tempfile
        >>> store = TrajectoryStore.create(tempfile.mkdtemp() + "/run", meta={})
        >>> demo_candidate(store, HarnessSpec(env_id="FrozenLake-v1"), None, set()) is None  # nothing won: nothing to start along
        True
    """
    demos = demos_from(store, reserved)
    if not demos or diagnosis is None:
        return None
    # A start along a success eases the whole task: it targets the top finding it names (running out of time, looping),
    # else the most severe one; the targeting gate still checks that the weakness occurs on the candidate.
    finding = next((f for f in diagnosis.findings if f.name in DemoStart.targets), diagnosis.findings[0] if diagnosis.findings else None)
    if finding is None:
        return None
    added = DemoStart(demos=demos, min_share=shares[0], max_share=shares[1]).to_spec()
    return Candidate(
        spec=base.extended(added),
        added=[added],
        finding=finding.name,
        finding_stats=dict(finding.stats),
        rationale=f"start along the agent's own {len(demos)} won episode(s), {shares[0]:g}-{shares[1]:g} of each played: it "
        "practises the end of levels it has finished once (a reverse curriculum with no search)",
        origin="demos",
    )
