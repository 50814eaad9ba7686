"""Ledgers: every release of an agent measured on one fixed held-out task set, and each change attributed to its cause.

A release is a model (an endpoint and model name, or a Python policy), a harness (an agent
harness, or ``direct``) and an environment (the spec it faces); each is a ledger of its
own. :class:`Ledger` holds the held-out tasks, drawn once when it is made
(:func:`draw_tasks`), and every evaluated cell with its per-task results;
:func:`evaluate_cell` plays a cell; :func:`compare` names what changed between two
releases and splits the change among model, harness and environment (Shapley values with
paired bootstrap intervals over tasks), playing the missing cross cells; :func:`render_report`
writes the one-page HTML report. See docs/ledgers.md.
"""

from envrigger.diagnose.diversity import collapse
from envrigger.ledger.attribution import METRICS, attribute, headline, shapley, summarize
from envrigger.ledger.compare import Comparison, compare
from envrigger.ledger.evaluate import check_env, definitions, draw_tasks, evaluate_cell, loop_levels
from envrigger.ledger.factors import FACTORS, Cell, EnvFactor, HarnessFactor, ModelFactor
from envrigger.ledger.report import render_report
from envrigger.ledger.store import Ledger, TaskResult

__all__ = [
    "FACTORS",
    "METRICS",
    "Cell",
    "EnvFactor",
    "HarnessFactor",
    "Ledger",
    "ModelFactor",
    "TaskResult",
    "attribute",
    "check_env",
    "collapse",
    "Comparison",
    "compare",
    "definitions",
    "draw_tasks",
    "evaluate_cell",
    "headline",
    "loop_levels",
    "render_report",
    "shapley",
    "summarize",
]
