"""Which registered env families an attack suite leaves out: a suite's env ids against the adapter registry."""

from __future__ import annotations

from collections.abc import Iterable


def unattacked(env_ids: Iterable[str]) -> tuple[set[str], set[str]]:
    """(every registered family, by adapter and the generic one; the families none of ``env_ids`` belongs to)."""
    from envharness.adapters.registry import ADAPTERS, family_of_id

    registered = {adapter.family for adapter in ADAPTERS} | {"generic"}
    return registered, registered - {family_of_id(env_id) for env_id in env_ids}
