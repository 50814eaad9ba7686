"""What to try for a finding: the catalog transforms whose ``targets`` name it.

Contains :func:`matching_transforms` (what the proposer draws candidates from) and
:func:`remedies` (the same, as words for a report), and :func:`run_remedies` for a run's findings.
"""

from __future__ import annotations

from typing import Any

from envharness.transforms import TRANSFORMS, Transform


def matching_transforms(finding_name: str) -> list[type[Transform]]:
    """Catalog transforms whose ``targets`` name the finding (or its family, before the colon).

    Example:
        >>> [t.__name__ for t in matching_transforms("terminal_cause:lava")]
        ['AddLava', 'MoveAgent']
    """
    family = finding_name.split(":", 1)[0]
    return [
        cls for name, cls in sorted(TRANSFORMS.items()) if cls.kind != "link" and (finding_name in cls.targets or family in cls.targets)
    ]


def remedies(finding_name: str, adapter: tuple[str, frozenset[str]] | None = None) -> list[str]:
    """The transforms to try for a finding, each with the envs it works on.

    With ``adapter`` (the run's env family key and capabilities), transforms written for other
    families (by their ``families``), or needing a capability the env lacks, are left out.

    Example:
        >>> remedies("terminal_cause:lava")
        ['AddLava', 'MoveAgent']
        >>> [r for r in remedies("noop_action") if "TextWorld" in r]
        ['BlockVerb (TextWorld (commands listed in the observation))']
        >>> [r for r in remedies("noop_action", ("minigrid", frozenset({"agent", "goal"}))) if "TextWorld" in r]
        []
    """
    out = []
    for cls in matching_transforms(finding_name):
        if adapter is not None:
            family, capabilities = adapter
            if not cls.works_on_family(family):
                continue
            if (cls.capability is not None and cls.capability not in capabilities) or (cls.requires_state_access and not capabilities):
                continue
        out.append(f"{cls.__name__} ({cls.works_on})" if cls.works_on != "any env" else cls.__name__)
    return out


def run_adapter(spec_json: str | None) -> tuple[str, frozenset[str]] | None:
    """The family and capabilities of the env a run was collected on (None when it cannot be built here)."""
    if not spec_json:
        return None
    try:
        from envharness.spec import HarnessSpec

        env = HarnessSpec.from_json(spec_json).build()
    except Exception:  # an env this machine cannot build (a missing extra, a user module): no filtering
        return None
    try:
        adapter = getattr(env, "adapter", None)
        return (str(adapter.family), frozenset(adapter.capabilities)) if adapter is not None else None
    finally:
        env.close()


def run_remedies(diagnosis: Any, store: Any) -> dict[str, list[str]]:
    """Each finding's remedies on the env ``store``'s run was collected on (what the console and the HTML report show)."""
    first = store.episodes_table(columns=["spec_json"]).column("spec_json")
    adapter = run_adapter(first[0].as_py() if len(first) else None)
    out = {}
    for f in diagnosis.findings:  # a merged finding's symptoms have remedies too
        found = [r for name in (f.name, *f.symptoms) for r in remedies(name, adapter)]
        out[f.name] = list(dict.fromkeys(found))
    return out


__all__ = ["matching_transforms", "remedies", "run_adapter", "run_remedies"]
