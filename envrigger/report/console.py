"""The diagnosis in the terminal: :func:`findings_table`, a rich table of the findings ranked by severity."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from envrigger.diagnose import Diagnosis

LEVEL_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}


def findings_table(diagnosis: Diagnosis) -> Table:
    """The findings ranked by severity, one row each, with their best evidence."""
    table = Table(
        title=f"{diagnosis.run}: {diagnosis.episodes} episodes, {diagnosis.steps} steps, "
        f"success {diagnosis.success_rate:.2f} [{diagnosis.success_ci[0]:.2f}, {diagnosis.success_ci[1]:.2f}]"
    )
    for column in ("severity", "weakness", "what happens", "rate [95% CI]", "evidence (episode: steps)"):
        table.add_column(column, overflow="fold")
    for f in diagnosis.findings:
        evidence = ", ".join(f"{e.episode_id}: {e.start}-{e.end}" for e in f.evidence[:3])
        table.add_row(
            f"[{LEVEL_STYLE[f.level]}]{f.level} {f.severity:.2f}[/]",
            escape(f.name),
            escape(f.title),
            f"{f.rate:.2f} [{f.rate_ci[0]:.2f}, {f.rate_ci[1]:.2f}] ({f.episodes}/{f.total})",
            escape(evidence),
        )
    if not diagnosis.findings:
        table.add_row("-", "none", "no recurring weakness above the thresholds", "", "")
    return table
