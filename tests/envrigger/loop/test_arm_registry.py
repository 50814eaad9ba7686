"""An arm is one registered unit: the stock arms, the config's refusals, and a new arm added as one module (CONTRIBUTING.md's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from loop_cases import SMALL
from pydantic import ValidationError

from envrigger.loop import ARMS, LoopConfig, run_loop
from envrigger.loop.arms import ARM_CLASSES, check_arms, register_arm, registered
from envrigger.loop.arms.base import ArmPlan, LoopArm
from envrigger.loop.samplers import Fixed

STOCK = ["original", "original-select", "dr", "dr-any", "plr", "accel", "plr-random", "rigger-noreplay", "rigger"]


@pytest.fixture()
def extra_arm():
    """Register arms for one test and take them out after, whatever happened."""
    added: list[str] = []

    def add(cls: type[LoopArm]) -> type[LoopArm]:
        register_arm(cls)
        added.append(cls.name)
        return cls

    yield add
    for name in added:
        ARM_CLASSES.pop(name, None)


def _contributing_arm() -> dict:
    text = (Path(__file__).resolve().parents[3] / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text[text.index("- **A new arm**") :]
    block = section[section.index("```python") + len("```python") : section.index("```", section.index("```python") + 9)]
    code = "\n".join(line[2:] for line in block.splitlines())  # the list item's indent
    namespace: dict = {}
    exec(compile(code, "CONTRIBUTING.md", "exec"), namespace)
    return namespace


def test_the_stock_arms_are_registered_in_the_order_a_round_trains_them():
    assert list(registered()) == STOCK == list(ARMS)
    assert all(registered()[name].help for name in STOCK)


def test_the_config_refuses_unknown_repeated_and_lonely_arms_in_one_line():
    for arms, words in (
        (["original", "bogus"], "give distinct arms from original,original-select"),
        (["plr", "plr"], "give distinct arms"),
        (["plr-random"], "plr-random train on what the rigger arm admits; add rigger"),
    ):
        with pytest.raises(ValidationError, match=words):
            LoopConfig(**{**SMALL, "arms": arms})
    with pytest.raises(ValidationError, match="original-select keeps the better of two copies per credit chunk"):
        LoopConfig(**{**SMALL, "arms": ["original-select"], "credit_chunks": 0})
    assert check_arms(["rigger", "plr", "original"]) == ["original", "plr", "rigger"]


def test_a_new_arm_from_contributing_is_one_module_that_trains_beside_the_others_and_resumes(tmp_path, extra_arm):
    arm = extra_arm(_contributing_arm()["FixedDomainRandomization"])
    assert list(registered()).index("dr-fixed") == STOCK.index("dr") + 1  # order 25: after dr, before dr-any
    config = LoopConfig(**{**SMALL, "arms": ["dr-fixed", "original"], "dr_pool": 3, "rounds": 2})
    assert config.arms == ["original", "dr-fixed"]
    result = run_loop(tmp_path / "run", config)
    rounds = [r.arms["dr-fixed"] for r in result.rounds]
    assert rounds[0].train["envs"] == rounds[1].train["envs"] and len(rounds[0].train["envs"]) == 4  # one pool for the run
    assert all(len(r.train["picks"]) == 4 and min(r.train["picks"]) > 0 for r in rounds)
    for number, r in enumerate(result.rounds, 1):
        steps = {name: a.interaction.train for name, a in r.arms.items()}
        assert abs(steps["dr-fixed"] - steps["original"]) < 200 and r.arms["dr-fixed"].interaction.total == steps["dr-fixed"]
        assert list((tmp_path / "run").glob(f"dr-fixed-round-{number}.*"))  # its learner, saved for the resume
    final = result.final.arms["dr-fixed"]
    assert final.heldout is not None and final.heldout.episodes == SMALL["eval_episodes"]
    assert run_loop(tmp_path / "run").final == result.final  # a finished run resumes as itself
    assert arm.name in registered()


def test_an_arm_that_needs_another_is_refused_alone_and_an_arms_own_check_runs(extra_arm):
    @extra_arm
    class Follower(LoopArm):
        name, order, help, needs = "follower", 65, "trains on what plr replays", ("plr",)

        @classmethod
        def check(cls, config):
            if config.rounds < 2:
                raise ValueError("--arms: follower reads the round before; give --rounds 2 or more")

        def plan(self, rnd):
            return ArmPlan([self.run.base], Fixed())

    with pytest.raises(ValidationError, match="follower train on what the plr arm admits; add plr"):
        LoopConfig(**{**SMALL, "arms": ["follower", "original"]})
    with pytest.raises(ValidationError, match="follower reads the round before"):
        LoopConfig(**{**SMALL, "arms": ["follower", "plr"], "rounds": 1})
    assert LoopConfig(**{**SMALL, "arms": ["follower", "plr"]}).arms == ["plr", "follower"]


def test_an_arm_whose_name_is_a_path_taken_or_whose_stream_is_shared_is_refused(extra_arm):
    def arm(name, stream=None, label="x"):
        return type("Hostile", (LoopArm,), {"name": name, "order": 99, "help": label, "replay_stream": stream})

    for name in ("../rigger", "a/b", "Rigger", "", "dr--x", "-x"):
        with pytest.raises(ValueError, match="lower-case letters, digits and single hyphens"):
            register_arm(arm(name))
    with pytest.raises(ValueError, match="'rigger' is registered already"):
        register_arm(arm("rigger"))  # a plugin cannot swap the stock rigger arm for its own
    impostor = arm("rigger")
    impostor.__qualname__ = "Rigger"  # even under the stock class's own name
    with pytest.raises(ValueError, match="'rigger' is registered already"):
        register_arm(impostor)
    with pytest.raises(ValueError, match="replay stream 3 is plr's"):
        register_arm(arm("plr-twin", stream=3))
    with pytest.raises(ValueError, match="give it a help line"):
        register_arm(arm("quiet", label=""))
    assert registered()["rigger"].__module__ == "envrigger.loop.arms.rigger" and "plr-twin" not in registered()
