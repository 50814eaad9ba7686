"""Which flags are findings: contrast with successes, and merging flags that cover the same episodes.

Contains :func:`contrast` (a behaviour's lift in failures over successes), :func:`explains_failure`
and :func:`note_reading` (finding or style note, and why), :func:`merge_duplicates` (one
finding per set of episodes among regions and costs) and :func:`merge_symptoms` (behaviours
and endings on the same episodes become one finding with symptoms).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from envrigger.diagnose.config import DiagnoseConfig
from envrigger.diagnose.flags import Flag
from envrigger.diagnose.frame import EpisodeFrame


def contrast(mask: np.ndarray, success: np.ndarray) -> dict[str, Any]:
    """How much more often ``mask`` holds in failed episodes than in successful ones: the lift and its 95% interval.

    The lift is the ratio of the two rates, each with half an episode added (so it stays
    finite); the interval is Katz's, on the log scale.

    Example:
        >>> failed = np.array([True] * 10 + [False] * 10)
        >>> c = contrast(failed.copy(), ~failed)
        >>> round(c["lift"], 1), c["lift_ci"][0] > 1
        (21.0, True)
    """
    failed = ~success
    a, n1 = float((mask & failed).sum()), float(failed.sum())
    c, n2 = float((mask & success).sum()), float(success.sum())
    if n1 == 0 or n2 == 0:
        return {"rate_in_failures": a / n1 if n1 else None, "rate_in_successes": c / n2 if n2 else None, "lift": None, "lift_ci": None}
    p1, p2 = (a + 0.5) / (n1 + 0.5), (c + 0.5) / (n2 + 0.5)
    lift = p1 / p2
    se = math.sqrt(max((1 - p1) / (a + 0.5) + (1 - p2) / (c + 0.5), 0.0))
    return {
        "rate_in_failures": a / n1,
        "rate_in_successes": c / n2,
        "lift": lift,
        "lift_ci": (lift * math.exp(-1.96 * se), lift * math.exp(1.96 * se)),
    }


def note_reading(stats: dict[str, Any] | None, config: DiagnoseConfig) -> str:
    """Why a behaviour is a note and not a finding, as one word a report can show.

    ``inconclusive``: more common in failures at the point estimate, but the lift's interval
    reaches ``contrast_min_lift`` (too few episodes to tell); ``style``: about as common in
    successes as in failures; ``never_fails``: it never comes with a failure.

    Example:
        >>> note_reading({"rate_in_failures": 1.0, "lift": 11.0, "lift_ci": (0.78, 154.0)}, DiagnoseConfig())
        'inconclusive'
        >>> note_reading({"rate_in_failures": 0.5, "lift": 1.1, "lift_ci": (0.7, 1.6)}, DiagnoseConfig())
        'style'
    """
    if not stats or not stats.get("rate_in_failures"):
        return "never_fails"
    lift = stats.get("lift")
    return "inconclusive" if lift is not None and lift > max(config.contrast_min_lift, 1.0) * 1.5 else "style"


def explains_failure(flag: Flag, frame: EpisodeFrame, config: DiagnoseConfig) -> bool:
    """Whether a behaviour is a finding rather than a style note (see :class:`DiagnoseConfig`); other kinds always are."""
    if flag.kind != "behaviour":
        return True
    failed = ~frame.success
    if not (flag.mask & failed).any():
        return False  # it never comes with a failure
    if frame.success.sum() < config.contrast_min_successes:
        return True  # too few successes to contrast with: reported as it is, its stats say so
    ci = flag.stats["contrast"]["lift_ci"]
    return ci is not None and ci[0] > config.contrast_min_lift


def merge_duplicates(flags: list[Flag], frame: EpisodeFrame, config: DiagnoseConfig) -> list[Flag]:
    """One finding per set of episodes: level regions (confounded features) and costs that flag the same episodes.

    Within each kind (regions; costs), flags are taken clearest first (a region by its
    z statistic, a cost's step events before its return gap); one whose episodes a kept one
    flags too, ``duplicate_overlap`` of them at least, is dropped and named in the kept one's
    ``also_explained_by``: a confounded feature explains no failure the clearer one does not.
    Endings, levels and behaviours are different views of the same episodes and all stay.
    """
    out: list[Flag] = []
    groups: dict[str, list[Flag]] = {}
    for c in flags:
        if c.kind in ("region", "cost"):
            groups.setdefault(c.kind, []).append(c)
        else:
            out.append(c)
    for kind, group in groups.items():
        # A cost's step events say more than the return gap they cause: costly_event first.
        clearest = sorted(
            group, key=lambda c: -c.stats.get("z", 0.0) if kind == "region" else (c.name != "costly_event", -(c.severity or 0))
        )
        kept: list[Flag] = []
        for c in clearest:
            twin = next((k for k in kept if _covered(c.mask, k.mask) >= config.duplicate_overlap), None)
            if twin is None:
                kept.append(c)
            else:
                twin.stats.setdefault("also_explained_by", []).append(c.title if kind == "region" else c.name)
        out.extend(kept)
    return out


MODEL_REPLIES = frozenset({"malformed_output", "verbose_output"})  # what an LLM agent's model itself answered
CONDITIONS = frozenset({"context_truncated", "slow_calls"})  # what its harness or endpoint did to it, not what it did
AGENT_LIMITS = frozenset({"terminal_cause:call_budget", "terminal_cause:wall_limit"})  # the agent's own limits cut the episode


def merge_symptoms(flags: list[Flag], frame: EpisodeFrame, config: DiagnoseConfig) -> list[Flag]:
    """One finding per behaviour: behaviours and endings that flag nearly the same episodes become one, with symptoms.

    A PPO agent pressing ``forward`` into a wall shows a no-op, a repeated action, revisits
    and a timeout on the same episodes: one behaviour, not four findings. Flags are
    taken strongest first (an ending the env names, such as lava or a failed submit, then
    what an LLM agent's model replied (:data:`MODEL_REPLIES`), then a behaviour, then what its
    harness or endpoint did to it (:data:`CONDITIONS`), then an ending that only says how the
    episode stopped, such as a timeout, giving up or the agent's own call budget; within each, the larger share of failures covered, then the larger lower end
    of the lift's interval); one whose episodes and a kept one's each cover ``symptom_overlap`` of the
    other's joins the kept one as a symptom (``stats["symptoms"]``), keeping the kept one's
    statistics. Flags below the support thresholds take no part.
    """
    failed = ~frame.success
    failures = max(int(failed.sum()), 1)

    def supported(c: Flag) -> bool:
        hits = int(c.mask.sum())
        return hits >= config.min_episodes and hits / max(frame.n, 1) >= config.min_rate

    def strength(c: Flag) -> tuple:
        # What ended the episode, where the env says (lava, a failed submit), names it best; then what
        # the model itself replied (a reply that names no action wastes the turn the other behaviours
        # then show); then the behaviour; then what the harness or the endpoint did to the agent
        # (its context cut, slow calls); an ending that says only how it stopped (a timeout, giving
        # up, the agent's own call budget or wall limit) is a symptom.
        told = (c.name.startswith("terminal_cause:") and c.name not in AGENT_LIMITS) or c.name == "episode_error"
        lift = (c.stats.get("contrast") or {}).get("lift_ci") or [0.0, 0.0]
        if c.kind == "behaviour":
            rank = 1 if c.name in MODEL_REPLIES else 3 if c.name in CONDITIONS else 2
        else:
            rank = 0 if told else 4
        return (
            rank,
            -round(int((c.mask & failed).sum()) / failures, 9),
            -float(lift[0]),
            c.name,
        )

    mergeable = sorted((c for c in flags if c.kind in ("behaviour", "ending") and supported(c)), key=strength)
    kept: list[Flag] = []
    merged: set[int] = set()
    for c in mergeable:
        twin = next(
            (k for k in kept if min(_covered(c.mask, k.mask), _covered(k.mask, c.mask)) >= config.symptom_overlap),
            None,
        )
        if twin is None:
            kept.append(c)
            continue
        merged.add(id(c))
        symptom = {"name": c.name, "title": c.title, "episodes": int(c.mask.sum()), "shared": int((c.mask & twin.mask).sum())}
        if "contrast" in c.stats:
            symptom["contrast"] = c.stats["contrast"]
        twin.stats.setdefault("symptoms", []).append(symptom)
    return [c for c in flags if id(c) not in merged]


def _covered(a: np.ndarray, by: np.ndarray) -> float:
    """The share of ``a``'s episodes that ``by`` flags too."""
    size = int(a.sum())
    return int((a & by).sum()) / size if size else 1.0
