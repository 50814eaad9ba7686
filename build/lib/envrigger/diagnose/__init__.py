"""envrigger diagnose: recurring weaknesses in a run, with rates, severity and evidence.

Contains :func:`diagnose` and re-exports :class:`Diagnosis`, :class:`Finding`,
:class:`Evidence` and :class:`DiagnoseConfig`. The episodes table is read whole (one row
per episode); steps are streamed in batches of whole episodes, so memory stays bounded
however long the run is.

Example:
    >>> from envrigger.rollout import rollout
    >>> run = rollout("MiniGrid-LavaGapS5-v0", "random", episodes=60)
    >>> report = diagnose(run)
    >>> report.findings[0].name, report.findings[0].level
    ('terminal_cause:lava', 'high')
"""

from __future__ import annotations

from pathlib import Path

from envrigger.diagnose.detectors import EPISODE_DETECTORS, DiagnoseConfig, EpisodeFrame, step_candidates, to_finding
from envrigger.diagnose.model import Diagnosis, Evidence, Finding, wilson
from envrigger.diagnose.steps import scan_steps
from envrigger.trajectory import TrajectoryError, TrajectoryStore


def diagnose(run: TrajectoryStore | str | Path, config: DiagnoseConfig | None = None) -> Diagnosis:
    """Run every detector over ``run``; rank findings by severity, then by how surely their episodes fail."""
    config = config or DiagnoseConfig()
    store = run if isinstance(run, TrajectoryStore) else TrajectoryStore(run)
    frame = EpisodeFrame.load(store)
    if frame.n == 0:
        raise TrajectoryError(f"{store.path}: the run has no episodes; collect some first")
    episode_level = [c for detector in EPISODE_DETECTORS for c in detector(frame, config)]
    wanted = {e: r for c in episode_level for e, r in list(c.ranges.items())[: config.evidence]}
    stats = scan_steps(store, config.step_flags(), wanted, config.evidence, config.batch_size)
    candidates = episode_level + step_candidates(frame, stats, config)
    findings = [f for c in candidates if (f := to_finding(c, frame, stats.excerpts, config)) is not None]
    # Ties in severity go to the finding whose affected episodes fail most surely.
    findings.sort(key=lambda f: (-round(f.severity, 9), -f.failures / max(f.episodes, 1), -f.rate, f.name))
    successes = int(frame.success.sum())
    return Diagnosis(
        run=str(store.path),
        episodes=frame.n,
        steps=stats.transitions,
        failures=frame.n - successes,
        success_rate=successes / frame.n,
        success_ci=wilson(successes, frame.n),
        spec_hashes=sorted(set(frame.spec_hash.tolist())),
        policies=sorted(set(frame.policy_id.tolist())),
        findings=findings,
    )


__all__ = ["DiagnoseConfig", "Diagnosis", "Evidence", "Finding", "diagnose"]
