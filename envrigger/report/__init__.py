"""Reports of a diagnosis (a rich table for the terminal and a self-contained HTML page) and of a loop run.

- :mod:`~envrigger.report.console`: :func:`findings_table`;
- :mod:`~envrigger.report.plots`: :func:`plots` and :func:`finding_plots`;
- :mod:`~envrigger.report.frames`: frame strips of evidence, replayed from spec, seed and actions;
- :mod:`~envrigger.report.html`: :func:`render_html` and its template, ``templates/diagnosis.html.j2``;
- :mod:`~envrigger.report.run`: the report of a loop run (``RUN/report.html``), :func:`write_run_report`.
"""

from envrigger.report.console import findings_table
from envrigger.report.html import render_html
from envrigger.report.plots import finding_plots, plots

__all__ = ["finding_plots", "findings_table", "plots", "render_html"]
