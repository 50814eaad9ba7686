"""Comparing two releases: which ledgers changed, the missing cross cells evaluated, and the change attributed.

Contains :func:`compare`. Where more than one factor changed between releases A and B,
every combination of A's and B's factors (at most 2^3 cells) is played on the same
held-out tasks with the same seeds; a cell evaluated before (by any release or comparison)
is reused, never played again. The change in every metric is split among the changed
factors by Shapley values, with paired bootstrap intervals over tasks
(:func:`~envrigger.ledger.attribution.attribute`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from pydantic import Field

from envrigger.data.versioned import Readable, Versioned
from envrigger.diagnose.diversity import collapse
from envrigger.errors import LedgerError
from envrigger.ledger.attribution import attribute, headline, summarize
from envrigger.ledger.evaluate import evaluate_cell
from envrigger.ledger.factors import FACTORS, Cell
from envrigger.ledger.store import Ledger


class Side(Readable):
    """One release in a comparison: its name, cell key, what each factor is, and its metrics' summary."""

    name: str
    cell: str
    factors: dict[str, Any] = Field(default_factory=dict)
    summary: dict[str, Any] = Field(default_factory=dict)


class Comparison(Versioned):
    """What changed from release ``a`` to ``b`` and what caused it: ``envrigger ledger compare``'s result (and its ``--format json``).

    ``attribution`` maps each metric to its change with a paired bootstrap interval and each
    changed factor's Shapley share; ``cells`` lists every cross cell played or reused.
    """

    CURRENT = 1
    a: Side
    b: Side
    changed: list[str]
    cells: list[dict[str, Any]]
    attribution: dict[str, Any]
    headline: str
    findings: list[dict[str, Any]] = Field(default_factory=list)
    tasks: int
    resamples: int
    seed: int


def compare(
    ledger: Ledger, a: str, b: str, evaluate: bool = True, concurrency: int = 1, prices: dict[str, tuple[float, float]] | None = None,
    resamples: int = 2000, seed: int = 0, collapse_share: float = 0.25, log: Callable[[str], None] = lambda message: None,
) -> Comparison:  # fmt: skip
    """What changed from release ``a`` to ``b`` and what caused it (evaluating missing cross cells unless ``evaluate`` is off)."""
    first, second = ledger.release(a), ledger.release(b)
    cell_a, cell_b = _cell(ledger, first["cell"]), _cell(ledger, second["cell"])
    changed = [f for f in FACTORS if cell_a.keys()[f] != cell_b.keys()[f]]
    if len(changed) > 1 and cell_a.model.kind != cell_b.model.kind:
        raise LedgerError(
            f"{a} is {_kind(cell_a)} and {b} is {_kind(cell_b)}: their models and harnesses cannot be crossed; compare releases of one kind"
        )
    cells: dict[frozenset[str], Any] = {}
    played = []
    for size in range(len(changed) + 1):
        for subset in itertools.combinations(changed, size):
            take = frozenset(subset)
            cell = cell_a.crossed(cell_b, set(take))
            known = ledger.cell(cell.key()) is not None
            if known:
                results = ledger.results(cell.key())
            else:
                if not evaluate:
                    raise LedgerError(
                        f"the cell with {', '.join(sorted(take))} from {b} and the rest from {a} was never evaluated; "
                        "run compare without --no-eval to play it"
                    )
                log(f"evaluating the cross cell: {', '.join(f'{f} of {b if f in take else a}' for f in FACTORS)}")
                results, run = evaluate_cell(ledger, cell, concurrency=concurrency, prices=prices)
                ledger.add_cell(cell, results, run)
            played.append({"from_b": sorted(take), "cell": cell.key(), "reused": known})
            cells[take] = results
    summary_a, summary_b = summarize(cells[frozenset()]), summarize(cells[frozenset(changed)])
    attribution = attribute(cells, changed, resamples=resamples, seed=seed) if changed else {}
    findings = [f for f in [collapse(summary_a, summary_b, collapse_share)] if f is not None]
    return Comparison(
        schema_version=Comparison.CURRENT,
        a=Side(name=a, cell=cell_a.key(), factors=_described(cell_a), summary=summary_a),
        b=Side(name=b, cell=cell_b.key(), factors=_described(cell_b), summary=summary_b),
        changed=changed,
        cells=played,
        attribution=attribution,
        headline=headline(attribution, changed) if changed else f"{a} and {b} are the same model, harness and environment",
        findings=findings,
        tasks=len(ledger.tasks()),
        resamples=resamples,
        seed=seed,
    )


def _cell(ledger: Ledger, key: str) -> Cell:
    return ledger.stored_cell(key)[0]


def _kind(cell: Cell) -> str:
    return "a model behind an endpoint" if cell.model.kind == "endpoint" else "a Python policy"


def _described(cell: Cell) -> dict[str, str]:
    return {name: getattr(cell, name).describe() for name in FACTORS}
