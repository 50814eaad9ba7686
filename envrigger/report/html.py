"""Reports of a diagnosis: a rich table for the terminal and a self-contained HTML page.

Contains :func:`findings_table`, :func:`plots` and :func:`finding_plots` (matplotlib
figures as PNG data; frame strips come from :mod:`envrigger.frames`) and :func:`render_html` (jinja2, autoescaped; plots embedded, so the file stands alone).
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np
from jinja2 import Environment, select_autoescape
from rich.markup import escape
from rich.table import Table

from envrigger.diagnose import Diagnosis
from envrigger.diagnose.detectors import EpisodeFrame
from envrigger.trajectory import TrajectoryStore

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


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def plots(store: TrajectoryStore, max_features: int = 6) -> dict[str, str]:
    """Base64 PNGs: success rate by each level feature, and episode lengths split by verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = EpisodeFrame.load(store)
    out: dict[str, str] = {}
    features = [(k, v) for k, v in frame.features.items() if len(np.unique(v[~np.isnan(v)])) > 1][:max_features]
    if features:
        fig, axes = plt.subplots(1, len(features), figsize=(3.2 * len(features), 2.8), squeeze=False)
        for ax, (name, values) in zip(axes[0], features):
            known = ~np.isnan(values)
            distinct = np.unique(values[known])
            edges = distinct if len(distinct) <= 12 else np.unique(np.quantile(values[known], np.linspace(0, 1, 9)))
            bins = np.clip(np.searchsorted(edges, values[known], side="right") - 1, 0, len(edges) - 1)
            rates = [frame.success[known][bins == b].mean() if (bins == b).any() else np.nan for b in range(len(edges))]
            counts = [int((bins == b).sum()) for b in range(len(edges))]
            ax.bar(range(len(edges)), rates, color="#4a7ab8")
            ax.set_xticks(range(len(edges)), [f"{e:g}" for e in edges], rotation=45, fontsize=7)
            ax.set_ylim(0, 1)
            ax.set_title(name, fontsize=9)
            for x, (r, c) in enumerate(zip(rates, counts)):
                if c:
                    ax.text(x, min(r + 0.03, 0.95) if not np.isnan(r) else 0.03, str(c), ha="center", fontsize=6)
        axes[0][0].set_ylabel("success rate")
        fig.suptitle("success rate by level feature (bar labels: episodes)", fontsize=10)
        out["features"] = _png(fig)
    fig, ax = plt.subplots(figsize=(6, 2.8))
    top = max(int(frame.length.max()), 1)
    bins = np.linspace(0, top, min(40, top) + 1)
    ax.hist(
        [frame.length[frame.success], frame.length[~frame.success]],
        bins=bins,
        stacked=True,
        label=["success", "failure"],
        color=["#3c9a5f", "#c8553d"],
    )
    ax.set_xlabel("episode length (steps)")
    ax.set_ylabel("episodes")
    ax.legend(fontsize=8)
    ax.set_title("episode length by verdict", fontsize=10)
    out["lengths"] = _png(fig)
    return out


def finding_plots(diagnosis: Diagnosis) -> dict[str, str]:
    """Base64 PNGs per finding: its rate by the level feature that explains it, and its condition's feature, failing vs successful states."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, str] = {}
    for f in diagnosis.findings:
        by, condition = f.stats.get("by_feature"), f.stats.get("condition")
        panels = [p for p in (by, condition and condition.get("histogram")) if p]
        if not panels:
            continue
        fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 2.6), squeeze=False)
        for ax, panel in zip(axes[0], panels):
            if panel is by:
                ax.bar(range(len(by["values"])), by["rate"], color="#c8553d")
                ax.set_xticks(range(len(by["values"])), [f"{v:g}" for v in by["values"]], rotation=45, fontsize=7)
                ax.set_ylim(0, 1)
                ax.set_title(f"rate by {by['feature']}", fontsize=9)
                ax.set_ylabel("episodes with it", fontsize=8)
            else:
                edges = np.asarray(panel["edges"])
                if len(edges) < 2:
                    continue
                ax.stairs(panel["success"], edges, label="successful episodes", color="#3c9a5f")
                ax.stairs(panel["failing"], edges, label="before the failures", color="#c8553d")
                for clause in condition["clauses"][:1]:
                    ax.axvline(clause["threshold"], color="#222", linestyle="--", linewidth=1)
                ax.set_title(f"{panel['feature']} of the states acted on", fontsize=9)
                ax.legend(fontsize=6)
        out[f.name] = _png(fig)
    return out


TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>envrigger diagnosis: {{ d.run }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .9rem; }
td, th { border: 1px solid #ccc; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } .high { color: #b00020; font-weight: bold; } .medium { color: #a36b00; } .low { color: #777; }
code { font-size: .85rem; } img { max-width: 100%; } section { border-top: 1px solid #ddd; margin-top: 1.5rem; }
.strip figure { display: inline-block; margin: 0 .4rem .4rem 0; text-align: center; font-size: .8rem; }
.strip img { border: 1px solid #ccc; image-rendering: pixelated; }
</style></head><body>
<h1>Diagnosis of <code>{{ d.run }}</code>{% if d.env_id %} ({{ d.env_id }}){% endif %}</h1>
{% for note in d.notes %}<p class="medium">Note: {{ note }}</p>{% endfor %}
<p>{{ d.episodes }} episodes, {{ d.steps }} steps; success rate {{ "%.2f"|format(d.success_rate) }}
(95% CI {{ "%.2f"|format(d.success_ci[0]) }}–{{ "%.2f"|format(d.success_ci[1]) }}), {{ d.failures }} failures.
Policies: {{ d.policies|join(", ") }}. Specs: {{ d.spec_hashes|join(", ") }}.</p>
<h2>Findings, by severity</h2>
{% if d.findings %}
<table><tr><th>severity</th><th>weakness</th><th>what happens</th><th>rate (95% CI)</th><th>affected</th></tr>
{% for f in d.findings %}<tr><td class="{{ f.level }}">{{ f.level }} {{ "%.2f"|format(f.severity) }}</td>
<td><a href="#{{ f.name }}"><code>{{ f.name }}</code></a></td><td>{{ f.title }}</td>
<td>{{ "%.2f"|format(f.rate) }} ({{ "%.2f"|format(f.rate_ci[0]) }}–{{ "%.2f"|format(f.rate_ci[1]) }})</td>
<td>{{ f.episodes }}/{{ f.total }}</td></tr>{% endfor %}
</table>
{% else %}<p>No recurring weakness above the thresholds.</p>{% endif %}
{% if d.style_notes %}<h2>Style notes</h2>
<p>Behaviours as common in successful episodes as in failed ones: how this agent plays, not why it fails.</p>
<table><tr><th>behaviour</th><th>what happens</th><th>in failures</th><th>in successes</th></tr>
{% for f in d.style_notes %}<tr><td><code>{{ f.name }}</code></td><td>{{ f.title }}</td>
<td>{{ pct(f.stats.contrast.rate_in_failures) }}</td><td>{{ pct(f.stats.contrast.rate_in_successes) }}</td></tr>{% endfor %}
</table>{% endif %}
<h2>Plots</h2>
{% for name, png in figures.items() %}<p><img alt="{{ name }}" src="data:image/png;base64,{{ png }}"></p>{% endfor %}
{% for f in d.findings %}<section id="{{ f.name }}"><h3><code>{{ f.name }}</code>: {{ f.title }}</h3>
<p>Severity {{ "%.2f"|format(f.severity) }} (share of all failures), {{ f.failures }} failed of {{ f.episodes }} affected.
{% if f.stats.condition %}<br>Condition: <b>{{ f.stats.condition.rule }}</b> (precision {{ "%.2f"|format(f.stats.condition.precision) }},
recall {{ "%.2f"|format(f.stats.condition.recall) }}, {{ f.stats.condition.support }} states), from the states acted on before
each failure against states of successful episodes.{% endif %}
{% if f.stats.contrast and f.stats.contrast.lift %}<br>In {{ pct(f.stats.contrast.rate_in_failures) }} of failed and
{{ pct(f.stats.contrast.rate_in_successes) }} of successful episodes (lift {{ "%.1f"|format(f.stats.contrast.lift) }},
95% CI {{ "%.1f"|format(f.stats.contrast.lift_ci[0]) }}–{{ "%.1f"|format(f.stats.contrast.lift_ci[1]) }}).{% endif %}
{% if f.stats %}<br>Statistics: <code>{{ f.stats|tojson }}</code>{% endif %}</p>
{% if f.name in finding_figures %}<p><img alt="{{ f.name }} by the feature that explains it" src="data:image/png;base64,{{ finding_figures[f.name] }}"></p>{% endif %}
{% for strip in strips.get(f.name, []) %}<div class="strip"><p>Episode {{ strip.episode_id }}, steps {{ strip.start }}–{{ strip.end }}, replayed from its spec, seed and actions:</p>
{% for t, png in strip.frames %}<figure><img alt="episode {{ strip.episode_id }} after step {{ t }}" src="data:image/png;base64,{{ png }}">
<figcaption>{% if t < 0 %}start{% else %}after step {{ t }}{% endif %}</figcaption></figure>{% endfor %}</div>{% endfor %}
{% for e in f.evidence %}<h4>episode {{ e.episode_id }}{% if e.seed is not none %} (seed {{ e.seed }}){% endif %}, steps {{ e.start }}–{{ e.end }}</h4>
{% if e.excerpt %}<table><tr><th>t</th><th>action</th><th>reward</th><th>blocked</th><th>state</th><th>info</th></tr>
{% for s in e.excerpt %}{% if not loop.first and s.t > e.excerpt[loop.index0 - 1].t + 1 %}<tr><td colspan="6">… {{ s.t - e.excerpt[loop.index0 - 1].t - 1 }} steps …</td></tr>{% endif %}
<tr><td>{{ s.t }}</td><td><code>{{ words.action(s.action) }}</code></td><td>{{ "%.3g"|format(s.reward) }}</td>
<td>{{ s.blocked or "" }}</td><td><code>{{ brief(s.state) }}</code></td><td><code>{{ s.info|tojson }}</code></td></tr>{% endfor %}
</table>{% endif %}{% endfor %}</section>{% endfor %}
</body></html>
"""


def render_html(diagnosis: Diagnosis, store: TrajectoryStore) -> str:
    """The whole report as one HTML page (plots inline, everything user-supplied escaped)."""
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    env.policies["json.dumps_kwargs"] = {"sort_keys": True}
    from envrigger.diagnose.vocabulary import Vocabulary

    words = Vocabulary(actions=tuple(diagnosis.action_names), env_id=diagnosis.env_id)
    pct = lambda x: "-" if x is None else f"{x:.0%}"  # noqa: E731

    def rounded(value: Any) -> Any:
        if isinstance(value, float):
            return float(f"{value:.4g}")
        return [rounded(v) for v in value] if isinstance(value, list) else value

    brief = lambda value: json.dumps(rounded(value))  # noqa: E731 - states to 4 significant digits
    from envrigger.frames import finding_frames

    strips = finding_frames(diagnosis, store)
    return env.from_string(TEMPLATE).render(
        d=diagnosis, figures=plots(store), finding_figures=finding_plots(diagnosis), words=words, pct=pct, brief=brief, strips=strips
    )


__all__ = ["finding_plots", "findings_table", "plots", "render_html"]
