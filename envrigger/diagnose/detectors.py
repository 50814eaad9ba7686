"""Detectors: from per-episode facts to findings.

Contains :class:`DiagnoseConfig` (every threshold, with its default), :class:`EpisodeFrame`
(the episodes table as numpy columns), the episode-level detectors (timeouts, terminal
causes, feature regions, reward without success, tool errors and retries, variance across
seeds) and the step-level ones (loops, revisits, no-ops, repeated and blocked actions),
each returning :class:`Candidate` flags that :func:`to_finding` turns into findings.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envrigger.data import TrajectoryStore
from envrigger.diagnose.model import Evidence, Finding, wilson
from envrigger.diagnose.steps import StepStats


@dataclass(frozen=True)
class DiagnoseConfig:
    """Thresholds of the detectors. A finding needs ``min_episodes`` and ``min_rate``.

    A behaviour (loops, no-ops, repeats, blocked actions, tool errors) is a finding only if,
    given at least ``contrast_min_successes`` successes, the lower end of its lift's 95%
    interval (its rate in failed episodes over its rate in successful ones) exceeds
    ``contrast_min_lift``; otherwise it is a style note. A level region (or a cost) whose
    episodes a clearer one flags too, ``duplicate_overlap`` of them, is not a finding of its own.
    Behaviours and endings that flag nearly the same episodes (each covers ``symptom_overlap``
    of the other's) are one behaviour seen several ways: one finding, the others its symptoms.
    """

    min_episodes: int = 3
    min_rate: float = 0.05
    evidence: int = 5
    loop_min_steps: int = 6
    loop_min_share: float = 0.2
    revisit_min_steps: int = 10
    revisit_min_share: float = 0.6
    noop_min_steps: int = 4
    noop_min_share: float = 0.2
    repeat_min_run: int = 8
    blocked_min_steps: int = 1
    region_min_support: float = 0.1
    region_min_episodes: int = 10
    region_max_p: float = 0.01
    region_min_lift: float = 1.25
    variance_min_episodes: int = 4
    variance_min: float = 0.09
    contrast_min_successes: int = 5
    contrast_min_lift: float = 1.0
    return_gap_min: float = 0.5
    giving_up_max_share: float = 0.5  # an ending the agent chose, having used at most this share of its step limit
    duplicate_overlap: float = 0.9
    symptom_overlap: float = 0.8  # behaviours and endings flagging (both ways) this share of each other's episodes: one finding
    batch_size: int = 262_144

    def step_flags(self) -> dict[str, tuple[str, int, float]]:
        """Step detector -> (count, minimum count, minimum share of the episode)."""
        return {
            "loop": ("cycle", self.loop_min_steps, self.loop_min_share),
            "revisit": ("revisit", self.revisit_min_steps, self.revisit_min_share),
            "noop_action": ("noop", self.noop_min_steps, self.noop_min_share),
            "repeated_action": ("max_repeat", self.repeat_min_run, 0.0),
            "blocked_action": ("blocked", self.blocked_min_steps, 0.0),
            "tool_error": ("tool_error", 1, 0.0),
            "retry": ("retry", 1, 0.0),
            "costly_event": ("costly", 1, 0.0),
        }


@dataclass
class EpisodeFrame:
    """The episodes table as numpy columns, sorted by episode id."""

    episode_id: np.ndarray
    seed: np.ndarray
    spec_hash: np.ndarray
    policy_id: np.ndarray
    length: np.ndarray
    ret: np.ndarray
    success: np.ndarray
    reason: np.ndarray
    terminal_cause: np.ndarray
    tool_errors: np.ndarray
    retries: np.ndarray
    level_id: np.ndarray
    features: dict[str, np.ndarray] = field(default_factory=dict)
    # An LLM agent's model calls per episode (-1 where the run has none).
    model_calls: np.ndarray | None = None
    parse_failures: np.ndarray | None = None
    truncated_steps: np.ndarray | None = None
    output_tokens: np.ndarray | None = None
    latency_s: np.ndarray | None = None
    # How episodes ended, in the adapter's terms (-1 / False where the run does not say).
    step_limit: np.ndarray | None = None
    agent_ended: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.episode_id)

    @classmethod
    def load(cls, store: TrajectoryStore) -> EpisodeFrame:
        table = store.episodes_table()
        table = table.sort_by("episode_id")
        col = lambda name: table.column(name).to_numpy(zero_copy_only=False)
        nullable_int = lambda name: np.asarray(table.column(name).fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
        features: dict[str, np.ndarray] = {}
        maps = table.column("level_features").combine_chunks()
        if len(maps) and len(maps.keys):
            keys = maps.keys.to_numpy(zero_copy_only=False)
            values = maps.items.to_numpy(zero_copy_only=False).astype(np.float64)
            offsets = maps.offsets.to_numpy()
            rows = np.repeat(np.arange(len(maps)), np.diff(offsets))
            for name in sorted(set(keys.tolist())):
                column = np.full(len(maps), np.nan)
                hit = keys == name
                column[rows[hit]] = values[hit]
                features[name] = column
        return cls(
            episode_id=col("episode_id"),
            seed=nullable_int("seed"),
            spec_hash=col("spec_hash"),
            policy_id=col("policy_id"),
            length=col("length"),
            ret=col("return"),
            success=col("success").astype(bool),
            reason=col("reason"),
            terminal_cause=col("terminal_cause"),
            tool_errors=nullable_int("tool_errors"),
            retries=nullable_int("retries"),
            level_id=col("level_id"),
            features=features,
            **{
                name: nullable_int(name) if name in table.column_names else np.full(table.num_rows, -1, dtype=np.int64)
                for name in ("model_calls", "parse_failures", "truncated_steps", "output_tokens")
            },
            latency_s=(
                np.asarray(table.column("latency_s").fill_null(np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)
                if "latency_s" in table.column_names
                else np.full(table.num_rows, np.nan)
            ),
            step_limit=nullable_int("step_limit") if "step_limit" in table.column_names else np.full(table.num_rows, -1),
            agent_ended=(
                np.asarray(table.column("agent_ended").fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
                if "agent_ended" in table.column_names
                else np.zeros(table.num_rows, dtype=bool)
            ),
        )


@dataclass
class Candidate:
    """A detector's verdict per episode (or per level), before thresholds and evidence."""

    name: str
    title: str
    mask: np.ndarray  # over episodes
    stats: dict[str, Any] = field(default_factory=dict)
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    kind: str = "ending"  # ending, region, level, behaviour (judged by contrast) or cost (in any episode)
    severity: float | None = None  # a cost's share of return lost; otherwise the share of failures covered


def cause_name(reason: str) -> str:
    """A stable weakness name from a verdict reason: ``"pole fell"`` -> ``"pole_fell"``."""
    return re.sub(r"[^a-z0-9]+", "_", str(reason).lower()).strip("_") or "unknown"


def _tail(frame: EpisodeFrame, mask: np.ndarray, k: int) -> dict[int, tuple[int, int]]:
    """The last few steps of the first ``k`` flagged episodes: where an ending happened."""
    out = {}
    for i in np.flatnonzero(mask)[:k]:
        end = max(int(frame.length[i]) - 1, 0)
        out[int(frame.episode_id[i])] = (max(end - 4, 0), end)
    return out


def _whole(frame: EpisodeFrame, mask: np.ndarray, k: int) -> dict[int, tuple[int, int]]:
    return {int(frame.episode_id[i]): (0, max(int(frame.length[i]) - 1, 0)) for i in np.flatnonzero(mask)[:k]}


# -- episode-level detectors -------------------------------------------------------------
def endings(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Candidate]:
    """Timeouts, and failures grouped by the verifier's terminal cause."""
    failed = ~frame.success
    out = []
    causes = np.array([cause_name(c) if c is not None else "unknown" for c in frame.terminal_cause], dtype=object)
    for cause in sorted(set(causes[failed].tolist())):
        mask = failed & (causes == cause)
        if cause == "timeout":
            out.append(
                Candidate("timeout", "runs out of time (truncated before success)", mask, ranges=_tail(frame, mask, config.evidence))
            )
        elif cause == "error":
            out.append(
                Candidate("episode_error", "the env or the policy raised an exception", mask, ranges=_tail(frame, mask, config.evidence))
            )
        else:
            out.append(
                Candidate(
                    f"terminal_cause:{cause}", f"fails by {cause.replace('_', ' ')}", mask, ranges=_tail(frame, mask, config.evidence)
                )
            )
    if frame.agent_ended is not None and frame.step_limit is not None:
        budget = frame.step_limit > 0
        early = budget & (frame.length <= config.giving_up_max_share * np.where(budget, frame.step_limit, 0))
        mask = failed & frame.agent_ended & early
        if mask.any():
            title = f"gives up: ends the episode itself (a submit) without success, with over {1 - config.giving_up_max_share:.0%} of its steps left"
            out.append(
                Candidate(
                    "giving_up",
                    title,
                    mask,
                    stats={"mean_share_of_budget_used": float((frame.length[mask] / frame.step_limit[mask]).mean())},
                    ranges=_tail(frame, mask, config.evidence),
                )
            )
    return out


def _one_sided_p(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def feature_regions(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Candidate]:
    """Per level feature, the threshold split whose side concentrates failure the most."""
    failed = ~frame.success
    n, total_fail = frame.n, int(failed.sum())
    if total_fail == 0 or total_fail == n:
        return []
    base = total_fail / n
    out = []
    for feature, values in sorted(frame.features.items()):
        known = ~np.isnan(values)
        distinct = np.unique(values[known])
        if len(distinct) < 2 or known.sum() < config.region_min_episodes:
            continue
        thresholds = distinct[:-1] if len(distinct) <= 33 else np.unique(np.quantile(values[known], np.linspace(0.03, 0.97, 32)))
        best = None
        for threshold in thresholds:
            for op, region in ((">", known & (values > threshold)), ("<=", known & (values <= threshold))):
                size = int(region.sum())
                rest = n - size
                if size < config.region_min_episodes or size < config.region_min_support * n or rest == 0:
                    continue
                fail_in, fail_out = int((failed & region).sum()), int((failed & ~region).sum())
                p_in, p_out = fail_in / size, fail_out / rest
                pooled = (fail_in + fail_out) / n
                se = math.sqrt(pooled * (1 - pooled) * (1 / size + 1 / rest))
                z = (p_in - p_out) / se if se > 0 else 0.0
                if best is None or z > best[0]:
                    best = (z, op, float(threshold), region, size, p_in, p_out)
        if best is None:
            continue
        z, op, threshold, region, size, p_in, p_out = best
        lift = p_in / base
        p_value = _one_sided_p(z)
        if p_value > config.region_max_p or lift < config.region_min_lift:
            continue
        mask = region & failed
        out.append(
            Candidate(
                f"feature_region:{feature}",
                f"fails when {feature} {op} {threshold:g} ({p_in:.0%} vs {p_out:.0%} elsewhere)",
                mask,
                stats={
                    "feature": feature,
                    "op": op,
                    "threshold": threshold,
                    "support": size / n,
                    "region_episodes": size,
                    "failure_rate_in": p_in,
                    "failure_rate_out": p_out,
                    "lift": lift,
                    "z": z,
                    "p_value": p_value,
                },
                ranges=_whole(frame, mask, config.evidence),
                kind="region",
            )
        )
    return out


def reward_without_success(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Candidate]:
    """Failed episodes that still collected as much reward as typical successes (or any, if none succeed)."""
    failed = ~frame.success
    if frame.success.any():
        bar = float(np.quantile(frame.ret[frame.success], 0.25))
        mask = failed & (frame.ret >= bar) & (frame.ret > 0)
        title = f"collects reward without success (return >= {bar:g}, a typical success's)"
    else:
        bar = 0.0
        mask = failed & (frame.ret > 0)
        title = "collects positive reward but never succeeds"
    return [Candidate("reward_without_success", title, mask, stats={"return_bar": bar}, ranges=_whole(frame, mask, config.evidence))]


def variance_across_seeds(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Candidate]:
    """Levels played from several seeds whose outcome is close to a coin flip.

    A level is the adapter's ``level_id`` (map and start, or physics) within a spec; runs
    without level ids group by spec and seed instead. A level counts when its success rate
    p has p(1-p) >= ``variance_min`` (p between about 0.1 and 0.9).
    """
    ids = frame.level_id
    keys = np.array([f"{h}/{lv if lv is not None else s}" for h, lv, s in zip(frame.spec_hash, ids, frame.seed)], dtype=object)
    levels, index, counts = np.unique(keys, return_inverse=True, return_counts=True)
    wins = np.bincount(index, weights=frame.success, minlength=len(levels))
    repeated = counts >= config.variance_min_episodes
    if repeated.sum() < 2:  # one level (CartPole's fixed physics): chance across seeds is the env, not a weakness of levels
        return []
    p = wins / counts
    spread = p * (1 - p)
    noisy = repeated & (spread >= config.variance_min)
    mask = noisy[index]
    return [
        Candidate(
            "high_variance",
            f"same level, outcome varies across seeds ({int(noisy.sum())} of {int(repeated.sum())} replayed levels)",
            mask,
            stats={
                "levels": int(repeated.sum()),
                "noisy_levels": int(noisy.sum()),
                "mean_p_times_1_minus_p": float(spread[repeated].mean()),
            },
            ranges=_whole(frame, mask & ~frame.success, config.evidence),
            kind="level",
        )
    ]


def _robust_margin(values: np.ndarray, floor: float) -> tuple[float, float]:
    """Median and a margin of at least ``floor``, a tenth of the median's size and 3 robust standard deviations."""
    median = float(np.median(values))
    mad = float(np.median(np.abs(values - median)))
    return median, max(floor, 0.1 * abs(median), 3 * 1.4826 * mad)


def return_gaps(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Candidate]:
    """Successful episodes whose return falls far below a typical success's (a detour, a penalty paid on the way)."""
    won = frame.success
    if won.sum() < config.contrast_min_successes:
        return []
    median, margin = _robust_margin(frame.ret[won], config.return_gap_min)
    mask = won & (frame.ret < median - margin)
    gap = np.where(mask, median - frame.ret, 0.0)
    return [
        Candidate(
            "return_gap",
            f"succeeds with a far lower return than usual (below {median - margin:g}; a typical success returns {median:g})",
            mask,
            stats={"typical_return": median, "bar": median - margin, "mean_gap": float(gap[mask].mean()) if mask.any() else 0.0},
            ranges=_whole(frame, mask, config.evidence),
            kind="cost",
            severity=_share_lost(gap, frame.ret),
        )
    ]


def _share_lost(lost: np.ndarray, returns: np.ndarray) -> float:
    """The share of the run's return that losses account for: sum(lost) / sum(|return| + lost)."""
    total = float(np.abs(returns).sum() + lost.sum())
    return float(lost.sum()) / total if total > 0 else 0.0


def model_calls(frame: EpisodeFrame, config: DiagnoseConfig) -> list[Candidate]:
    """An LLM agent's calls: replies that were no action, failure after the context was cut, and verbose outliers.

    Behaviours, judged by contrast like the others: a finding only where they come with failure.
    """
    calls = frame.model_calls
    if (
        calls is None
        or frame.parse_failures is None
        or frame.truncated_steps is None
        or frame.output_tokens is None
        or not (calls > 0).any()
    ):
        return []
    out = []
    for name, title, counts in (
        ("malformed_output", "malformed output: replies that name no action (the harness sent them back)", frame.parse_failures),
        ("context_truncated", "fails after the context was truncated: older turns were left out of its calls", frame.truncated_steps),
    ):
        mask = counts > 0
        out.append(
            Candidate(name, title, mask, stats={"mean_when_flagged": float(counts[mask].mean()) if mask.any() else 0.0},
                      ranges=_whole(frame, mask, config.evidence), kind="behaviour")
        )  # fmt: skip
    # Per call, against the run's short end (its lower quartile), so that even a run padded half the time shows it.
    outliers = [
        ("verbose_output", "verbose output", frame.output_tokens, 100.0, "output tokens", "usual_output_tokens_per_call", "{:.0f} ")
    ]
    if frame.latency_s is not None:
        outliers.append(("slow_calls", "slow model calls", frame.latency_s, 1.0, "s", "usual_seconds_per_call", "{:.2f} "))
    for name, what, totals, margin, unit, key, shown in outliers:
        per_call = np.where(calls > 0, totals / np.maximum(calls, 1), np.nan)
        known = ~np.isnan(per_call)
        if known.sum() < config.min_episodes:
            continue
        usual = float(np.percentile(per_call[known], 25))
        mask = known & (per_call > max(4 * usual, usual + margin))
        title = f"{what}: more than 4x (and {margin:g} {unit} more than) the run's usual {shown.format(usual)}{unit} per call"
        out.append(Candidate(name, title, mask, stats={key: usual}, ranges=_whole(frame, mask, config.evidence), kind="behaviour"))
    return out


EPISODE_DETECTORS = (endings, feature_regions, reward_without_success, variance_across_seeds, return_gaps, model_calls)


# -- step-level detectors ----------------------------------------------------------------
STEP_TITLES = {
    "loop": "loops: returns to a state it left 2-4 steps before",
    "revisit": "wanders: most steps revisit states seen earlier in the episode",
    "noop_action": "no-op actions: steps that leave the state unchanged",
    "repeated_action": "repeats one action many times in a row",
    "blocked_action": "tries actions a rule blocks",
    "tool_error": "tool calls fail",
    "retry": "retries tool calls",
    "costly_event": "costly events: steps whose reward falls far below the episode's usual step reward",
}


def step_candidates(frame: EpisodeFrame, stats: StepStats, config: DiagnoseConfig) -> list[Candidate]:
    """Flags from the streamed step counts, with the step ranges found during the scan."""
    out = []
    length = stats.column("steps", frame.episode_id)
    for name, (count, minimum, share) in config.step_flags().items():
        values = stats.column(count, frame.episode_id)
        mask = (values >= minimum) & (values >= share * length)
        if name == "tool_error":
            mask |= frame.tool_errors > 0
        if name == "retry":
            mask |= frame.retries > 0
        extra: dict[str, Any] = {"mean_count_when_flagged": float(values[mask].mean()) if mask.any() else 0.0}
        severity, title = None, STEP_TITLES[name]
        if name == "costly_event":
            lost = stats.column("lost", frame.episode_id)
            severity = _share_lost(lost, frame.ret)
            extra |= {
                "in_successes": int((mask & frame.success).sum()),
                "mean_lost_when_flagged": float(lost[mask].mean()) if mask.any() else 0.0,
                "share_of_return_lost": severity,
            }
            won = int((mask & frame.success).sum())
            title += f" ({extra['mean_lost_when_flagged']:.3g} reward lost per affected episode; {won} of them still succeed)"
        out.append(
            Candidate(
                name,
                title,
                mask,
                stats=extra,
                ranges=dict(stats.ranges.get(name, {})),
                kind="cost" if name == "costly_event" else "behaviour",
                severity=severity,
            )
        )
    return out


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


STATE_DETECTORS = ("loop", "revisit", "noop_action")  # the step detectors that compare states, which need observations or positions


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


def explains_failure(candidate: Candidate, frame: EpisodeFrame, config: DiagnoseConfig) -> bool:
    """Whether a behaviour is a finding rather than a style note (see :class:`DiagnoseConfig`); other kinds always are."""
    if candidate.kind != "behaviour":
        return True
    failed = ~frame.success
    if not (candidate.mask & failed).any():
        return False  # it never comes with a failure
    if frame.success.sum() < config.contrast_min_successes:
        return True  # too few successes to contrast with: reported as it is, its stats say so
    ci = candidate.stats["contrast"]["lift_ci"]
    return ci is not None and ci[0] > config.contrast_min_lift


def to_finding(
    candidate: Candidate, frame: EpisodeFrame, excerpts: dict[tuple[int, int, int], list[dict]], config: DiagnoseConfig
) -> Finding | None:
    """Apply the support thresholds; attach rate, interval, severity and evidence."""
    mask = candidate.mask
    hits, total = int(mask.sum()), frame.n
    if hits < config.min_episodes or total == 0 or hits / total < config.min_rate:
        return None
    failed = ~frame.success
    total_failures = int(failed.sum())
    failures = int((mask & failed).sum())
    severity = candidate.severity if candidate.severity is not None else failures / total_failures if total_failures else 0.0
    seeds = dict(zip(frame.episode_id.tolist(), frame.seed.tolist()))
    evidence = [
        Evidence(
            episode_id=e,
            seed=seeds.get(e) if seeds.get(e, -1) >= 0 else None,
            start=lo,
            end=hi,
            note=f"steps {lo}-{hi}",
            excerpt=excerpts.get((e, lo, hi), []),
        )
        for e, (lo, hi) in list(candidate.ranges.items())[: config.evidence]
    ]
    return Finding(
        name=candidate.name,
        title=candidate.title,
        episodes=hits,
        total=total,
        rate=hits / total,
        rate_ci=wilson(hits, total),
        failures=failures,
        severity=severity,
        stats=candidate.stats,
        evidence=evidence,
        symptoms=[symptom["name"] for symptom in candidate.stats.get("symptoms", [])],
    )


def merge_duplicates(candidates: list[Candidate], frame: EpisodeFrame, config: DiagnoseConfig) -> list[Candidate]:
    """One finding per set of episodes: level regions (confounded features) and costs that flag the same episodes.

    Within each kind (regions; costs), candidates are taken clearest first (a region by its
    z statistic, a cost's step events before its return gap); one whose episodes a kept one
    flags too, ``duplicate_overlap`` of them at least, is dropped and named in the kept one's
    ``also_explained_by``: a confounded feature explains no failure the clearer one does not.
    Endings, levels and behaviours are different views of the same episodes and all stay.
    """
    out: list[Candidate] = []
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.kind in ("region", "cost"):
            groups.setdefault(c.kind, []).append(c)
        else:
            out.append(c)
    for kind, group in groups.items():
        # A cost's step events say more than the return gap they cause: costly_event first.
        clearest = sorted(
            group, key=lambda c: -c.stats.get("z", 0.0) if kind == "region" else (c.name != "costly_event", -(c.severity or 0))
        )
        kept: list[Candidate] = []
        for c in clearest:
            twin = next((k for k in kept if _covered(c.mask, k.mask) >= config.duplicate_overlap), None)
            if twin is None:
                kept.append(c)
            else:
                twin.stats.setdefault("also_explained_by", []).append(c.title if kind == "region" else c.name)
        out.extend(kept)
    return out


def merge_symptoms(candidates: list[Candidate], frame: EpisodeFrame, config: DiagnoseConfig) -> list[Candidate]:
    """One finding per behaviour: behaviours and endings that flag nearly the same episodes become one, with symptoms.

    A PPO agent pressing ``forward`` into a wall shows a no-op, a repeated action, revisits
    and a timeout on the same episodes: one behaviour, not four findings. Candidates are
    taken strongest first (an ending the env names, such as lava or a failed submit, then a
    behaviour, then an ending that only says how the episode stopped, such as a timeout or
    giving up; within each, the larger share of failures covered, then the larger lower end
    of the lift's interval); one whose episodes and a kept one's each cover ``symptom_overlap`` of the
    other's joins the kept one as a symptom (``stats["symptoms"]``), keeping the kept one's
    statistics. Candidates below the support thresholds take no part.
    """
    failed = ~frame.success
    failures = max(int(failed.sum()), 1)

    def supported(c: Candidate) -> bool:
        hits = int(c.mask.sum())
        return hits >= config.min_episodes and hits / max(frame.n, 1) >= config.min_rate

    def strength(c: Candidate) -> tuple:
        # What ended the episode, where the env says (lava, a failed submit), names it best; then the
        # behaviour; an ending that says only how it stopped (a timeout, giving up) is a symptom.
        told = c.name.startswith("terminal_cause:") or c.name == "episode_error"
        lift = (c.stats.get("contrast") or {}).get("lift_ci") or [0.0, 0.0]
        return (
            0 if told else 1 if c.kind == "behaviour" else 2,
            -round(int((c.mask & failed).sum()) / failures, 9),
            -float(lift[0]),
            c.name,
        )

    mergeable = sorted((c for c in candidates if c.kind in ("behaviour", "ending") and supported(c)), key=strength)
    kept: list[Candidate] = []
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
    return [c for c in candidates if id(c) not in merged]


def _covered(a: np.ndarray, by: np.ndarray) -> float:
    """The share of ``a``'s episodes that ``by`` flags too."""
    size = int(a.sum())
    return int((a & by).sum()) / size if size else 1.0


def rate_by_feature(mask: np.ndarray, values: np.ndarray, feature: str) -> dict[str, Any]:
    """A finding's rate in each bin of the level feature that explains it (its distinct values, or 8 quantile bins).

    Example:
        >>> rate_by_feature(np.array([False, True, True, True]), np.array([1.0, 1.0, 2.0, 2.0]), "size")
        {'feature': 'size', 'values': [1.0, 2.0], 'rate': [0.5, 1.0], 'episodes': [2, 2]}
    """
    known = ~np.isnan(values)
    distinct = np.unique(values[known])
    edges = distinct if len(distinct) <= 12 else np.unique(np.quantile(values[known], np.linspace(0, 1, 9)))
    bins = np.clip(np.searchsorted(edges, values[known], side="right") - 1, 0, len(edges) - 1)
    hits = mask[known]
    counts = [int((bins == b).sum()) for b in range(len(edges))]
    rates = [float(hits[bins == b].mean()) if counts[b] else 0.0 for b in range(len(edges))]
    return {"feature": feature, "values": edges.tolist(), "rate": rates, "episodes": counts}
