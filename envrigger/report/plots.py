"""The report's figures: matplotlib plots as base64 PNG data.

Contains :func:`plots` (success by level feature, episode lengths by verdict) and
:func:`finding_plots` (each finding against the feature that explains it).
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

from envrigger.data import TrajectoryStore
from envrigger.diagnose import Diagnosis
from envrigger.diagnose.frame import EpisodeFrame


def figure_png(figure: Any) -> str:
    """A matplotlib figure as base64 PNG (what an HTML page embeds); the figure is closed."""
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
        # Constrained layout makes room for the overall title above the panel titles (they overlapped).
        fig, axes = plt.subplots(1, len(features), figsize=(3.2 * len(features), 2.8), squeeze=False, layout="constrained")
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
        out["features"] = figure_png(fig)
    fig, ax = plt.subplots(figsize=(6, 2.8))
    top = max(int(frame.length.max()), 1)
    bins = np.linspace(0, top, min(40, top) + 1).tolist()
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
    out["lengths"] = figure_png(fig)
    return out


def finding_plots(diagnosis: Diagnosis) -> dict[str, str]:
    """Base64 PNGs per finding: its rate by the level feature that explains it, and its condition's feature, failing vs successful states."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, str] = {}
    for f in diagnosis.findings:
        by, condition = f.stats.get("by_feature"), f.stats.get("condition") or {}
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
        out[f.name] = figure_png(fig)
    return out
