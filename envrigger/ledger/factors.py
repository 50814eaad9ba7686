"""What a release is made of: its model, its harness and its environment, each as plain data with a key.

Contains :class:`ModelFactor` (an endpoint and model name, or a Python policy: ``random``,
``reference``, or a saved learner by the SHA-256 of its file), :class:`HarnessFactor` (an
:class:`~envrigger.agents.AgentHarness` by its hash, or ``direct`` for a policy that acts
itself), :class:`EnvFactor` (the spec the agent faces, by its hash, and the library version
it came from) and :class:`Cell` (one of each: what one evaluation runs). A factor's ``key``
is its identity: two releases with equal model keys have the same model. An API key is
never part of a factor; only the name of the variable holding it is.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envharness.spec import HarnessSpec

FACTORS = ("model", "harness", "environment")


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


class ModelFactor(BaseModel):
    """The model: an endpoint serving a named model, or a Python policy.

    Example:
        >>> a = ModelFactor(kind="endpoint", base_url="http://127.0.0.1:8000/v1", model="qwen")
        >>> b = a.model_copy(update={"api_key_env": "OTHER_KEY"})
        >>> a.key() == b.key(), a.describe()
        (True, 'qwen @ http://127.0.0.1:8000/v1')
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["endpoint", "policy"]
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = Field("OPENAI_API_KEY", description="the variable holding the key (never the key)")
    policy: str | None = Field(None, description="random, reference, or a saved learner's path")
    sha256: str | None = Field(None, description="a saved learner's file hash: its identity")

    @classmethod
    def of_policy(cls, policy: str) -> ModelFactor:
        """A policy by name, or a saved learner by its file's hash (the path may move; the hash names it)."""
        path = Path(policy)
        if policy in ("random", "reference") or not path.is_file():
            return cls(kind="policy", policy=policy)
        return cls(kind="policy", policy=str(path.resolve()), sha256=hashlib.sha256(path.read_bytes()).hexdigest())

    def key(self) -> str:
        if self.kind == "endpoint":
            return _digest(["endpoint", self.base_url, self.model])
        return _digest(["policy", self.sha256 or self.policy])

    def describe(self) -> str:
        if self.kind == "endpoint":
            return f"{self.model} @ {self.base_url}"
        return f"{Path(self.policy or '').name} (sha256 {self.sha256[:12]})" if self.sha256 else str(self.policy)


class HarnessFactor(BaseModel):
    """The harness: an agent harness (by its hash), or ``direct`` for a policy that acts itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["agent", "direct"]
    harness: dict[str, Any] | None = Field(None, description="the AgentHarness as JSON data")

    def agent_harness(self) -> Any:
        from envrigger.agents import AgentHarness

        return AgentHarness.model_validate(self.harness)

    def key(self) -> str:
        return str(self.agent_harness().hash()) if self.kind == "agent" else "direct"

    def describe(self) -> str:
        return f"harness {self.key()}" if self.kind == "agent" else "direct (the policy acts itself)"


class EnvFactor(BaseModel):
    """The environment the agent faces: a spec (the original env, or a reshaped one) and the library version it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: dict[str, Any]
    library_version: int | None = None
    source: str = Field("", description="where it came from: the env id, a spec file, an exported env")

    def harness_spec(self) -> HarnessSpec:
        return HarnessSpec.model_validate(self.spec)

    def key(self) -> str:
        return str(self.harness_spec().hash())

    def describe(self) -> str:
        spec = self.harness_spec()
        names = [t.name for t in spec.transforms]
        shown = f"{spec.env_id} + {', '.join(names)}" if names else spec.env_id
        version = f", library v{self.library_version}" if self.library_version is not None else ""
        return f"{shown} (spec {self.key()}{version})"


class Cell(BaseModel):
    """One model, one harness, one environment: what one evaluation on the held-out tasks runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelFactor
    harness: HarnessFactor
    environment: EnvFactor

    def key(self) -> str:
        return _digest([self.model.key(), self.harness.key(), self.environment.key()])

    def keys(self) -> dict[str, str]:
        return {name: getattr(self, name).key() for name in FACTORS}

    def crossed(self, other: Cell, take: set[str]) -> Cell:
        """This cell with the factors named in ``take`` taken from ``other``."""
        return Cell(**{name: getattr(other if name in take else self, name) for name in FACTORS})
