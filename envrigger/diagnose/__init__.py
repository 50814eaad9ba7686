"""envrigger diagnose: recurring weaknesses in a run, with rates, severity and evidence.

Contains :func:`diagnose` and re-exports :class:`Diagnosis`, :class:`Finding`,
:class:`Evidence`, :class:`DiagnoseConfig` and :data:`FINDING_NAMES`, the finding vocabulary
(every name a detector produces, with its detector). The episodes table is read whole (one row
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

from envrigger.data import TrajectoryError, TrajectoryStore
from envrigger.diagnose.conditions import state_condition
from envrigger.diagnose.config import DiagnoseConfig
from envrigger.diagnose.detectors import FINDING_NAMES, STATE_DETECTORS, episode_detectors, flag_behaviours
from envrigger.diagnose.flags import rate_by_feature, to_finding
from envrigger.diagnose.frame import EpisodeFrame
from envrigger.diagnose.judge import contrast, explains_failure, merge_duplicates, merge_symptoms, note_reading
from envrigger.diagnose.model import Diagnosis, Evidence, Finding
from envrigger.diagnose.steps import scan_steps
from envrigger.diagnose.vocabulary import vocabulary
from envrigger.stats import wilson


def diagnose(run: TrajectoryStore | str | Path, config: DiagnoseConfig | None = None) -> Diagnosis:
    """Run every detector over ``run``; keep what explains failure or costs return; rank by severity.

    Behaviours as common in successful episodes as in failed ones become style notes;
    findings that cover the same failed episodes are merged (the clearest is kept), and
    behaviours and endings seen on the same episodes become one finding with symptoms; failure
    modes get the condition under which they happen, where the stored states show one.
    """
    config = config or DiagnoseConfig()
    store = run if isinstance(run, TrajectoryStore) else TrajectoryStore(run)
    frame = EpisodeFrame.load(store)
    if frame.n == 0:
        raise TrajectoryError(f"{store.path}: the run has no episodes; collect some first")
    episode_level = [c for detector in episode_detectors() for c in detector(frame, config)]
    wanted: dict[int, list[tuple[int, int]]] = {}
    for c in episode_level:
        for e, r in list(c.ranges.items())[: config.evidence]:
            wanted.setdefault(e, []).append(r)
    failed_ids = set(frame.episode_id[~frame.success].tolist())
    stats = scan_steps(store, config.step_flags(), wanted, config.evidence, config.batch_size, failed=failed_ids)
    flags = episode_level + flag_behaviours(frame, stats, config)
    blind = stats.transitions > frame.n and stats.distinct_states < 2
    if blind:  # every step has the same state digest: the log holds no observations or positions, so state detectors would see one state
        flags = [c for c in flags if c.name not in STATE_DETECTORS]
    for c in flags:
        if c.kind in ("behaviour", "cost"):
            c.stats["contrast"] = contrast(c.mask, frame.success)
    kept = merge_duplicates([c for c in flags if explains_failure(c, frame, config)], frame, config)
    kept = merge_symptoms(kept, frame, config)
    first = store.episodes_table(columns=["spec_json"]).column("spec_json")
    words = vocabulary(first[0].as_py() if len(first) else None)
    for c in kept:
        if c.kind == "ending":
            condition = state_condition(c, frame, stats.states, words.states)
            if condition is not None:
                c.stats["condition"] = condition
                c.title += f", when {condition['rule']}"
        if c.stats.get("symptoms"):  # after the condition, which belongs to the finding's own name
            c.title += "; the same episodes also: " + ", ".join(s["title"] for s in c.stats["symptoms"])
    for c in kept:
        feature = c.stats.get("feature") or next(
            (cl["raw"] for cl in c.stats.get("condition", {}).get("clauses", []) if cl["raw"] in frame.features), None
        )
        if feature in frame.features:
            c.stats["by_feature"] = rate_by_feature(c.mask, frame.features[feature], feature)
    findings = [f for c in kept if (f := to_finding(c, frame, stats.excerpts, config)) is not None]
    notes = [f for c in flags if not explains_failure(c, frame, config) and (f := to_finding(c, frame, stats.excerpts, config))]
    for note in notes:
        note.stats["reading"] = note_reading(note.stats.get("contrast"), config)
    # Ties in severity go to the finding whose affected episodes fail most surely.
    findings.sort(key=lambda f: (-round(f.severity, 9), -f.failures / max(f.episodes, 1), -f.rate, f.name))
    successes = int(frame.success.sum())
    limits = []
    if frame.n < config.min_episodes:
        limits.append(
            f"only {frame.n} episode{'s' * (frame.n != 1)}: a finding needs at least {config.min_episodes}; collect more (-n) to diagnose"
        )
    elif 0 < successes < config.contrast_min_successes or (successes == 0 and frame.n >= config.min_episodes):
        limits.append(
            f"{successes} successful episode{'s' * (successes != 1)}: behaviours are not contrasted with successes "
            f"(that needs {config.contrast_min_successes}); they are reported as they occur"
        )
    if blind:
        limits.append(
            "every step has the same state (the log has no observations or positions): "
            f"{', '.join(STATE_DETECTORS)} cannot be judged and are left out; record observations or positions to have them"
        )
    diagnosis = Diagnosis(
        schema_version=Diagnosis.CURRENT,
        run=str(store.path),
        episodes=frame.n,
        steps=stats.transitions,
        failures=frame.n - successes,
        success_rate=successes / frame.n,
        success_ci=wilson(successes, frame.n),
        spec_hashes=sorted(set(frame.spec_hash.tolist())),
        policies=sorted(set(frame.policy_id.tolist())),
        findings=findings,
        style_notes=notes,
        notes=limits,
        env_id=words.env_id,
        action_names=list(words.actions),
    )
    from envrigger.diagnose.remedies import run_remedies  # it builds the env: imported where used

    tries = run_remedies(diagnosis, store)
    for finding in diagnosis.findings:
        finding.what_to_try = tries.get(finding.name, [])
    return diagnosis


__all__ = ["FINDING_NAMES", "DiagnoseConfig", "Diagnosis", "Evidence", "Finding", "diagnose"]
