"""Specs: a reshaped environment as plain JSON data, and its Gymnasium registration.

Contains :class:`TransformSpec`, :class:`HarnessSpec`, :func:`register` and
:func:`make_harness` (the Gymnasium entry point of registered specs).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gymnasium as gym
from pydantic import ConfigDict, Field, ValidationError, model_validator

from envharness.errors import SpecError
from envharness.harness import Harness
from envharness.make import allowing_imports, make_base
from envharness.reading import read_json
from envharness.transforms.base import transform_from_spec, validation_message
from envharness.validated import ValidatedModel
from envharness.values import MAX_ID, MAX_KWARGS, MAX_TRANSFORMS, check_numbers, parse_int


class TransformSpec(ValidatedModel):
    """One transform as data: its registry ``name`` and its ``params``.

    Example:
        >>> TransformSpec(name="ActionSlip", params={"p": 0.2}).model_dump()
        {'name': 'ActionSlip', 'params': {'p': 0.2}}
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=100, description="registered transform name, e.g. 'MoveGoal'")
    params: dict[str, Any] = Field(default_factory=dict, max_length=MAX_KWARGS, description="parameter values")


class HarnessSpec(ValidatedModel):
    """A reshaped environment as data: base env id and kwargs plus ordered transforms.

    Example:
        >>> spec = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"is_slippery": False},
        ...                    transforms=[{"name": "StepBudget", "params": {"max_steps": 10}}])
        >>> HarnessSpec.from_json(spec.to_json()) == spec
        True
        >>> env = spec.build()
        >>> env.reset(seed=0)[0]
        0
        >>> len(spec.hash())
        16
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    env_id: str = Field(min_length=1, max_length=MAX_ID, description="Gymnasium id of the base env")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, max_length=MAX_KWARGS, description="keyword arguments for gymnasium.make")
    transforms: list[TransformSpec] = Field(default_factory=list, max_length=MAX_TRANSFORMS, description="transforms, in order")

    @model_validator(mode="before")
    @classmethod
    def _numbers_a_spec_holds(cls, data: Any) -> Any:
        """A number the JSON path refuses (wider than 64 bits, not finite) is refused on every path: built, copied, assigned."""
        if isinstance(data, dict):
            check_numbers({k: data[k] for k in ("env_kwargs", "transforms") if k in data}, "spec")
        return data

    @classmethod
    def of(cls, env: Harness) -> HarnessSpec:
        """The spec that rebuilds ``env``, a harness around an env made from a Gymnasium id.

        Example:
            >>> import envharness
            >>> from envharness.transforms import StepBudget
            >>> HarnessSpec.of(envharness.wrap("CartPole-v1", StepBudget(max_steps=9))).transforms[0].name
            'StepBudget'
        """
        base = env.env.spec
        if base is None:
            raise SpecError("HarnessSpec.of: the base env was not made from a Gymnasium id; wrap an env id to get a spec")
        return cls(env_id=base.id, env_kwargs=dict(base.kwargs), transforms=[t.to_spec() for t in env.transforms])

    @classmethod
    def coerce(cls, data: Any) -> HarnessSpec:
        """A spec from a spec, a dict or a JSON string, with one-line errors."""
        if isinstance(data, HarnessSpec):
            return data
        if isinstance(data, str):
            return cls.from_json(data)
        check_numbers(data, "spec")  # untrusted data: no number that would fail raw wherever it is first used
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise SpecError(validation_message("spec", error)) from None

    @classmethod
    def from_json(cls, text: str) -> HarnessSpec:
        """Parse a spec from JSON text."""
        try:
            data = json.loads(text, parse_int=parse_int)  # an integer too long to read is named by its field below
        except json.JSONDecodeError as error:
            raise SpecError(f"spec: not valid JSON ({error.msg} at line {error.lineno}); fix the file's syntax") from None
        except RecursionError:
            raise SpecError("spec: nested too deeply to read; a spec is a flat object of env_id, env_kwargs and transforms") from None
        if not isinstance(data, dict):
            raise SpecError("spec: expected a JSON object with 'env_id' and 'transforms'; fix the file's top level")
        return cls.coerce(data)

    @classmethod
    def from_file(cls, path: str | Path) -> HarnessSpec:
        """Read a spec file; whatever is wrong with it (the file, its JSON, a field) is a one-line SpecError naming the file."""
        data = read_json(path, dict, fix="fix it, or write one with `envharness wrap ENV_ID ... -o FILE`", error=SpecError)
        try:
            return cls.coerce(data)
        except SpecError as error:
            raise SpecError(f"{path}: {error}") from None

    def to_json(self, indent: int | None = 2) -> str:
        """JSON text that :meth:`from_json` turns back into this spec."""
        return self.model_dump_json(indent=indent)

    def canonical(self) -> str:
        """Key-sorted, whitespace-free JSON with parameters normalised through the transforms."""
        data = self.model_dump(mode="json")
        data["transforms"] = [transform_from_spec(t).to_spec() for t in data["transforms"]]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def hash(self) -> str:
        """A short, stable identity of what this spec builds (equal specs, equal hashes)."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:16]

    def extended(self, *transforms: Any) -> HarnessSpec:
        """A copy with ``transforms`` (Transforms, TransformSpecs or dicts) appended.

        Example:
            >>> from envharness.transforms import StepBudget
            >>> HarnessSpec(env_id="CartPole-v1").extended(StepBudget(max_steps=9)).transforms[0].params
            {'max_steps': 9}
        """
        added = [t.to_spec() if hasattr(t, "to_spec") else t for t in transforms]
        return HarnessSpec.coerce({**self.model_dump(), "transforms": [*self.model_dump()["transforms"], *added]})

    def validate_transforms(self) -> None:
        """Raise :class:`~envharness.errors.SpecError` if a transform name or parameter is bad."""
        for t in self.transforms:
            transform_from_spec(t)

    def build(self, allow_imports: Iterable[str] = ()) -> Any:
        """The :class:`~envharness.harness.Harness` this spec describes.

        A spec is data and never runs code: an ``env_id`` (or a ``Chain``'s) of the form
        ``module:Env`` is refused unless ``allow_imports`` names its module.
        """
        with allowing_imports(*allow_imports):
            return Harness(make_base(self.env_id, **self.env_kwargs), self.transforms)


def make_harness(spec: Any, allow_imports: Iterable[str] = (), **overrides: Any) -> Any:
    """Gymnasium entry point for registered specs: build the harness from spec data."""
    spec = HarnessSpec.coerce(spec)
    if overrides:
        spec = spec.model_copy(update={"env_kwargs": {**spec.env_kwargs, **overrides}})
    return spec.build(allow_imports=allow_imports)


def register(spec: Any, id: str, allow_imports: Iterable[str] = ()) -> str:
    """Register ``spec`` as a Gymnasium id so that ``gymnasium.make(id)`` builds it.

    ``allow_imports`` is passed on to :meth:`HarnessSpec.build` each time the id is made.

    Example:
        >>> import gymnasium as gym
        >>> spec = HarnessSpec(env_id="CartPole-v1", transforms=[{"name": "StepBudget", "params": {"max_steps": 5}}])
        >>> register(spec, id="envharness/ShortCartPole-v0")
        'envharness/ShortCartPole-v0'
        >>> env = gym.make("envharness/ShortCartPole-v0")
        >>> _ = env.reset(seed=0)
        >>> sum(1 for _ in iter(lambda: env.step(0)[3] or env.step(1)[3], True))
        2
    """
    spec = HarnessSpec.coerce(spec)
    spec.validate_transforms()
    taken = gym.registry.get(id)
    if taken is not None and taken.entry_point != "envharness.spec:make_harness":
        raise SpecError(f"id: {id!r} is already registered to {taken.entry_point}; register the spec under a new id")
    if ":" in id:
        raise SpecError(f"id: {id!r} holds ':', which Gymnasium reads as a module to import; use 'namespace/Name-v0'")
    gym.register(
        id=id,
        entry_point="envharness.spec:make_harness",
        kwargs={"spec": spec.model_dump(mode="json"), **({"allow_imports": sorted(allow_imports)} if allow_imports else {})},
        disable_env_checker=True,
    )
    return id
