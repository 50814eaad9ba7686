"""Attacks on validation a copy skips: what a copy, a construction or an assignment makes obeys the bounds JSON obeys.

Root cause (outside review, class 3): pydantic's ``model_copy(update=...)`` and
``model_construct`` store what they are given without validating it, so an object made
that way escaped the bounds the same object read from JSON obeys, and was refused when
read back: a multi-seed run past the largest master seed saved a ``loop.json`` its own
``--resume`` refused, a chat agent's wall limit derived from ``--episode-timeout`` went
past the harness's bound, and a spec built in code held a number its JSON may not. A
count had no upper bound at all (the skill memory's ``max_skills``, more lessons than a
harness may carry; a textq ``bits`` of 60 in ``learner_params``). The rule now: every model
the project copies or constructs is an :class:`envharness.validated.ValidatedModel`, whose
copies with changes, constructions and assignments are validated like its JSON; every size
and count has an upper bound (each model field and element, each learner parameter, each
number a command takes), and a derived value is kept inside it (or refused in one line)
before the copy is made.

Written as a hostile caller (a script, a plugin, a hand-edited file) would: each attack
names the path it takes around validation.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types
import typing
from collections.abc import Callable
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel

import envharness
from envharness import HarnessSpec
from envharness.sandbox.base import Limits
from envharness.transforms import StepBudget
from envharness.transforms.base import TRANSFORMS, Transform, transform_from_spec
from envrigger.agents import AgentHarness, default_harness
from envrigger.agents.harness import ContextPolicy, ParseRules, Sampling
from envrigger.ledger.factors import Cell, EnvFactor, HarnessFactor, ModelFactor
from envrigger.loop import LoopConfig
from envrigger.loop.config import ValidationConfig
from envrigger.skills.memory import Skill

LAKE = HarnessSpec(env_id="FrozenLake-v1")
TEXT_ENV = "envharness/CodeRepair-v0"


def read_back(model: type[Any], data: dict[str, Any]) -> Any:
    """The project's JSON path for ``model``: what a file of ``data`` would be read as."""
    text = json.dumps(data)
    if model is HarnessSpec:
        return HarnessSpec.from_json(text)
    if issubclass(model, Transform):
        return transform_from_spec({"name": model.__name__, "params": json.loads(text)})
    return model.model_validate_json(text)


# What each attack starts from (valid), and the change that breaks a bound the JSON path holds.
BROKEN: dict[str, tuple[Callable[[], Any], dict[str, Any]]] = {
    "a spec without an env id": (lambda: LAKE, {"env_id": ""}),
    "a spec with a field no spec has": (lambda: LAKE, {"run_this": "rm -rf /"}),
    "a spec kwarg wider than any spec holds": (lambda: LAKE, {"env_kwargs": {"max_episode_steps": 10**30}}),
    "a spec kwarg that is not finite": (lambda: LAKE, {"env_kwargs": {"is_slippery": math.inf}}),
    "a transform's parameter": (lambda: StepBudget(max_steps=5), {"max_steps": 0}),
    "a loop's master seed": (lambda: LoopConfig(spec=LAKE), {"seed": 10_001}),
    "a loop's rounds": (lambda: LoopConfig(spec=LAKE), {"rounds": 0}),
    "a loop's learner": (lambda: LoopConfig(spec=LAKE), {"learner": "oracle"}),
    "validation's first batch": (lambda: ValidationConfig(backend="serial"), {"min_rollouts": 2}),
    "an agent's wall limit": (AgentHarness, {"episode_seconds": 1e9}),
    "an agent's lessons": (AgentHarness, {"skills": ["x" * 10_000]}),
    "an agent's sampling": (Sampling, {"temperature": 9.0}),
    "a lesson's round": (lambda: Skill(text="Read the listed commands first.", source="extractor"), {"round": -1}),
    "a ledger's model": (lambda: ModelFactor(kind="policy", policy="random"), {"kind": "oracle"}),
    "a sandbox's memory": (Limits, {"memory_mb": 10**9}),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_copy_with_changes_is_refused_where_json_of_it_is(case):
    made, update = BROKEN[case]
    original = made()
    model = type(original)
    with pytest.raises(ValueError):  # the JSON path refuses it...
        read_back(model, {**original.model_dump(mode="json"), **update})
    try:
        copied = original.model_copy(update=update)
    except ValueError:
        return  # ...and so does the copy: fixed
    # Made anyway: what was made cannot be read back from its own JSON.
    with pytest.raises(ValueError):
        read_back(model, copied.model_dump(mode="json"))
    pytest.fail(f"{model.__name__}.model_copy(update={update!r}) made what its JSON refuses")


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_construction_without_validation_is_refused_too(case):
    made, update = BROKEN[case]
    original = made()
    fields = {name: getattr(original, name) for name in type(original).model_fields}
    with pytest.raises(ValueError):
        type(original).model_construct(**{**fields, **update})


@pytest.mark.parametrize(
    ("made", "name", "value"),
    [
        (lambda: LoopConfig(spec=LAKE), "rounds", 10**9),
        (AgentHarness, "max_calls", 0),
        (ContextPolicy, "keep_turns", -1),
        (ParseRules, "strip", "x" * 1000),
        (Limits, "pids", 10**9),
    ],
)
def test_an_assignment_is_validated_like_the_json(made, name, value):
    target = made()
    with pytest.raises(ValueError):
        setattr(target, name, value)


def test_a_copy_keeps_what_a_copy_keeps():
    """Private attributes (equal compute's worst case), the fields given, nested models and a deep copy's independence."""
    settings = LoopConfig(spec=LAKE, budget_counts="all").validation()
    assert settings.worst_case
    serial = settings.model_copy(update={"backend": "serial"})
    assert serial.worst_case and serial.backend == "serial" and serial.min_rollouts == settings.min_rollouts
    harness = default_harness(TEXT_ENV).model_copy(update={"context": {"keep_turns": 3}})
    assert isinstance(harness.context, ContextPolicy) and harness.context.keep_turns == 3  # validated into the model
    assert harness.model_fields_set >= {"context"} and AgentHarness.from_json(harness.to_json()) == harness
    config = LoopConfig(spec=LAKE)
    deep = config.model_copy(update={"seed": 3}, deep=True)
    assert deep.seed == 3 and deep.spec == config.spec and deep.arms is not config.arms
    assert StepBudget(max_steps=5).model_copy(update={"max_steps": 6}) == StepBudget(max_steps=6)


# -- surfaces: where the project itself made a copy past a bound ----------------------------------------------


def test_a_multi_seed_run_past_the_largest_master_seed_is_refused_before_anything_is_written(tmp_path):
    """Before: seed 10001's config was a copy past ``seed <= 10000``; the run saved it, and its own --resume refused it."""
    out = tmp_path / "seeds"
    tiny = ["--learner", "qlearning", "--allow-seen-levels", "--rounds", "1", "--budget-steps", "500", "--collect-episodes", "5"]
    tiny += ["--eval-episodes", "10", "--val-episodes", "10", "--candidates", "1", "--backend", "serial"]
    done = subprocess.run(
        [sys.executable, "-m", "envrigger.cli", "run", "FrozenLake-v1", *tiny, "--seed", "10000", "--seeds", "2", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    for saved in out.rglob("loop.json"):  # whatever was written reads back
        LoopConfig.saved(saved.read_text(), where=str(saved))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "--seeds" in lines[0] and "10000" in lines[0], done.stderr[-1500:]
    assert not out.exists() or not any(out.iterdir())


def test_a_chat_agents_wall_limit_from_a_long_episode_timeout_stays_inside_the_harness_bound():
    """Before: ``--episode-timeout 1e9`` made the harness copy's ``episode_seconds`` 1e9, past its 7-day bound."""
    from envrigger.agents import ChatAgentFactory, Endpoint
    from envrigger.cli import _wall_limits

    factory = ChatAgentFactory(default_harness(TEXT_ENV), Endpoint("http://127.0.0.1:9/v1", "m"))
    chosen, hard = _wall_limits(factory, 1e9, 60.0)
    soft = chosen.harness.episode_seconds
    assert soft is not None and soft <= AgentHarness.model_fields["episode_seconds"].metadata[-1].le and hard >= soft
    assert AgentHarness.from_json(chosen.harness.to_json()) == chosen.harness


def test_a_skill_memory_larger_than_a_harness_may_carry_is_refused_when_the_learner_is_made():
    """Before: ``max_skills`` had no upper bound, so a memory grew past the 200 lessons a harness may carry."""
    from envrigger.loop.learners import make_learner

    agent = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "harness": default_harness(TEXT_ENV).model_dump(), "api_key_env": "PATH"}
    env = envharness.wrap(TEXT_ENV, task="add")
    try:
        with pytest.raises(ValueError, match="max_skills"):
            make_learner("skills", env, agent=agent, max_skills=1000)
        with pytest.raises(ValueError, match="max_skills"):
            make_learner("skills", env, agent=agent, max_skills=0)
        assert make_learner("skills", env, agent=agent, max_skills=200).max_skills == 200
    finally:
        env.close()


@pytest.mark.parametrize(
    ("learner", "params", "named"),
    [("textq", {"bits": 60}, "bits"), ("ppo", {"n_envs": 10**6}, "n_envs"), ("ppo", {"net_arch": [64, 10**9]}, "net_arch")],
)
def test_a_learners_sizes_and_counts_in_loop_json_are_bounded(learner, params, named, tmp_path):
    """Before: ``learner_params`` reached the learner unchecked; a textq ``bits`` of 60 asks for 2**60 weights."""
    with pytest.raises(ValueError, match=named):
        LoopConfig(spec=LAKE, learner=learner, learner_params=params)
    saved = tmp_path / "loop.json"
    saved.write_text(json.dumps({"spec": LAKE.model_dump(), "learner": learner, "learner_params": params}))
    with pytest.raises(ValueError, match=f"{saved}: .*{named}"):
        LoopConfig.saved(saved.read_text(), where=str(saved))


def test_a_loop_config_copied_per_seed_keeps_a_saved_run_readable(tmp_path):
    """The copies a multi-seed run makes inside the bound are read back by --resume exactly."""
    config = LoopConfig(spec=LAKE, learner="qlearning", seed=9_999)
    for seed in (9_999, 10_000):
        copied = config.model_copy(update={"seed": seed})
        path = tmp_path / f"seed-{seed}.json"
        path.write_text(copied.model_dump_json())
        assert LoopConfig.saved(path.read_text(), where=str(path)) == copied


# -- every size and count has an upper bound ------------------------------------------------------------------

SETTINGS: list[type[BaseModel]] = [
    HarnessSpec,
    envharness.spec.TransformSpec,
    ValidationConfig,
    LoopConfig,
    AgentHarness,
    Sampling,
    ContextPolicy,
    ParseRules,
    Skill,
    Limits,
    ModelFactor,
    HarnessFactor,
    EnvFactor,
    Cell,
]
"""The models a user, a file or a proposer fills in (with every registered transform): each field a size or count."""


def _has_upper(metadata: list[Any]) -> bool:
    for meta in metadata:
        if isinstance(meta, (annotated_types.Le, annotated_types.Lt, annotated_types.MaxLen)):
            return True
        if getattr(meta, "max_length", None) is not None or _has_upper(list(getattr(meta, "metadata", []))):
            return True
    return False


def unbounded(annotation: Any, metadata: list[Any], where: str) -> list[str]:
    """The places in a field's type (the field itself, each element, each value) with no upper bound."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return unbounded(inner, [*metadata, *extra], where)
    if origin in (typing.Union, types.UnionType):
        return [place for arg in typing.get_args(annotation) for place in unbounded(arg, metadata, where)]
    if origin is typing.Literal or annotation in (type(None), bool, typing.Any):
        return []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return []  # walked as a model of its own
    kind = origin or annotation
    args = typing.get_args(annotation)
    found = []
    if kind in (int, float, str, list, dict, set) and not _has_upper(metadata):
        found.append(where)
    if kind is tuple and (not args or args[-1] is Ellipsis) and not _has_upper(metadata):
        found.append(where)
    if kind in (list, tuple, set):
        found += [p for i, arg in enumerate(args) if arg is not Ellipsis for p in unbounded(arg, [], f"{where}[{i}]")]
    if kind is dict and args:
        found += unbounded(args[1], [], f"{where}{{}}") if args[1] is not typing.Any else []
    return found


def nested(models: list[type[BaseModel]]) -> list[type[BaseModel]]:
    """``models`` and every model their fields hold (a transform's ``Demo``, a spec's ``TransformSpec``), each once."""
    found: list[type[BaseModel]] = []

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.append(annotation)
                for field in annotation.model_fields.values():
                    visit(field.annotation)
        for arg in typing.get_args(annotation):
            visit(arg)

    for model in models:
        visit(model)
    return found


@pytest.mark.parametrize("model", nested([*SETTINGS, *TRANSFORMS.values()]), ids=lambda m: m.__name__)
def test_every_size_and_count_of_a_setting_has_an_upper_bound(model):
    missing = [place for name, field in model.model_fields.items() for place in unbounded(field.annotation, list(field.metadata), name)]
    assert missing == [], f"{model.__name__}: no upper bound on {', '.join(missing)}"


def test_every_model_the_project_copies_validates_its_copies():
    """The settings, every transform, and the diagnosis's findings (copied per symptom) are ValidatedModels."""
    from envharness.validated import ValidatedModel
    from envrigger.diagnose.model import Finding

    for model in (*SETTINGS, *TRANSFORMS.values(), Finding):
        assert issubclass(model, ValidatedModel), model.__name__


def test_the_walk_finds_an_unbounded_element_of_a_bounded_container():
    assert unbounded(tuple[float, float], [], "band") == ["band[0]", "band[1]"]
    assert unbounded(list[str], [annotated_types.MaxLen(4)], "stop") == ["stop[0]"]


def test_every_count_and_size_a_command_takes_has_an_upper_bound():
    """Every number an option or argument takes has a ``max`` (``run``'s loop settings: their field's bound, checked by the model)."""
    import typer

    from envharness.cli import app as envharness_app
    from envrigger.cli import app as envrigger_app

    missing = []

    def walk(command: Any, path: str) -> None:
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, f"{path} {name}")
        for param in getattr(command, "params", []):
            kind = getattr(getattr(param, "type_descriptor", None), "annotation", None)
            if kind not in (int, float) or getattr(param, "max", None) is not None:
                continue
            field = LoopConfig.model_fields.get(param.name) if path.endswith(" run") else None
            if field is None or unbounded(field.annotation, list(field.metadata), param.name):
                missing.append(f"{path} {param.opts[0] if param.opts else param.name}")

    walk(typer.main.get_command(envrigger_app), "envrigger")
    walk(typer.main.get_command(envharness_app), "envharness")
    assert missing == []
