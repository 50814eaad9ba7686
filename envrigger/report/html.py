"""The diagnosis as one self-contained HTML page: :func:`render_html`.

The page is ``templates/diagnosis.html.j2``, rendered by jinja2 with autoescape on, with
plots and frame strips embedded as data, so the file stands alone.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from jinja2 import Environment, select_autoescape

from envrigger.data import TrajectoryStore
from envrigger.diagnose import Diagnosis
from envrigger.report.plots import finding_plots, plots

TEMPLATE = resources.files("envrigger.report").joinpath("templates/diagnosis.html.j2").read_text(encoding="utf-8")


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
    from envrigger.report.frames import finding_frames

    strips = finding_frames(diagnosis, store)
    from envrigger.report.transcripts import finding_transcripts

    chats = finding_transcripts(diagnosis, store)
    tries = {f.name: f.what_to_try for f in diagnosis.findings}
    return env.from_string(TEMPLATE).render(
        d=diagnosis, figures=plots(store), finding_figures=finding_plots(diagnosis), words=words, pct=pct, brief=brief, strips=strips,
        chats=chats, tries=tries,
    )  # fmt: skip
