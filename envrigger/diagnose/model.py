"""What a diagnosis produces: findings with evidence, as pydantic models.

Contains :class:`Evidence`, :class:`Finding` and :class:`Diagnosis`. Every rate is reported
with its Wilson score interval, :func:`envrigger.stats.wilson`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from envharness.validated import ValidatedModel
from envrigger.data.versioned import Versioned
from envrigger.stats import wilson as wilson  # its home is envrigger.stats; kept importable from here for older code


class Evidence(BaseModel):
    """Where to look: an episode and the step range that shows the weakness (inclusive)."""

    episode_id: int
    seed: int | None = None
    start: int = Field(description="first step of the range")
    end: int = Field(description="last step of the range")
    note: str = ""
    excerpt: list[dict[str, Any]] = Field(default_factory=list, description="a few steps around the range")


class Finding(ValidatedModel):
    """One recurring weakness, with how often it happens and how much failure it explains.

    Example:
        >>> f = Finding(name="terminal_cause:lava", title="dies in lava", episodes=30, total=100,
        ...             rate=0.3, rate_ci=(0.22, 0.4), failures=30, severity=0.6)
        >>> f.level
        'high'
    """

    name: str = Field(description="stable weakness name, e.g. 'loop', 'terminal_cause:lava', 'feature_region:goal_distance'")
    title: str = Field(description="one line for people, e.g. 'fails when goal_distance > 6'")
    episodes: int = Field(description="episodes (or levels) affected")
    total: int = Field(description="episodes (or levels) examined")
    rate: float = Field(description="episodes / total")
    rate_ci: tuple[float, float] = Field(description="95% Wilson interval of the rate")
    failures: int = Field(0, description="failed episodes among the affected")
    severity: float = Field(description="share of all failed episodes this finding covers")
    stats: dict[str, Any] = Field(default_factory=dict, description="detector-specific statistics (threshold, lift...)")
    evidence: list[Evidence] = Field(default_factory=list)
    symptoms: list[str] = Field(
        default_factory=list,
        description="the names of other behaviours and endings seen on (nearly) the same episodes, merged into this one",
    )
    what_to_try: list[str] = Field(
        default_factory=list,
        description="the catalog transforms that target this finding (or its symptoms) on the run's env: what `envrigger run` proposes",
    )

    @property
    def level(self) -> str:
        """``high`` (severity >= 0.5), ``medium`` (>= 0.2) or ``low``."""
        return "high" if self.severity >= 0.5 else "medium" if self.severity >= 0.2 else "low"


class Diagnosis(Versioned):
    """Everything ``envrigger diagnose`` found in one run, findings ranked by severity.

    Versioned (``schema_version``, 1 since it was recorded): a diagnosis JSON written before
    loads as version 0, one from a newer envrigger is refused in one line.
    """

    CURRENT = 1

    run: str
    episodes: int
    steps: int
    failures: int
    success_rate: float
    success_ci: tuple[float, float]
    spec_hashes: list[str]
    policies: list[str]
    findings: list[Finding]
    style_notes: list[Finding] = Field(
        default_factory=list,
        description="behaviours as common in successes as in failures: how the agent plays, not why it fails",
    )
    notes: list[str] = Field(default_factory=list, description="what limits this diagnosis, e.g. a sample below the minimum")
    env_id: str | None = Field(None, description="the base env of the run's first episode")
    action_names: list[str] = Field(default_factory=list, description="the env's names of its Discrete actions, by index")

    def finding(self, name: str) -> Finding | None:
        """The finding called ``name``, or the one it was merged into as a symptom, if any."""
        return next((f for f in self.findings if f.name == name), None) or next((f for f in self.findings if name in f.symptoms), None)
