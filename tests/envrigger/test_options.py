"""`envrigger run`'s loop settings are LoopConfig's fields: one default, one set of bounds, one help text each."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import typer
from pydantic import BaseModel, Field

from envrigger.cli import NOT_RUN_FLAGS, RUN_FLAGS, app
from envrigger.loop.config import LoopConfig, ValidationConfig
from envrigger.options import Flag, model_options


def _run_params() -> dict[str, Any]:
    command: Any = typer.main.get_command(app)  # typer's own click: a group of commands
    return {p.name: p for p in command.commands["run"].params if p.name}


def test_every_run_setting_has_its_fields_default_bounds_and_help():
    params = _run_params()
    for name, flag in RUN_FLAGS.items():
        info, option = LoopConfig.model_fields[name], params[name]
        default = info.get_default(call_default_factory=True)
        assert option.default == (",".join(default) if isinstance(default, list) else default), name
        for item in info.metadata:  # closed bounds reach the option; open ones are the model's to say
            if hasattr(item, "ge"):
                assert option.min == item.ge, name
            if hasattr(item, "le"):
                assert option.max == item.le, name
        described = (info.description or "")[:30].lower()
        assert flag.help is not None or described in (option.help or "").lower(), name


def test_every_loop_setting_is_an_option_or_says_why_not():
    # A new LoopConfig field is decided once: on the command line (RUN_FLAGS) or not, with the reason.
    assert set(RUN_FLAGS) | set(NOT_RUN_FLAGS) == set(LoopConfig.model_fields)
    assert not set(RUN_FLAGS) & set(NOT_RUN_FLAGS)
    assert all(reason.strip() for reason in NOT_RUN_FLAGS.values())


def test_every_validation_setting_is_a_loop_setting_of_the_same_name_default_and_bounds():
    # One name per setting: the gate thresholds and validation budgets are set in loop.json or on the command line.
    for name, info in ValidationConfig.model_fields.items():
        loops = LoopConfig.model_fields[name]
        assert (info.default, info.metadata, info.description) == (loops.default, loops.metadata, loops.description), name
    assert LoopConfig(spec={"env_id": "FrozenLake-v1"}).validation() == ValidationConfig()
    gates = {"reference_rollouts": 3, "solvable_min": 0.9, "solvable_fraction": 0.1, "region_min_share": 0.6}
    gates |= {"novelty_success_tol": 0.2, "novelty_length_tol": 0.3, "candidate_max_steps": 500, "rollout_batch": 4}
    saved = LoopConfig.saved({"spec": {"env_id": "FrozenLake-v1"}, **gates})  # as loop.json holds them
    assert {name: getattr(saved.validation(), name) for name in gates} == gates
    assert all(f"--{name.replace('_', '-')}" in _run_params()[name].opts for name in gates if name in RUN_FLAGS)


def test_the_learner_help_names_every_learner_kind():
    from envrigger.loop.learners import LEARNERS

    assert all(kind in (LoopConfig.model_fields["learner"].description or "") for kind in LEARNERS)


def test_a_value_out_of_a_fields_bounds_is_one_line_naming_the_option_and_exit_2(tmp_path):
    for args, said in (
        (["--credit-retire", "0"], "--credit-retire: Input should be greater than 0"),
        (["--confidence-is-not-an-option"], "No such option"),
        (["--backend", "nope"], "--backend: got 'nope'; use one of serial, process, ray"),
        (["--candidates", "0"], "--candidates"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "envrigger.cli", "run", "FrozenLake-v1", *args, "-o", str(tmp_path / "run")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    assert not (tmp_path / "run").exists()  # nothing stored


def test_model_options_reads_a_models_fields():
    class Settings(BaseModel):
        names: list[str] = Field(default_factory=lambda: ["a", "b"], description="names to use")
        limit: float | None = Field(None, ge=0.5, description="an optional limit")

    names, limit = model_options(Settings, {"names": Flag(kind=str), "limit": Flag(("--cap", "-c"), metavar="X")})
    assert names.default.default == "a,b" and names.annotation is str and names.default.help == "Names to use."
    assert limit.default.param_decls == ("--cap", "-c") and limit.annotation is float and limit.default.min == 0.5


def test_a_switch_on_by_default_can_be_turned_off_and_one_off_by_default_stays_a_single_flag():
    class Settings(BaseModel):
        eager: bool = Field(True, description="on unless told")
        lazy: bool = Field(False, description="off unless told")

    eager, lazy = model_options(Settings, {"eager": Flag(), "lazy": Flag()})
    assert eager.default.param_decls == ("--eager/--no-eager",) and lazy.default.param_decls == ("--lazy",)
    command: Any = typer.main.get_command(app)
    run = command.commands["run"]
    assert run.make_context("run", ["-o", "x", "--no-step-in"]).params["step_in"] is False
    assert run.make_context("run", ["-o", "x"]).params["step_in"] is True
    assert run.make_context("run", ["-o", "x", "--step-in"]).params["step_in"] is True
