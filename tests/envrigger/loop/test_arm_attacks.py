"""Attacks on the arms as registered units, the typed round records and the renamed validation settings.

Written by a reviewer who did not build them (2026-12-07): 12 of the attacks broke the code as
first landed and pass now. An arm is trusted Python code, so these are the mistakes a plugin
arm can make by accident (a name that is a file of the loop's, a plan of mixed spaces, a
sampler that hands out held-out levels, a record field another arm owns), not a sandbox.
Every arm a test registers is removed again by the ``registry`` fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from loop_cases import LAKE, SHORT_DOORKEY, SMALL

from envharness import HarnessSpec
from envrigger.errors import ArmError
from envrigger.loop import LoopConfig, run_loop
from envrigger.loop.arms import ARM_CLASSES, check_arms, register_arm, registered
from envrigger.loop.arms.base import ArmPlan, LoopArm
from envrigger.loop.arms.dr import DomainRandomization
from envrigger.loop.arms.plr import PrioritizedLevelReplay
from envrigger.loop.config import ValidationConfig
from envrigger.loop.library import Library
from envrigger.loop.results import RoundSummary
from envrigger.loop.samplers import Fixed, Uniform

REPO = Path(__file__).resolve().parents[3]
ENVRIGGER = str(Path(sys.executable).parent / "envrigger")
TINY = {**SMALL, "rounds": 1, "budget_steps": 1500}


@pytest.fixture()
def registry():
    """Register arms for one test; afterwards the registry is exactly what it was (an overwritten stock arm comes back)."""
    registered()  # the stock arms are loaded before the snapshot
    before = dict(ARM_CLASSES)
    yield register_arm
    ARM_CLASSES.clear()
    ARM_CLASSES.update(before)


def plain(name: str, order: int = 99, **attrs) -> type[LoopArm]:
    """An arm that trains on the original env, with ``attrs`` (hooks, ``needs``...) as given."""

    def plan(self, rnd):
        return ArmPlan([self.run.base], Fixed())

    return type("Hostile", (LoopArm,), {"name": name, "order": order, "help": "hostile", "plan": plan, **attrs})


def committed(out: Path) -> list[dict]:
    if not (out / "library.db").is_file():
        return []
    library = Library(out / "library.db", create=False)
    try:
        return library.rounds()
    finally:
        library.close()


# -- attack 3: the registry and hostile arms ----------------------------------------------------------------------


def test_a_subclass_of_a_replay_arm_cannot_share_its_replay_stream_by_inheritance(registry):
    """Inheriting plr's replay_stream (3) is the same sharing as declaring it."""
    twin = type("Twin", (PrioritizedLevelReplay,), {"name": "plr-twin", "order": 41, "help": "plr again"})
    with pytest.raises(ValueError, match="replay stream 3 is plr's"):
        registry(twin)


def test_an_arm_named_as_the_loops_level_record_is_refused(registry):
    """Its learner would be levels-round-N.json, the loop's level record, overwritten after it is saved."""
    with pytest.raises(ValueError, match="the loop's own files are named so"):
        registry(plain("levels"))


def test_an_arm_named_as_the_rigger_arms_shadow_is_refused(registry):
    """Its learner would be saved where the rigger arm keeps its shadow (rigger-shadow-round-N), which credit compares with."""
    intruder = type("Intruder", (DomainRandomization,), {"name": "rigger-shadow", "order": 99, "help": "random levels"})
    with pytest.raises(ValueError, match="the loop's own files are named so"):
        registry(intruder)


def test_a_plan_that_mixes_observation_spaces_is_refused_naming_the_arm_and_commits_nothing(tmp_path, registry):
    """The 4x4 lake (Discrete(16)) beside the 8x8's Discrete(64): one learner cannot train on both."""

    def plan(self, rnd):
        small = HarnessSpec(env_id="FrozenLake-v1", env_kwargs={"map_name": "4x4", "is_slippery": False})
        return ArmPlan([self.run.base, small], Uniform(2, np.random.default_rng([self.run.config.seed, rnd.number, 11])))

    registry(plain("two-maps", plan=plan))
    out = tmp_path / "run"
    with pytest.raises(ArmError, match="the two-maps arm's plan trains on FrozenLake-v1 with spaces Discrete.16."):
        run_loop(out, LoopConfig(**{**TINY, "arms": ["original", "two-maps"], "heldout": False}))
    assert committed(out) == []


def test_an_arm_whose_plan_raises_is_named_in_one_line_and_commits_nothing(tmp_path, registry):
    """No round record, no learner, no level record: ``--resume`` restarts round 1; the arm's exception is chained."""

    def plan(self, rnd):
        raise RuntimeError("plan exploded")

    registry(plain("exploder", plan=plan))
    out = tmp_path / "run"
    with pytest.raises(ArmError, match="the exploder arm could not plan round 1: RuntimeError: plan exploded") as caught:
        run_loop(out, LoopConfig(**{**TINY, "arms": ["original", "exploder"]}))
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert committed(out) == []
    assert not list(out.glob("*-round-1.json")) and not list(out.glob("levels-round-*.json"))


def test_an_arm_needing_an_arm_no_module_registers_is_refused_by_the_config_in_one_line(registry):
    """Registering it is allowed (its need may register later); asking for it names the missing arm, not 'add ghost'."""
    registry(plain("ghostly", needs=("ghost",)))
    with pytest.raises(ValueError, match="ghostly needs the ghost arm, which no module registers"):
        LoopConfig(**{**TINY, "arms": ["original", "ghostly"]})


def test_an_arm_without_an_order_is_refused_so_later_lookups_keep_working(registry):
    """Registered, it would break every later registered() (every config, the CLI) with an AttributeError."""
    lacking = type("NoOrder", (LoopArm,), {"name": "no-order", "help": "no place in the round", "plan": lambda self, rnd: None})
    with pytest.raises(ValueError, match="give it an order"):
        registry(lacking)
    assert "no-order" not in registered()


def test_a_plugin_that_copies_the_stock_modules_name_cannot_replace_the_rigger_arm(registry):
    """__module__ and __qualname__ are a class's to set: only the registered class itself is the same arm."""
    impostor = plain("rigger")
    impostor.__module__, impostor.__qualname__ = "envrigger.loop.arms.rigger", "Rigger"
    with pytest.raises(ValueError, match="registered already"):
        registry(impostor)


@pytest.mark.parametrize(
    "write",
    [
        lambda rnd: rnd.note("vandal", "admitted", [999]),  # the rigger arm's field, though no rigger arm runs
        lambda rnd: rnd.note("vandal", "library_size", 0),
        lambda rnd: rnd.note_arm("vandal", "admitted", [999]),  # not a per-arm map
        lambda rnd: rnd.played("original", rnd.get("arms")["original"]),  # an arm's round, recorded twice
    ],
)
def test_an_arm_cannot_write_round_fields_another_arm_or_the_loop_owns_and_nothing_is_committed(tmp_path, registry, write):
    registry(plain("vandal", end_round=lambda self, rnd: write(rnd)))
    out = tmp_path / "run"
    with pytest.raises(ArmError, match="may not write|recorded already"):
        run_loop(out, LoopConfig(**{**TINY, "arms": ["original", "vandal"], "heldout": False}))
    assert committed(out) == []


def test_an_arm_cannot_declare_a_round_field_another_arm_or_the_loop_owns(registry):
    for field in ("admitted", "round", "stage_seconds"):
        with pytest.raises(ValueError, match=f"the round's '{field}' is the"):
            registry(plain("claimer", round_fields=(field,)))


def test_an_arm_that_renumbers_the_round_is_refused_before_anything_is_committed(tmp_path, registry):
    """round 7 inside library round 1 would send the final pick to original-round-7."""
    registry(plain("renumber", begin_round=lambda self, rnd: rnd.note("renumber", "round", 7)))
    out = tmp_path / "run"
    with pytest.raises(ArmError, match="may not write the round's 'round': the loop's"):
        run_loop(out, LoopConfig(**{**TINY, "rounds": 2, "arms": ["original", "renumber"]}))
    assert committed(out) == []


def test_a_plugin_samplers_held_out_seed_stops_the_run_before_a_step_is_trained_on_it(tmp_path, registry):
    """A sampler's draw() may return any seed: every level the original env is reset to is checked and recorded, not only fresh() ones."""

    class Peek(Fixed):
        def __init__(self, seeds):
            self.seeds, self.i = seeds, 0

        def draw(self, fresh):
            self.i += 1
            return 0, self.seeds[self.i % len(self.seeds)]

    def plan(self, rnd):
        return ArmPlan([self.run.base], Peek(self.run.split.heldout_seeds[:3]))

    registry(plain("peek", plan=plan))
    config = dict(
        spec=SHORT_DOORKEY,
        learner="ppo",
        learner_params={"n_envs": 2, "n_steps": 64, "batch_size": 64},
        rounds=1,
        budget_steps=256,
        collect_episodes=8,
        eval_episodes=20,
        val_episodes=10,
        candidates_per_round=1,
        min_rollouts=8,
        max_rollouts=8,
        backend="serial",
        arms=["original", "peek"],
    )
    with pytest.raises(ArmError, match="the sampler picked seed 1000001, a held-out or validation level"):
        run_loop(tmp_path / "run", LoopConfig(**config))
    assert committed(tmp_path / "run") == []


# -- the renamed validation settings ------------------------------------------------------------------------------


@pytest.mark.parametrize("old", [{"max_steps": 5}, {"timeout_s": 0.5}, {"batch": 3}])
def test_validation_config_refuses_a_setting_by_its_old_name_and_names_the_new_one(old):
    """ValidationConfig(max_steps=5) was a 5-step candidate budget before the rename; silently ignored it would be the default."""
    new = {"max_steps": "candidate_max_steps", "timeout_s": "candidate_timeout_s", "batch": "rollout_batch"}
    ((name, _),) = old.items()
    with pytest.raises(ValueError, match=f"{name} is {new[name]} now"):
        ValidationConfig(**old)
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        ValidationConfig(candidate_max_step=5)  # a misspelling too


# -- attack 4: typed records ---------------------------------------------------------------------------------------

OLD_ROUND = {  # a round as the code before the typing committed it: interaction holds only the kinds spent, no schema_version
    "round": 1,
    "arms": {
        "original": {
            "train": {"steps": 3023, "episodes": 190, "picks": [190], "wins": [0], "skipped_reserved": 0, "refused": 0,
                      "env_errors": 0, "env_error_examples": [], "replays": 0, "search_steps": 0, "envs": ["original"]},
            "interaction": {"train": 3023, "collect": 0, "validate": 0, "total": 3023},
            "validation": {"success": 0.0, "ci": [0.0, 0.16], "episodes": 20, "mean_length": 15.0, "steps_to_success": None,
                           "env_steps": 300, "levels": 1, "diversity": {"action_entropy": 0.1}, "seen_in_training": None},
        }
    },
    "wall_time": 1.5,
    "stage_seconds": {"original": {"train": 1.0, "select": 0.2}},
}  # fmt: skip


def test_a_round_written_before_the_typing_reads_back_equal_and_its_interaction_sums_alike():
    """An old-code record validates, reads the kinds it lacks as 0, and dumps back to itself (plus the version)."""
    record = RoundSummary.model_validate(OLD_ROUND)
    assert record.schema_version == 0 and record == OLD_ROUND
    assert {k: v for k, v in record.dump().items() if k != "schema_version"} == OLD_ROUND
    steps = record.arms["original"].interaction
    assert (steps.transfer, steps.credit, steps.search, steps.get("credit", 0), steps.total) == (0, 0, 0, 0, 3023)


def _one_round_run(out: Path, **overrides) -> None:
    run_loop(out, LoopConfig(**{**TINY, "arms": ["original"], **overrides}))


def _misshape(db: Path, number: int, change) -> None:
    library = Library(db)
    record = library.rounds()[number - 1]
    change(record)
    library.complete_round(number, record)  # through the library, so its checksum is right: a shape, not a tampering
    library.close()


def test_envrigger_report_and_resume_name_the_round_and_field_of_a_round_of_the_wrong_shape_in_one_line(tmp_path):
    """Exit 2, one line naming the library, the round and the field."""
    out = tmp_path / "run"
    _one_round_run(out)
    _misshape(out / "library.db", 1, lambda r: r.update(rejected_by=["novelty"]))
    (out / "final.json").unlink()
    for args in (["report", str(out)], ["run", "--resume", str(out)]):
        done = subprocess.run([ENVRIGGER, *args], capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "library.db: round 1: rejected_by:" in done.stderr


def test_heldout_report_names_a_round_of_the_wrong_shape_in_one_line_and_exits_2(tmp_path):
    """benchmarks/heldout.py --report reads a seed's rounds typed; a damaged one is named, not a traceback."""
    from envrigger.loop import run_seeds

    out, suite = tmp_path / "out", tmp_path / "suite"
    suite.mkdir()
    config = LoopConfig(**{**TINY, "arms": ["original"], "budget_steps": 800})
    run_seeds(out / "lake", config, seeds=2)
    benchmark = {"name": "lake", "domain": "lake", "title": "lake", "spec": json.loads(LAKE.model_dump_json()), "learner": "qlearning"}
    (suite / "lake.json").write_text(json.dumps(benchmark))
    (out / "lake" / "result.json").unlink(missing_ok=True)
    _misshape(out / "lake" / "seed-0" / "library.db", 1, lambda r: r["arms"]["original"]["validation"].update(diversity=[0.1]))
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "heldout.py"), "--suite", str(suite), "--report", "-o", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=300, env={**os.environ, "MPLBACKEND": "Agg"},
    )  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr[-600:]
    assert "seed-0/library.db: round 1: arms.original.validation.diversity" in done.stderr


# -- attack 5: the command line -------------------------------------------------------------------------------------


def _envrigger(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([ENVRIGGER, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_run_help_lists_every_stock_arm_with_its_help(tmp_path):
    shown = " ".join(_envrigger("run", "--help", cwd=tmp_path).stdout.split())
    for name, arm in registered().items():
        assert f"{name} ({' '.join(arm.help.split())})" in shown


@pytest.mark.parametrize("arms", ["bogus", "plr-random", "rigger-noreplay,original", "original,original", "", "Rigger"])
def test_a_bad_or_lonely_arm_exits_2_in_one_line_and_leaves_no_directory(tmp_path, arms):
    done = _envrigger("run", "FrozenLake-v1", "--allow-seen-levels", "--arms", arms, "-o", "out", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "--arms" in done.stderr
    assert not (tmp_path / "out").exists()


def test_original_select_without_credit_chunks_exits_2_in_one_line(tmp_path):
    done = _envrigger("run", "FrozenLake-v1", "--arms", "original-select", "--credit-chunks", "0", "-o", "out", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "original-select" in done.stderr
    assert not (tmp_path / "out").exists()


PLUGIN = """
from envrigger.loop.arms import register_arm
from envrigger.loop.arms.base import ArmPlan, LoopArm
from envrigger.loop.samplers import Fixed


@register_arm
class Mine(LoopArm):
    name, order, help = "mine-arm", 5, "my own arm"

    def plan(self, rnd):
        return ArmPlan([self.run.base], Fixed())
"""


def test_run_help_lists_an_arm_registered_by_a_module_given_to_import(tmp_path):
    """docs/envrigger.md: '`envrigger run --help` lists every registered arm', a plugin's too."""
    (tmp_path / "plugin.py").write_text(PLUGIN)
    done = _envrigger("run", "--import", str(tmp_path / "plugin.py"), "--help", cwd=tmp_path)
    assert done.returncode == 0
    assert "mine-arm" in done.stdout


def test_check_arms_orders_a_registered_plugin_like_the_stock_arms(registry):
    registry(plain("after-all", order=99))
    assert check_arms(["after-all", "rigger", "original"]) == ["original", "rigger", "after-all"]
