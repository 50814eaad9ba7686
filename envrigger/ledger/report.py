"""The ledger as one self-contained HTML page: :func:`render_report`.

Releases over time (the accepted-task rate with its interval), the three ledgers side by
side with every metric, the attribution of each change between consecutive releases (bars
with intervals, from cells already evaluated; a pair whose cross cells are missing says
which `compare` to run), and the behaviour-diversity curve. jinja2 with autoescape on, the
plots embedded as PNG data.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from jinja2 import Environment, select_autoescape

from envrigger.errors import LedgerError
from envrigger.ledger.attribution import METRICS, summarize
from envrigger.ledger.compare import compare
from envrigger.ledger.evaluate import definitions
from envrigger.ledger.factors import FACTORS
from envrigger.ledger.store import Ledger
from envrigger.report.plots import figure_png

TEMPLATE = resources.files("envrigger.ledger").joinpath("templates/ledger.html.j2").read_text(encoding="utf-8")


def report_data(ledger: Ledger, resamples: int = 2000) -> dict[str, Any]:
    """What the page shows: each release with its factors and metrics, and each consecutive pair's attribution."""
    releases = []
    for release in ledger.releases():
        cell = ledger.stored_cell(release["cell"])[0]
        releases.append({
            **release,
            "factors": {name: getattr(cell, name).describe() for name in FACTORS},
            "keys": cell.keys(),
            "summary": summarize(ledger.results(release["cell"])),
        })  # fmt: skip
    pairs: list[Any] = []  # a Comparison, or what is missing for one
    for before, after in zip(releases, releases[1:]):
        try:
            pairs.append(compare(ledger, before["name"], after["name"], evaluate=False, resamples=resamples))
        except LedgerError:
            missing = f"a cross cell is not evaluated yet; run `envrigger ledger compare {ledger.path.name} {before['name']} {after['name']}` to play it"
            pairs.append({"a": {"name": before["name"]}, "b": {"name": after["name"]}, "missing": missing})
    return {"releases": releases, "pairs": pairs}


def _figures(data: dict[str, Any]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    releases = data["releases"]
    out: dict[str, str] = {}
    if not releases:
        return out
    names = [r["name"] for r in releases]
    x = list(range(len(releases)))
    rate = [r["summary"]["accepted"] for r in releases]
    lo = [r["summary"]["accepted"] - r["summary"]["accepted_ci"][0] for r in releases]
    hi = [r["summary"]["accepted_ci"][1] - r["summary"]["accepted"] for r in releases]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.errorbar(x, rate, yerr=[lo, hi], marker="o", capsize=4, color="#4a7ab8")
    ax.set_xticks(x, names, rotation=20, fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_ylabel("accepted tasks (%)")
    ax.set_title("accepted-task rate by release (95% Wilson interval)", fontsize=10)
    out["releases"] = figure_png(fig)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 2.6))
    left.plot(x, [r["summary"]["distinct_actions"] for r in releases], marker="o", color="#4a7ab8")
    left.set_ylim(0, 105)
    left.set_title("tasks with an action sequence of their own (%)", fontsize=9)
    right.plot(x, [r["summary"]["visit_entropy"] for r in releases], marker="s", color="#b85a4a")
    right.set_ylim(bottom=0)
    right.set_title("state-visit entropy (bits)", fontsize=9)
    for ax in (left, right):
        ax.set_xticks(x, names, rotation=20, fontsize=8)
    out["diversity"] = figure_png(fig)
    for index, pair in enumerate(data["pairs"]):
        if "attribution" not in pair or not pair["changed"]:
            continue
        entry = pair["attribution"]["accepted"]
        values = [entry["factors"].get(f, {"value": 0.0})["value"] or 0.0 for f in FACTORS]
        errors = [[0.0, 0.0] for _ in FACTORS]
        for i, f in enumerate(FACTORS):
            ci = entry["factors"].get(f, {}).get("ci")
            if ci:
                errors[i] = [max(values[i] - ci[0], 0.0), max(ci[1] - values[i], 0.0)]
        fig, ax = plt.subplots(figsize=(5, 2.0))
        colors = ["#4a7ab8" if f in pair["changed"] else "#cccccc" for f in FACTORS]
        ax.barh(list(FACTORS), values, xerr=[[e[0] for e in errors], [e[1] for e in errors]], color=colors, capsize=4)
        ax.axvline(0, color="#555", linewidth=0.8)
        ax.set_xlabel("accepted-task rate change (points)", fontsize=8)
        ax.set_title(f"{pair['a']['name']} -> {pair['b']['name']}", fontsize=9)
        out[f"pair-{index}"] = figure_png(fig)
    return out


def render_report(ledger: Ledger, resamples: int = 2000) -> str:
    """The whole ledger report as one HTML page."""
    data = report_data(ledger, resamples)
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    shown = lambda value, digits=1: "-" if value is None else f"{value:.{digits}f}"  # noqa: E731
    signed = lambda value: "-" if value is None else f"{value:+.1f}"  # noqa: E731
    return env.from_string(TEMPLATE).render(
        ledger=ledger, env_id=ledger.env.env_id, tasks=ledger.tasks(), data=data, figures=_figures(data), metrics=METRICS,
        definitions=definitions(), factors=FACTORS, shown=shown, signed=signed,
    )  # fmt: skip
