"""Doctests that need a Docker engine, or the ``textworld`` extra, skip without it, except in CI, where they must run.

Also: the suite behaves the same in one process and under ``pytest-xdist``.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

# The doctests that play TextWorld games.
TEXTWORLD_DOCTESTS = ("textworld_games.TextWorldEnv", "adapters.textworld.TextWorldAdapter", "reference.TextWorldSolver")


def pytest_configure(config):
    # xdist's workers start with COLUMNS=80 in their environment; the CLIs' consoles read it at
    # import, so output would wrap where a one-process run does not. The same width everywhere:
    # what a non-terminal gets without COLUMNS (see envharness.cli.console).
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("COLUMNS") == "80":
        del os.environ["COLUMNS"]


# The longest tests (each a minute or more on the 2-core CI machine), run first: under
# xdist's work stealing a long test that starts last is the whole run's tail.
LONGEST_FIRST = (
    "tests/envrigger/agents/test_real_model.py::test_envrigger_run_of_a_real_model_agent_with_the_same_model_as_proposer_counts_every_answer",
    "tests/envrigger/loop/test_ray_seeds.py::test_seeds_on_a_two_node_cluster_match_a_local_run_and_a_dead_node_only_reruns_its_seed",
    "tests/first_hour/test_first_hour.py::test_the_first_hour_through_the_cli_in_fresh_venvs",
    "tests/peers/test_peer_suites.py::test_minigrid_own_tests_pass_on_wrapped_envs_but_for_named_refusals",
    "tests/envrigger/loop/test_llm_proposer.py::test_the_loop_with_a_chat_agent_it_does_not_train_reshapes_and_evaluates_through_the_cli",
    "tests/benchmarks/test_benchmarks.py::test_a_variant_is_measured_on_validation_levels_only_paired_by_seed",
    "tests/benchmarks/test_skills_heldout.py::test_three_arms_on_the_same_heldout_levels_with_intervals_and_a_finished_seed_is_never_redone",
    "tests/faults/test_faults.py::test_kill_9_at_seeded_moments_during_a_loop_then_resume_gives_the_uninterrupted_result",
    "tests/security/test_judge_attacks.py::test_docker_reference_fix_passes[add]",
    "tests/envrigger/integrations/test_agentlightning.py::test_a_local_env_dry_run_converts_from_a_served_agent_lightning_store_with_the_cli",
    "tests/benchmarks/test_benchmarks.py::test_every_suite_benchmark_is_valid_and_has_unseen_levels_to_hold_out",
    "tests/benchmarks/test_benchmarks.py::test_the_pipeline_writes_its_table_figure_and_facts_and_resumes",
    "tests/envrigger/test_envrigger_cli.py::test_the_console_scripts_exit_0_every_time_after_reading_parquet",
)


def pytest_xdist_auto_num_workers(config):
    # ``-n auto``: one worker more than cores. Many tests spend their time waiting (on servers,
    # subprocesses, Ray, a scripted model's latency), and a third worker fills those waits.
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(config, items):
    rank = {nodeid: i for i, nodeid in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))  # stable: every other test keeps its place
    if not os.environ.get("CI") and importlib.util.find_spec("textworld") is None:
        skip = pytest.mark.skip(reason='needs the textworld extra: pip install "envharness[textworld]"')
        for item in items:
            if item.nodeid.endswith(TEXTWORLD_DOCTESTS):
                item.add_marker(skip)
    needs_docker = [item for item in items if "docker_backend" in item.nodeid and item.nodeid.startswith("envharness/")]
    if not needs_docker or os.environ.get("CI"):
        return
    from envharness.sandbox import DockerSandbox

    if not DockerSandbox.available():
        skip = pytest.mark.skip(reason="no Docker engine on this machine (install docker.io and start dockerd)")
        for item in needs_docker:
            item.add_marker(skip)
