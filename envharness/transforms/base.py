"""Transform base classes, the registry, and the records the pipeline passes to them.

Contains :class:`Transform` and its four kinds (:class:`StateTransform`,
:class:`RuleTransform`, :class:`ObservationTransform`, :class:`LinkTransform`),
:class:`Blocked` (a rule's refusal of an action), :class:`Step` (the transition a rule
may reshape), and the registry: :func:`register_transform`, :func:`get_transform`,
:func:`transform_from_spec`, :data:`TRANSFORMS`.

A transform is immutable data: a pydantic model whose fields are its typed, bounded
parameters. Everything an episode needs to remember lives in a ``memo`` dict the harness
owns, so one transform instance can serve many environments at once.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, cast

import numpy as np
from annotated_types import Ge, Gt, Le, Lt
from pydantic import ConfigDict, Field, ValidationError

from envharness.errors import SpecError, UnknownTransformError
from envharness.validated import ValidatedModel
from envharness.values import shown

TRANSFORMS: dict[str, type[Transform]] = {}
KINDS = ("state", "rule", "observation", "link")


# The elements of list-valued parameters are bounded too, so that no spec or proposal can put
# an action, an index or a name of any size in one: an action of a Discrete space, a flat
# index into an observation, a tool name or a verb.
ActionValue = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
FlatIndex = Annotated[int, Field(ge=0, le=2**31 - 1)]
ShortName = Annotated[str, Field(min_length=1, max_length=100)]


def validation_message(owner: str, error: ValidationError) -> str:
    """One line naming the first bad field of ``owner`` and how to fix it."""
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "(parameters)"
    got = first.get("input")
    hint = first["msg"][0].lower() + first["msg"][1:]
    if first["type"] == "extra_forbidden":
        return f"{owner}.{field}: unknown parameter; remove it (see `envharness transforms`)"
    if first["type"] == "missing":
        return f"{owner}.{field}: required parameter is missing; give a value for it"
    return f"{owner}.{field}: got {shown(got)}; {hint}"


class Transform(ValidatedModel):
    """A named, immutable, JSON-serializable reshaping of an environment.

    Subclasses declare ``kind`` (one of state, rule, observation, link), the weakness
    names they ``targets`` (read by the proposer), whether they ``requires_state_access``,
    the adapter ``capability`` they need, and the adapter families they are written for,
    ``families`` (family keys such as ``("minigrid",)``, or ``"any"``; see
    :meth:`works_on_family`), with ``works_on`` saying so in words for ``envharness transforms``.
    Parameters are pydantic fields with bounds.

    Example:
        >>> from envharness.transforms import StepBudget
        >>> t = StepBudget(max_steps=20)
        >>> t.to_spec()
        {'name': 'StepBudget', 'params': {'max_steps': 20}}
        >>> transform_from_spec(t.to_spec()) == t
        True
        >>> t.mutate(np.random.default_rng(0)).max_steps
        21
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ClassVar[str] = ""
    targets: ClassVar[tuple[str, ...]] = ()
    requires_state_access: ClassVar[bool] = False
    drawable: ClassVar[bool] = True  # domain randomization may draw it with random parameters (not: it needs recorded data)
    capability: ClassVar[str | None] = None
    families: ClassVar[tuple[str, ...] | Literal["any"]] = "any"
    works_on: ClassVar[str] = "any env"

    def __init__(self, **params: Any) -> None:
        try:
            super().__init__(**params)
        except ValidationError as error:
            raise SpecError(validation_message(type(self).__name__, error)) from None

    @property
    def name(self) -> str:
        """The registry name: the class name."""
        return type(self).__name__

    def to_spec(self) -> dict[str, Any]:
        """``{"name": ..., "params": ...}``: plain JSON data that rebuilds this transform."""
        return {"name": self.name, "params": self.model_dump(mode="json")}

    def check(self, adapter: Any, observation_space: Any, action_space: Any) -> None:
        """Raise :class:`~envharness.errors.IncompatibleTransformError` if this env cannot take it.

        Called once at wrap time with a read-only :class:`~envharness.surfaces.AdapterView`
        of the base env's adapter, and its spaces; the default checks the adapter ``capability``.
        """
        if self.capability is not None:
            adapter.require(self.capability, self.name)

    @classmethod
    def works_on_family(cls, family: str) -> bool:
        """Whether this transform is written for envs of the adapter family ``family`` (by its ``families``).

        Example:
            >>> from envharness.transforms import BlockVerb, StepBudget
            >>> BlockVerb.works_on_family("textworld"), BlockVerb.works_on_family("minigrid"), StepBudget.works_on_family("minigrid")
            (True, False, True)
        """
        return cls.families == "any" or family in cls.families

    def proposable(self, adapter: Any) -> bool:
        """Whether an automatic proposer should offer this reshaping for this env (``adapter`` is an AdapterView)."""
        return True

    def mutate(self, rng: np.random.Generator) -> Self:
        """A neighbour of this transform: one bounded numeric parameter nudged, others kept.

        Pure: ``self`` is unchanged and the same ``rng`` state gives the same result.
        Integers move by one step, floats by a tenth of their range; the result stays
        within the declared bounds.
        """
        numeric = [
            (name, field)
            for name, field in type(self).model_fields.items()
            if field.annotation in (int, float) and field_bounds(field) != (-math.inf, math.inf)
        ]
        if not numeric:
            return self
        name, field = numeric[int(rng.integers(len(numeric)))]
        lo, hi = field_bounds(field)
        value = getattr(self, name)
        if field.annotation is int:
            new = value + int(rng.choice((-1, 1)))
            new = int(min(max(new, math.ceil(lo)), math.floor(hi)))
        else:
            span = (hi - lo) if math.isfinite(hi - lo) else max(abs(value), 1.0)
            new = float(np.clip(value + rng.normal(0.0, 0.1 * span), lo, hi))
        return type(self)(**{**self.model_dump(), name: new})


def field_bounds(field: Any) -> tuple[float, float]:
    """A numeric pydantic field's closed bounds ``(lo, hi)`` (a strict bound moved in by one step; ``inf`` where unbounded).

    Example:
        >>> from envharness.transforms import MoveGoal
        >>> field_bounds(MoveGoal.model_fields["max_dist"])
        (1.0, 100.0)
    """
    lo: Any = -math.inf
    hi: Any = math.inf
    step = 1 if field.annotation is int else 1e-9  # a strict bound moves in by one step
    for meta in field.metadata:
        if isinstance(meta, Ge):
            lo = meta.ge
        elif isinstance(meta, Gt):
            lo = cast(float, meta.gt) + step
        elif isinstance(meta, Le):
            hi = meta.le
        elif isinstance(meta, Lt):
            hi = cast(float, meta.lt) - step
    return float(lo), float(hi)


class StateTransform(Transform):
    """Reshapes where an episode starts or what the world holds, at reset, via the adapter.

    Subclasses implement :meth:`apply` by calling an edit of the
    :class:`~envharness.surfaces.StateHandle` they are given and re-reading the
    observation through it; ``capability`` names the edit so incompatible envs fail at
    wrap time. The handle stops working when ``apply`` returns, and a level the verifier
    would already call solved is rejected at reset.

    Example:
        >>> from envharness.transforms import MoveGoal
        >>> MoveGoal.kind, MoveGoal.capability, MoveGoal.requires_state_access
        ('state', 'goal', True)
    """

    kind: ClassVar[str] = "state"
    requires_state_access: ClassVar[bool] = True

    def level_seed(self, seed: int | None) -> int | None:
        """The seed the base env is reset with when the harness is reset with ``seed`` (default: the same).

        A transform that starts from recorded play (:class:`~envharness.transforms.DemoStart`)
        maps every seed to one of the levels its recordings were played on.
        """
        return seed

    def apply(self, adapter: Any, obs: Any, rng: np.random.Generator) -> Any:
        """Edit the freshly reset base env through ``adapter`` (a StateHandle); return the new observation."""
        raise NotImplementedError


class Blocked:
    """A rule transform's refusal of an action: the base env does not step.

    Example:
        >>> Blocked("door is sealed").reason
        'door is sealed'
    """

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Blocked({self.reason!r})"


class Step:
    """One transition as rule transforms see it; they may edit reward, ends and info.

    ``obs`` is the base env's raw observation, ``blocked`` the refusal reason when no base
    step happened, and ``end_reason`` names why a rule ended the episode.

    Example:
        >>> step = Step(action=1, obs=0, reward=1.0, terminated=False, truncated=False, info={})
        >>> step.reward -= 0.25; step.truncated = True; step.end_reason = "timeout"
        >>> step.reward, step.truncated, step.blocked
        (0.75, True, None)
    """

    __slots__ = ("obs", "reward", "terminated", "truncated", "info", "blocked", "end_reason", "action")

    def __init__(self, action, obs, reward, terminated, truncated, info, blocked=None):
        self.action = action
        self.obs = obs
        self.reward = reward
        self.terminated = terminated
        self.truncated = truncated
        self.info = info
        self.blocked = blocked
        self.end_reason: str | None = None


class RuleTransform(Transform):
    """Reshapes the interaction: what actions are allowed, what they do, reward and ends.

    Override any of the hooks; the harness calls ``on_action`` and ``on_transition`` only
    for classes that override them, so unused hooks cost nothing per step.

    Example:
        >>> import numpy as np
        >>> from envharness.transforms import BlockAction
        >>> rule, memo = BlockAction(actions=[2]), {}
        >>> rule.on_action(2, memo, np.random.default_rng(0))
        Blocked('action blocked')
        >>> rule.on_action(1, memo, np.random.default_rng(0))
        1
    """

    kind: ClassVar[str] = "rule"

    def bind(self, memo: dict, action_space: Any) -> None:
        """Once per harness, before the first episode: note what the rule needs of the env."""

    def on_reset(self, memo: dict, obs: Any, rng: np.random.Generator) -> None:
        """Start an episode (``obs`` is the base env's first observation)."""

    def on_action(self, action: Any, memo: dict, rng: np.random.Generator) -> Any:
        """Return the action to take, or :class:`Blocked` to refuse it."""
        return action

    def on_transition(self, step: Step, memo: dict) -> None:
        """Edit ``step`` after the base step (reward shaping, budgets, extra ends)."""


class ObservationTransform(Transform):
    """Reshapes what the agent sees; declares the observation space it produces.

    Example:
        >>> import gymnasium as gym
        >>> from envharness.transforms import DropField
        >>> space = gym.spaces.Dict({"image": gym.spaces.Discrete(3), "direction": gym.spaces.Discrete(4)})
        >>> DropField(field="direction").observation_space(space)
        Dict('image': Discrete(3))
    """

    kind: ClassVar[str] = "observation"

    def observation_space(self, space: Any) -> Any:
        """The space of observations this transform emits given the incoming ``space``."""
        return space

    def bind(self, memo: dict, space: Any) -> None:
        """Once per harness: note what this transform needs of the incoming ``space``."""

    def on_reset(self, memo: dict, rng: np.random.Generator) -> None:
        """Start an episode."""

    def observe(self, obs: Any, memo: dict, rng: np.random.Generator) -> Any:
        """Return the observation the agent sees."""
        return obs


class LinkTransform(Transform):
    """Runs another environment after this one within the same episode.

    Example:
        >>> from envharness.transforms import Chain
        >>> base, transforms = Chain(env_id="CartPole-v1").segment()
        >>> base.spec.id, transforms
        ('CartPole-v1', [])
    """

    kind: ClassVar[str] = "link"

    def segment(self) -> tuple[Any, list[Any]]:
        """The base env that runs after the current one, and the transforms (or their specs) that reshape it.

        The harness wraps them in a harness of its own, so that the segment's verdict is judged like any other.
        """
        raise NotImplementedError


def register_transform(cls: type[Transform]) -> type[Transform]:
    """Class decorator: make ``cls`` available by name to specs and the CLI."""
    if cls.kind not in KINDS:
        raise SpecError(f"{cls.__name__}.kind: got {cls.kind!r}; use one of {', '.join(KINDS)}")
    taken = TRANSFORMS.get(cls.__name__)
    if taken is not None and taken is not cls and taken.__module__.startswith("envharness.transforms."):
        # Specs name transforms; a catalog name must keep meaning the catalog class.
        raise SpecError(f"{cls.__name__}: a catalog transform already has this name; give your class another name")
    TRANSFORMS[cls.__name__] = cls
    return cls


# Modules a user imported by hand (``--import`` at the CLI), as (module name, file or None).
_IMPORTED: list[tuple[str, str | None]] = []


def remember_import(name: str, file: str | None = None) -> None:
    """Note a user module that worker processes must import too (see :func:`user_modules`)."""
    if (name, file) not in _IMPORTED:
        _IMPORTED.append((name, file))


def user_modules() -> list[tuple[str, str | None]]:
    """The user modules a worker process needs to import to know this process's transforms and policies.

    Those named with ``--import``, and every module defining a registered transform outside the
    catalog (its file too, for a module loaded from a path).
    """
    import sys

    found = list(_IMPORTED)
    for cls in TRANSFORMS.values():
        module = cls.__module__
        if module.startswith("envharness.") or module in ("__main__", "__mp_main__"):
            continue
        file = getattr(sys.modules.get(module), "__file__", None)
        if (module, file) not in found and (module, None) not in found:
            found.append((module, file))
    return found


def load_file_module(name: str, file: str | Path) -> Any:
    """Import the Python file ``file`` as module ``name`` (kept in ``sys.modules``), or return it if already there."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def import_modules(modules: list[tuple[str, str | None]]) -> None:
    """Import what :func:`user_modules` listed (in a worker process)."""
    import importlib
    import sys

    for name, file in modules:
        if name in sys.modules:
            continue
        try:
            try:
                importlib.import_module(name)
            except ImportError:
                if file is None:
                    raise
                load_file_module(name, file)
        except Exception:  # noqa: BLE001 - a module this worker cannot import: a spec that needs it says so by name
            sys.modules.pop(name, None)


def get_transform(name: str) -> type[Transform]:
    """The transform class registered under ``name``."""
    try:
        return TRANSFORMS[name]
    except KeyError:
        close = [n for n in TRANSFORMS if n.lower() == name.lower()]
        hint = (
            f"did you mean {close[0]!r}?"
            if close
            else "run `envharness transforms` for the catalog, or import the module that registers it (at the CLI: --import MODULE)"
        )
        raise UnknownTransformError(f"transform name {name!r} is not registered; {hint}") from None


def transform_from_spec(spec: Any) -> Transform:
    """Build a transform from a :class:`Transform`, a ``{"name", "params"}`` dict or a TransformSpec."""
    if isinstance(spec, Transform):
        return spec
    if hasattr(spec, "model_dump"):
        spec = spec.model_dump()
    if not isinstance(spec, dict) or "name" not in spec:
        raise SpecError(f"transform: got {spec!r}; give a Transform or a dict with 'name' and 'params'")
    params = spec.get("params") or {}
    if not isinstance(params, dict):
        raise SpecError(f"{spec['name']}.params: got {params!r}; give an object of parameter values")
    return get_transform(str(spec["name"]))(**params)
