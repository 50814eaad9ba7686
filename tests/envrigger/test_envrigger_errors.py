"""envrigger.errors: one family of errors, each printed by the command line as one line with exit code 2."""

from __future__ import annotations

import pytest

from envharness.command_line import run_cli
from envharness.errors import EnvHarnessError, UserError
from envrigger import errors
from envrigger.cli import app


def test_every_envrigger_error_derives_from_envriggererror_and_so_from_envharnesserror():
    classes = [c for c in vars(errors).values() if isinstance(c, type) and c.__module__ == "envrigger.errors"]
    assert {c.__name__ for c in classes} >= {"TrajectoryError", "LibraryError", "LedgerError", "RolloutError", "AgentError"}
    assert all(issubclass(c, errors.EnvriggerError) and issubclass(c, EnvHarnessError) for c in classes)


@pytest.mark.parametrize(
    "args, error, words",
    [
        (["library", "list", "{tmp}/nowhere/library.db"], errors.LibraryError, "does not exist"),
        (["ledger", "list", "{tmp}/nowhere.db"], errors.LedgerError, "does not exist"),
    ],
)
def test_library_and_ledger_errors_are_named_for_them_and_one_line_with_exit_code_2(tmp_path, capsys, args, error, words):
    from envrigger.ledger import Ledger
    from envrigger.loop.library import Library

    opened = {errors.LibraryError: lambda p: Library(p, create=False), errors.LedgerError: Ledger}[error]
    path = args[-1].format(tmp=tmp_path)
    with pytest.raises(error, match=words):
        opened(path)
    argv = [a.format(tmp=tmp_path) for a in args]
    assert run_cli(app, argv, "envrigger", known=(UserError, FileNotFoundError, ValueError, OSError)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("envrigger: error:") and words in err


def test_an_unknown_backend_is_a_rollout_error(tmp_path):
    from envrigger.rollout import rollout

    with pytest.raises(errors.RolloutError, match="backend: got 'gpu'"):
        rollout("CartPole-v1", backend="gpu", out=tmp_path / "run")
    assert not (tmp_path / "run").exists()
