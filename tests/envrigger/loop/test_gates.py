"""Gates are one protocol: registered once, run in order in one fail-closed loop; a new gate is one module."""

from __future__ import annotations

import pytest
from loop_cases import LAKE, NEAR, SEEDS, STOCK_GATES, candidate

from envrigger.loop.gates import GATES, Gate, GateResult, register_gate
from envrigger.loop.validate import ValidationConfig, Validator
from envrigger.policies import RandomPolicy


def validator(tmp_path) -> Validator:
    env = LAKE.build()
    try:
        return Validator(
            RandomPolicy(env.action_space, seed=0),
            LAKE,
            tmp_path / "v",
            ValidationConfig(backend="serial", min_rollouts=30, max_rollouts=90),
        )
    finally:
        env.close()


@pytest.fixture()
def extra_gate():
    """Register a gate for one test and take it out after, whatever happened."""
    added: list[str] = []

    def add(cls: type[Gate]) -> type[Gate]:
        register_gate(cls)
        added.append(cls.name)
        return cls

    yield add
    for name in added:
        GATES.pop(name, None)


def test_the_stock_gates_are_registered_in_the_order_they_run():
    assert list(GATES) == STOCK_GATES
    assert [g.order for g in GATES.values()] == sorted(g.order for g in GATES.values())


def test_a_registered_gate_runs_in_its_place_and_its_refusal_stops_validation(tmp_path, extra_gate):
    seen: list[int] = []

    @extra_gate
    class Refuses(Gate):
        name, order = "refuses_example", 45  # after learnability, before targeting

        def run(self, context, seeds):
            seen.append(len(seeds))
            assert "store" in context.notes  # the learnability rollouts are there for it
            return GateResult(gate=self.name, passed=False, detail="refused by the example")

    result = validator(tmp_path).validate(candidate(NEAR), SEEDS)
    assert not result.passed and result.error is None
    assert [g.gate for g in result.gates] == ["verifier_integrity", "solvability", "no_shortcut", "learnability", "refuses_example"]
    assert seen == [8]  # the first reference_rollouts seeds, its default


def test_a_gate_left_undecided_with_nobody_to_decide_refuses(tmp_path, extra_gate):
    @extra_gate
    class Undecided(Gate):
        name, order = "undecided_example", 5

        def run(self, context, seeds):
            return None

    result = validator(tmp_path).validate(candidate(NEAR), SEEDS)
    assert all(g.passed for g in result.gates) and len(result.gates) == 6  # every stock gate passed...
    assert not result.passed  # ...and the undecided one still refuses: fail closed


def test_a_gate_that_raises_refuses_with_its_error_in_one_line(tmp_path, extra_gate):
    @extra_gate
    class Broken(Gate):
        name, order = "broken_example", 15

        def run(self, context, seeds):
            raise RuntimeError("the example broke\nsecond line")

    result = validator(tmp_path).validate(candidate(NEAR), SEEDS)
    assert not result.passed and result.error == "RuntimeError: the example broke"
    assert [g.gate for g in result.gates] == ["verifier_integrity"]


def test_a_gate_that_does_not_apply_is_not_required(tmp_path, extra_gate):
    @extra_gate
    class Never(Gate):
        name, order = "never_example", 15

        def applies(self, context):
            return False

        def run(self, context, seeds):
            raise AssertionError("must not run")

    assert validator(tmp_path).validate(candidate(NEAR), SEEDS).passed


def test_two_gates_of_one_name_are_refused_and_a_nameless_one_too():
    class Twin(Gate):
        name = "learnability"

    with pytest.raises(ValueError, match="registered already"):
        register_gate(Twin)

    class Nameless(Gate):
        pass

    with pytest.raises(ValueError, match="needs a name"):
        register_gate(Nameless)
    assert list(GATES) == STOCK_GATES


def test_outside_a_round_the_transfer_gate_does_not_apply(tmp_path):
    v = validator(tmp_path)
    result = v.validate(candidate(NEAR), SEEDS)
    assert result.passed and "transfer" not in [g.gate for g in result.gates]
    assert v.gate("transfer").steps == 0  # type: ignore[attr-defined]
    with pytest.raises(KeyError, match="no gate named 'nope'"):
        v.gate("nope")


def test_the_new_gate_example_in_contributing_runs_as_written(tmp_path, extra_gate):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text[text.index("- **A new gate**") :]
    block = section[section.index("```python") + len("```python") : section.index("```", section.index("```python") + 9)]
    code = "\n".join(line[2:] for line in block.splitlines())  # the list item's indent
    namespace: dict = {}
    exec(compile(code, "CONTRIBUTING.md", "exec"), namespace)  # registers VariedLevels
    extra_gate(namespace["VariedLevels"])  # taken out again after the test
    result = validator(tmp_path).validate(candidate(NEAR), SEEDS)
    varied = next(g for g in result.gates if g.gate == "varied_levels")
    assert varied.passed and varied.statistic["levels"] > 1 and result.passed
