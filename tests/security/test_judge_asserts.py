"""The code-repair judge scores a test with several asserts as plain execution of the test does.

Each case is a test module and an implementation. The judge's verdict per test (the probes
run in the sandbox, the checks on the host) must equal what running the same test functions
directly says: several asserts in one test, tolerances, chained comparisons, mixed passing
and failing asserts, values assigned first and asserted on after. A module that returns a
constant must not pass a test whose later asserts it fails, and an expected value written
inside a tolerance never reaches the sandbox, where the module could read it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from envharness.envs.code_repair import compile_suite, run_tests

TESTS = textwrap.dedent(
    """
    import math
    from calc import f, g, words

    def test_two_asserts():
        assert f(1) == 2
        assert f(2) == 3

    def test_three_asserts_the_middle_one_hardest():
        assert f(0) == 1
        assert f(10) == 11
        assert f(-5) == -4

    def test_a_tolerance_with_its_expected_value_inside():
        assert abs(g(1.33) - 0.33) < 1e-6
        assert abs(g(2.5) - 1.5) < 1e-6

    def test_isclose_and_round():
        assert math.isclose(g(3.0), 2.0)
        assert round(g(0.25), 2) == -0.75

    def test_chained_and_boolean():
        assert 0 <= f(3) <= 10
        assert f(4) == 5 and not f(5) == 0
        assert f(6) in (7, 8) or f(6) == 100

    def test_assigned_first_then_asserted():
        result = f(41)
        assert result == 42
        assert result > 40
        assert -result == -42

    def test_values_the_host_transforms():
        assert len(words("a b c")) == 3
        assert sorted(words("b a")) == ["a", "b"]
        assert max(f(1), f(2)) == 3
        assert sum([f(1), f(2)]) * 2 == 10
    """
)

RIGHT = textwrap.dedent(
    """
    def f(x):
        return x + 1

    def g(x):
        return x - 1

    def words(text):
        return text.split()
    """
)

IMPLEMENTATIONS = {
    "right": RIGHT,
    "constant": "def f(x):\n    return 2\n\ndef g(x):\n    return 0.33\n\ndef words(text):\n    return ['a', 'b', 'c']\n",
    "right_for_small_inputs": RIGHT.replace("return x + 1", "return x + 1 if x < 5 else x"),
    "off_by_one": RIGHT.replace("return x + 1", "return x + 2"),
    "tolerance_missed": RIGHT.replace("return x - 1", "return x - 1.001"),
    "tolerance_met": RIGHT.replace("return x - 1", "return x - 1 + 1e-9"),
    "raises_late": RIGHT.replace("return x + 1", "if x > 40:\n        raise ValueError(x)\n    return x + 1"),
    "wrong_type": RIGHT.replace("return text.split()", "return tuple(text.split())"),
}

PLAIN = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import test_suite
    outcome = {}
    for name in sorted(n for n in dir(test_suite) if n.startswith("test_")):
        try:
            getattr(test_suite, name)()
            outcome[name] = "pass"
        except Exception:
            outcome[name] = "fail"
    print(json.dumps(outcome))
    """
)


def plain_outcome(tmp_path, module: str) -> dict[str, str]:
    """What running the test functions directly says (our own tests and modules: trusted code)."""
    (tmp_path / "calc.py").write_text(module)
    (tmp_path / "test_suite.py").write_text(TESTS)
    done = subprocess.run([sys.executable, "-c", PLAIN, str(tmp_path)], capture_output=True, text=True, check=True, timeout=60)
    return json.loads(done.stdout)


def judged(module: str, tests: str = TESTS, detail: bool = True) -> dict[str, str]:
    outcome = run_tests({"calc.py": module}, tests, "test_suite.py", "subprocess", detail=detail)
    return {name: "pass" if verdict == "pass" else "fail" for name, verdict in outcome.items()}


@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_the_judge_agrees_with_plain_execution_test_by_test(implementation, tmp_path):
    module = IMPLEMENTATIONS[implementation]
    expected = plain_outcome(tmp_path, module)
    assert judged(module) == expected
    assert judged(module, detail=False) == expected  # the hidden tests' strict judging scores the same


def test_the_cases_cover_passing_and_failing_tests_alike(tmp_path):
    outcomes = {name: plain_outcome(tmp_path, module) for name, module in IMPLEMENTATIONS.items()}
    assert all(v == "pass" for v in outcomes["right"].values())
    for test in outcomes["right"]:
        assert {o[test] for o in outcomes.values()} == {"pass", "fail"}, test  # each test passes for some and fails for others


def test_a_constant_does_not_pass_a_test_whose_second_assert_it_fails():
    verdict = run_tests({"calc.py": IMPLEMENTATIONS["constant"]}, TESTS, "test_suite.py", "subprocess")
    assert verdict["test_two_asserts"] == "fail: assert f(2) == 3 (f(2) gave 2)"  # the failing assert, with its own value


def test_a_failure_names_the_assert_that_failed_and_its_own_values():
    verdict = run_tests({"calc.py": IMPLEMENTATIONS["right_for_small_inputs"]}, TESTS, "test_suite.py", "subprocess")
    assert verdict["test_three_asserts_the_middle_one_hardest"] == "fail: assert f(10) == 11 (f(10) gave 10)"
    assert verdict["test_two_asserts"] == "pass"


def test_an_expected_value_inside_a_tolerance_stays_on_the_host():
    _, tests = compile_suite(TESTS, strict=True)
    sent = [source for test in tests for kind, source in test.steps if kind == "eval"]
    assert "g(1.33)" in sent and not any("0.33" in source or "1e-06" in source for source in sent)


def test_a_module_reading_the_probe_file_for_expected_values_gains_nothing():
    # The module returns a number its test's steps hold other than its own input: the expected
    # value, if it were ever sent in. The probe file is gone before the module runs, so it reads
    # the steps where they are, in its caller's frames in the process running its test. Only the inputs
    # are there, so it returns its input and fails.
    reader = textwrap.dedent(
        """
        import re, sys
        _frame, _found = sys._getframe(), None
        while _frame is not None and _found is None:
            _found = _frame.f_locals.get("steps")  # the runner's frame holds the test's steps
            _frame = _frame.f_back
        _saw = bool(_found)
        _numbers = [float(x) for x in re.findall(r"-?\\d+\\.\\d+", repr(_found))]

        def g(x):
            others = [n for n in _numbers if n != x]
            return others[0] if others else x

        def f(x):
            return x + 1 if _saw else x  # right only where it found the steps: the control below

        def words(text):
            return text.split()
        """
    )
    tolerance = "from calc import g\n\ndef test_tolerance():\n    assert abs(g(1.33) - 0.33) < 1e-6\n"
    control = "from calc import f\n\ndef test_f():\n    assert f(1) == 2\n"
    assert run_tests({"calc.py": reader}, control, "test_hidden_suite.py", "subprocess", detail=False) == {"test_f": "pass"}
    assert run_tests({"calc.py": reader}, tolerance, "test_hidden_suite.py", "subprocess", detail=False) == {"test_tolerance": "fail"}
    assert run_tests({"calc.py": RIGHT}, tolerance, "test_hidden_suite.py", "subprocess", detail=False) == {"test_tolerance": "pass"}


@pytest.mark.parametrize(
    "assertion",
    ["2 ** f(10 ** 7) == 0", "'x' * f(10 ** 9) == ''", "[0] * f(10 ** 9) == []", "f(1) ** f(10 ** 5) == 0"],
)
def test_arithmetic_the_host_would_choke_on_fails_the_test_at_once(assertion):
    tests = f"from calc import f\n\ndef test_huge():\n    assert {assertion}\n"
    assert run_tests({"calc.py": RIGHT}, tests, "test_suite.py", "subprocess", detail=False) == {"test_huge": "fail"}
