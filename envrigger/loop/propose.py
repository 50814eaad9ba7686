"""Propose: from a diagnosis to candidate reshapings that target its findings.

Contains :class:`Candidate`, :func:`transforms_label`, :func:`suggest` (parameters drawn
around a finding's evidence) and :func:`propose`, which also mutates admitted components
(ACCEL-style) and drops duplicates by canonical spec hash.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from envharness.errors import EnvHarnessError
from envharness.spec import HarnessSpec, TransformSpec
from envharness.transforms import TRANSFORMS, Transform, transform_from_spec
from envharness.transforms.base import field_bounds
from envrigger.diagnose import Diagnosis, Finding
from envrigger.diagnose.remedies import matching_transforms


class Candidate(BaseModel):
    """A proposed environment: the base spec plus transforms, the finding it targets, and why."""

    spec: HarnessSpec
    added: list[TransformSpec] = Field(description="the transforms this proposal adds to the base spec")
    finding: str = Field(description="name of the targeted finding")
    finding_stats: dict[str, Any] = Field(default_factory=dict)
    rationale: str
    origin: str = Field(description="catalog or mutation")
    parent: str | None = Field(None, description="hash of the admitted component a mutation came from")

    @property
    def hash(self) -> str:
        return self.spec.hash()


def transforms_label(transforms: Iterable[TransformSpec]) -> str:
    """How a reshaping is named on screen and in summaries: ``RemoveWalls{"count": 2}``, several joined by commas.

    Example:
        >>> transforms_label([TransformSpec(name="RemoveWalls", params={"count": 2})])
        'RemoveWalls{"count": 2}'
    """
    return ", ".join(f"{t.name}{json.dumps(t.params, sort_keys=True)}" for t in transforms)


def suggest(cls: type[Transform], finding: Finding, rng: np.random.Generator, n: int) -> list[Transform]:
    """Up to ``n`` parameter settings of ``cls`` aimed at ``finding``.

    Region findings on a distance feature bracket the threshold (``goal_distance > 6`` gives
    bands around 6); on a physical constant they set it at the region's edge and further in
    (``pole_length <= 0.4`` gives 0.4, 0.34 and 0.28); a failure's state condition (``pole_angle > 0.05``) sets the initial-state
    noise that starts episodes near it; count-like parameters step up from small values;
    everything else starts from the defaults and mutates within bounds.
    """
    stats = finding.stats
    out: list[Transform] = []
    try:
        if cls.__name__ in ("MoveGoal", "MoveAgent") and stats.get("feature") == "goal_distance":
            t = int(round(stats["threshold"]))
            for lo, hi in ((t, t + 1), (t - 1, t + 2), (t + 1, t + 3), (max(t - 2, 1), t)):
                out.append(cls(min_dist=max(lo, 1), max_dist=max(hi, 1)))
        elif cls.__name__ == "MoveAgent":
            for hi in (2, 4, 6, 8):
                out.append(cls(min_dist=1, max_dist=hi))
        elif cls.__name__ in ("AddLava", "AddWalls"):
            out.extend(cls(count=k) for k in (1, 2, 4, 6))
        elif cls.__name__ == "FrozenLakeMap":
            out.extend(cls(add_holes=k) for k in (1, 2, 4))
            out.append(cls(add_holes=0, remove_holes=2))
        elif cls.__name__ == "WalkthroughStart":
            # Starts spread along the quest (a reverse curriculum), nearest the end first.
            out.extend(cls(min_share=lo, max_share=hi) for lo, hi in ((0.75, 0.95), (0.5, 0.9), (0.0, 0.9), (0.25, 0.75)))
        elif cls.__name__ == "PhysicsParams" and stats.get("feature") in cls.model_fields and "threshold" in stats:
            # A physics region where the agent fails: levels at its edge and further in, the other constants as the env draws them.
            name, cut = str(stats["feature"]), float(stats["threshold"])
            low, high = field_bounds(cls.model_fields[name])
            steps = (1.0, 0.85, 0.7) if stats.get("op") == "<=" else (1.1, 1.25, 1.4)
            out.extend(cls(**{name: float(np.clip(round(cut * k, 4), low, high))}) for k in steps)
        elif cls.__name__ == "ActionSlip":
            out.extend(cls(p=p) for p in (0.05, 0.1, 0.2))
        elif cls.__name__ == "InitialStateNoise" and stats.get("condition"):
            # Start episodes nearer the states the failures come from: noise as wide as the condition's thresholds.
            cuts = [abs(c["threshold"]) for c in stats["condition"]["clauses"] if str(c["raw"]).startswith("obs")]
            out.extend(cls(scale=min(max(k * cut, 0.01), 0.2)) for cut in cuts[:1] for k in (1.0, 0.5, 0.25))
        else:
            base = cls()
            out.append(base)
            for _ in range(n - 1):
                out.append(base.mutate(rng))
    except EnvHarnessError:
        return []  # required parameters without defaults (BlockAction...) need a specific rule
    unique = list({t.model_dump_json(): t for t in out}.values())
    return unique[:n]


def step_out(transform: TransformSpec) -> TransformSpec | None:
    """The next rung of a reverse curriculum: the same easing, less of it; None past the last rung (the original env).

    A start (or goal) within ``[a, b]`` steps moves out to ``[b, 2b]``; a start ``[lo, hi]``
    of the way along the walkthrough moves a quarter back toward the beginning; ``count``
    removed walls become one fewer.

    Example:
        >>> step_out(TransformSpec(name="MoveAgent", params={"min_dist": 1, "max_dist": 3})).params
        {'min_dist': 3, 'max_dist': 6}
        >>> step_out(TransformSpec(name="RemoveWalls", params={"count": 1})) is None
        True
    """
    p = transform.params
    if transform.name in ("MoveAgent", "MoveGoal"):
        low, high = int(p.get("max_dist", 3)), min(2 * int(p.get("max_dist", 3)), 100)
        changed: dict[str, Any] | None = {"min_dist": low, "max_dist": high} if high > int(p.get("max_dist", 3)) else None
    elif transform.name == "WalkthroughStart":
        first, last = float(p.get("min_share", 0.0)), float(p.get("max_share", 0.5))
        changed = {"min_share": round(max(first - 0.25, 0.0), 4), "max_share": round(last - 0.25, 4)} if last - 0.25 > 0 else None
    elif transform.name == "RemoveWalls":
        changed = {"count": int(p.get("count", 2)) - 1} if int(p.get("count", 2)) > 1 else None
    else:
        changed = None
    return None if changed is None else TransformSpec(name=transform.name, params={**p, **changed})


def step_in(transform: TransformSpec) -> TransformSpec | None:
    """The rung nearer the goal of an easing the agent wins too rarely to learn from; None when there is no nearer one.

    The inverse of :func:`step_out`, for an agent that wins almost nothing: a start along
    the walkthrough moves half the rest of the way toward its end (never past 0.95 of it,
    and the last command is always the agent's); a start or goal within ``[a, b]`` steps
    comes in to ``[1, b // 2]``. Reverse curriculum generation (Florensa et al. 2017) grows
    its starts outward from the goal the same way, from where the agent can win.

    Example:
        >>> step_in(TransformSpec(name="WalkthroughStart", params={"min_share": 0.75, "max_share": 0.95})).params
        {'min_share': 0.85, 'max_share': 0.95}
        >>> step_in(TransformSpec(name="WalkthroughStart", params={"min_share": 0.9, "max_share": 0.95})) is None
        True
        >>> step_in(TransformSpec(name="MoveAgent", params={"min_dist": 1, "max_dist": 4})).params
        {'min_dist': 1, 'max_dist': 2}
    """
    p = transform.params
    changed: dict[str, Any] | None = None
    if transform.name == "WalkthroughStart":
        first = float(p.get("min_share", 0.0))
        nearer = round(first + (WALKTHROUGH_END - first) / 2, 2)
        if WALKTHROUGH_END - nearer >= 0.04:
            changed = {"min_share": nearer, "max_share": WALKTHROUGH_END}
    elif transform.name in ("MoveAgent", "MoveGoal"):
        high = int(p.get("max_dist", 3))
        if high > 1:
            changed = {"min_dist": 1, "max_dist": max(high // 2, 1)}
    return None if changed is None else TransformSpec(name=transform.name, params={**p, **changed})


WALKTHROUGH_END = 0.95  # WalkthroughStart's largest share: the nearest start to the goal the catalog offers


def offerable(spec: HarnessSpec) -> bool:
    """Builds on this env, and every transform is one a proposer should offer there."""
    try:
        env = spec.build()
    except EnvHarnessError:
        return False
    try:
        return all(t.proposable(env.adapter) for t in env.transforms)
    finally:
        env.close()


# Catalog reshapings that can make a level easier (a start nearer the goal or further along the quest, a nearer goal, fewer walls).
EASING = frozenset({"MoveAgent", "MoveGoal", "RemoveWalls", "WalkthroughStart"})


def _region(finding: Finding) -> list[Finding]:
    """A failure whose condition is a level parameter's region (``pole_mass <= 0.113``) as that region's own finding.

    The diagnosis states an ending's condition over state and level features; a clause on
    a level feature (the one ``by_feature`` bins) names levels the agent fails on, which
    is what a ``feature_region`` finding is, so that region's reshapings can target it.
    """
    level = finding.stats.get("by_feature", {}).get("feature")
    for clause in finding.stats.get("condition", {}).get("clauses", []):
        if level is not None and clause["raw"] == level:
            stats = {"feature": clause["feature"], "op": clause["op"], "threshold": clause["threshold"]}
            return [finding.model_copy(update={"name": f"feature_region:{clause['feature']}", "stats": stats})]
    return []


def propose(
    diagnosis: Diagnosis,
    base: HarnessSpec,
    rng: np.random.Generator,
    admitted: Iterable[tuple[str, HarnessSpec, str]] = (),
    per_finding: int = 4,
    mutations: int = 4,
    max_findings: int = 4,
    easing_first: bool = False,
    mastered: Iterable[tuple[str, HarnessSpec, str]] = (),
    target_all: bool = False,
    learnability: dict[str, float] | None = None,
) -> list[Candidate]:
    """Candidates for the top findings, then the next rungs of mastered components, then mutations of admitted ones; no duplicates.

    ``admitted`` holds (hash, spec, targeted finding) of library components. Candidates
    already admitted (same hash) or incompatible with the env are dropped. With
    ``easing_first`` (the agent succeeds too rarely for a harder env to be learnable),
    catalog candidates from :data:`EASING` transforms come first, a start along the level's
    own solution (``WalkthroughStart``, which keeps every subgoal of the task) before the
    others (which the no-shortcut gate often refuses), each group in its own order.
    ``mastered`` (the same triples) are components the learner now solves almost always:
    each gets its :func:`step_out` (origin ``step-out``), a reverse curriculum that
    follows the learner outward. With ``target_all``, findings the catalog does not name
    get candidates too: an ending whose condition is a level parameter's region gets that
    region's reshapings (:func:`_region`), and a finding no transform targets gets the
    :data:`EASING` ones. With ``learnability`` (each admitted component's hash to p(1 - p)
    of its training wins this round), the components mutated are those the learner is
    learning most on, highest first (ACCEL's edits of high-regret levels); without it, a
    random ``mutations`` of them.
    """
    admitted = list(admitted)
    seen = {h for h, _, _ in admitted} | {base.hash()}
    out: list[Candidate] = []

    def add(candidates: Iterable[Candidate]) -> None:
        for candidate in candidates:
            if candidate.hash not in seen and offerable(candidate.spec):
                seen.add(candidate.hash)
                out.append(candidate)

    add(_catalog(diagnosis, base, rng, per_finding, max_findings, target_all))
    if easing_first:
        # Stable: each group keeps its order.
        out.sort(key=lambda c: (not any(t.name in EASING for t in c.added), not any(t.name == "WalkthroughStart" for t in c.added)))
    add(_step_outs(base, mastered))
    add(_mutations(base, rng, admitted, mutations, learnability))
    return out


def _catalog(
    diagnosis: Diagnosis, base: HarnessSpec, rng: np.random.Generator, per_finding: int, max_findings: int, target_all: bool
) -> Iterator[Candidate]:
    """The catalog's candidates for the top findings: one queue per (finding, transform), taken from in turn for variety."""
    queues = []
    for finding in [f for f in diagnosis.findings if f.severity > 0][:max_findings]:
        tried: set[str] = set()
        targets = [
            finding if name == finding.name else finding.model_copy(update={"name": name}) for name in (finding.name, *finding.symptoms)
        ]
        if target_all:
            targets += _region(finding)
        for target in targets:  # a merged finding's symptoms are targets too
            for cls in matching_transforms(target.name):
                if cls.__name__ not in tried:
                    tried.add(cls.__name__)
                    queues.append([(target, t) for t in suggest(cls, target, rng, per_finding)])
        if target_all and not tried:  # nothing in the catalog names this finding: ease the levels it happens on
            for cls in (TRANSFORMS[name] for name in sorted(EASING)):
                queues.append([(finding, t) for t in suggest(cls, finding, rng, per_finding)])
    while any(queues):
        for queue in queues:
            if not queue:
                continue
            finding, transform = queue.pop(0)
            yield Candidate(
                spec=base.extended(transform),
                added=[TransformSpec(**transform.to_spec())],
                finding=finding.name,
                finding_stats=finding.stats,
                rationale=f"{finding.name} ({finding.title}; severity {finding.severity:.2f}): "
                f"{transform.name} targets it with {transform.model_dump(exclude_none=True)}",
                origin="catalog",
            )


def _step_outs(base: HarnessSpec, mastered: Iterable[tuple[str, HarnessSpec, str]]) -> Iterator[Candidate]:
    """Each mastered component's next rung (:func:`step_out`): a reverse curriculum that follows the learner outward."""
    for parent_hash, parent, parent_finding in mastered:
        extra = parent.transforms[len(base.transforms) :]
        stepped = [step_out(t) for t in extra]
        if not extra or all(t is None for t in stepped):
            continue
        changed = [new if new is not None else old for old, new in zip(extra, stepped, strict=True)]
        yield Candidate(
            spec=base.extended(*changed),
            added=changed,
            finding=parent_finding,
            rationale=f"the learner masters admitted component {parent_hash}: its next rung, {transforms_label(changed)}",
            origin="step-out",
            parent=parent_hash,
        )


def _mutations(
    base: HarnessSpec,
    rng: np.random.Generator,
    admitted: list[tuple[str, HarnessSpec, str]],
    mutations: int,
    learnability: dict[str, float] | None,
) -> list[Candidate]:
    """ACCEL-style edits of ``mutations`` admitted components: random ones, or the most learnable first."""
    out = []
    order = [int(i) for i in rng.permutation(len(admitted))] if admitted else []
    if learnability is not None:  # stable: among equals, the random order
        order.sort(key=lambda i: -learnability.get(admitted[i][0], -1.0))
    for index in order[:mutations]:
        parent_hash, parent, parent_finding = admitted[int(index)]
        extra = parent.transforms[len(base.transforms) :] or parent.transforms
        if not extra:
            continue
        position = int(rng.integers(len(extra)))
        mutated = transform_from_spec(extra[position]).mutate(rng)
        changed = [*extra[:position], TransformSpec(**mutated.to_spec()), *extra[position + 1 :]]
        out.append(
            Candidate(
                spec=base.extended(*changed),
                added=changed,
                finding=parent_finding,
                rationale=f"mutation of admitted component {parent_hash}: {mutated!r}",
                origin="mutation",
                parent=parent_hash,
            )
        )
    return out
