"""What a release is made of: its model, its harness and its environment, each as plain data with a key.

Contains :class:`ModelFactor` (an endpoint and model name, or a Python policy: ``random``,
``reference``, a saved learner by the SHA-256 of its file, or a policy class, ``FILE.py:Class``
or ``module:Class``, by the SHA-256 of its source file and its name), :class:`HarnessFactor` (an
:class:`~envrigger.agents.AgentHarness` by its hash, or ``direct`` for a policy that acts
itself), :class:`EnvFactor` (the spec the agent faces, by its hash, and the library version
it came from) and :class:`Cell` (one of each: what one evaluation runs). A factor's ``key``
is its identity: two releases with equal model keys have the same model. An API key is
never part of a factor; only the name of the variable holding it is, and a cell whose
endpoint URL carries a credential is refused where it would be stored
(:meth:`ModelFactor.secret_problem`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field

from envharness.spec import HarnessSpec
from envharness.validated import ValidatedModel

FACTORS = ("model", "harness", "environment")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
SECRET_PARAMETER = re.compile(r"key|token|secret|password|passwd|auth|sig|credential", re.IGNORECASE)


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


class ModelFactor(ValidatedModel):
    """The model: an endpoint serving a named model, or a Python policy.

    Example:
        >>> a = ModelFactor(kind="endpoint", base_url="http://127.0.0.1:8000/v1", model="qwen")
        >>> b = a.model_copy(update={"api_key_env": "OTHER_KEY"})
        >>> a.key() == b.key(), a.describe()
        (True, 'qwen @ http://127.0.0.1:8000/v1')
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["endpoint", "policy"]
    base_url: str | None = Field(None, max_length=2048)
    model: str | None = Field(None, max_length=256)
    api_key_env: str = Field("OPENAI_API_KEY", max_length=128, description="the variable holding the key (never the key)")
    policy: str | None = Field(None, max_length=4096, description="random, reference, or a saved learner's path")
    sha256: str | None = Field(None, max_length=64, description="a saved learner's or a policy class's source file hash: its identity")
    entry: str | None = Field(
        None, max_length=256, description="the class in a policy file or module, or a saved learner's algorithm: part of its identity"
    )

    @classmethod
    def of_policy(cls, policy: str) -> ModelFactor:
        """A policy by name, or by its content: a saved learner by its file's hash, a class by its source file's hash and name.

        The path may move and the file may change in place: the content names it, so two
        files at one path over time are two models, and one file at two paths is one.

        Example:
            >>> import tempfile
            >>> path = Path(tempfile.mkdtemp()) / "walker.py"
            >>> _ = path.write_text("from envrigger.policies import RandomPolicy as Walker")
            >>> first = ModelFactor.of_policy(f"{path}:Walker")
            >>> _ = path.write_text("from envrigger.policies import QLearner as Walker")
            >>> first.key() == ModelFactor.of_policy(f"{path}:Walker").key(), first.describe()[:24]
            (False, 'walker.py:Walker (sha256')
        """
        path = Path(policy)
        if policy in ("random", "reference"):
            return cls(kind="policy", policy=policy)
        if path.is_file():  # a saved learner
            return cls(kind="policy", policy=str(path.resolve()), sha256=_file_sha256(path))
        where, _, name = policy.rpartition(":")
        if where and Path(name).is_file():  # ALGO:model.zip, as the rollout reads it
            return cls(kind="policy", policy=f"{where}:{Path(name).resolve()}", sha256=_file_sha256(Path(name)), entry=where)
        if where.endswith(".py") and Path(where).is_file():  # FILE.py:Class
            return cls(kind="policy", policy=f"{Path(where).resolve()}:{name}", sha256=_file_sha256(Path(where)), entry=name)
        origin = _module_source(where) if where and name else None
        if origin is not None:  # module:Class, by its module's source
            return cls(kind="policy", policy=policy, sha256=_file_sha256(origin), entry=name)
        return cls(kind="policy", policy=policy)

    def key(self) -> str:
        if self.kind == "endpoint":
            return _digest(["endpoint", self.base_url, self.model])
        if self.sha256 and self.entry:
            return _digest(["policy", self.sha256, self.entry])
        return _digest(["policy", self.sha256 or self.policy])

    def describe(self) -> str:
        if self.kind == "endpoint":
            return f"{self.model} @ {self.base_url}"
        if not self.sha256:
            return str(self.policy)
        shown = Path(self.policy or "").name
        if self.entry and not shown.endswith(f":{self.entry}"):
            shown = f"{self.entry}:{shown}"
        return f"{shown} (sha256 {self.sha256[:12]})"

    def changed(self) -> str | None:
        """Why this policy is no longer what its identity names (its file changed or went away), or None."""
        if self.kind != "policy" or not self.sha256:
            return None
        now = ModelFactor.of_policy(str(self.policy))
        if now.sha256 == self.sha256 and now.entry == self.entry:
            return None
        found = f"sha256 {now.sha256[:12]}" if now.sha256 else "no file"
        return (
            f"the policy {self.describe()} is not what it was: {self.policy} now has {found}; restore that file, "
            "or evaluate the new one as a new release"
        )

    def secret_problem(self) -> str | None:
        """Where a credential would be recorded (in the URL, or a key given as its variable's name), or None. Never echoes it."""
        if self.kind != "endpoint":
            return None
        if not ENV_NAME.fullmatch(self.api_key_env or ""):
            return "--api-key-env: give the name of the variable that holds the key (letters, digits and _), never the key itself"
        if self.api_key_env not in os.environ and any(value == self.api_key_env for value in os.environ.values()):
            return "--api-key-env: that is the value of a variable, not its name; give the variable's name (e.g. OPENAI_API_KEY)"
        parts = urllib.parse.urlsplit(self.base_url or "")
        if parts.username is not None or parts.password is not None:
            where = "its user:password part"
        else:
            named = [k for k, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if SECRET_PARAMETER.search(k)]
            if not named:
                return None
            where = f"its query parameter {named[0][:40]!r}"
        return (
            f"--base-url: holds a credential ({where}), which would be stored in the ledger; give the URL without it, "
            "and the key in the variable --api-key-env names"
        )


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _module_source(module: str) -> Path | None:
    """The source file of an importable module, found without importing it (its parent packages are), or None."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError):
        return None
    origin = getattr(spec, "origin", None)
    if origin is None or not str(origin).endswith(".py") or not Path(origin).is_file():
        return None
    return Path(origin)


class HarnessFactor(ValidatedModel):
    """The harness: an agent harness (by its hash), or ``direct`` for a policy that acts itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["agent", "direct"]
    harness: dict[str, Any] | None = Field(None, max_length=64, description="the AgentHarness as JSON data")

    def agent_harness(self) -> Any:
        from envrigger.agents import AgentHarness

        return AgentHarness.model_validate(self.harness)

    def key(self) -> str:
        return str(self.agent_harness().hash()) if self.kind == "agent" else "direct"

    def describe(self) -> str:
        return f"harness {self.key()}" if self.kind == "agent" else "direct (the policy acts itself)"


class EnvFactor(ValidatedModel):
    """The environment the agent faces: a spec (the original env, or a reshaped one) and the library version it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: dict[str, Any] = Field(max_length=16)
    library_version: int | None = Field(None, ge=0, le=2**63 - 1)
    source: str = Field("", max_length=4096, description="where it came from: the env id, a spec file, an exported env")

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


class Cell(ValidatedModel):
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
