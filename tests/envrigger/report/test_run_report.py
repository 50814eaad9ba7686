"""The report of a loop run (RUN/report.html) as a user sees it in Chromium, and `envrigger report` on a finished and an interrupted run."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from envharness.cli import run_cli
from envrigger.cli import app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package chromium; .ci/run installs it)"),
    pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason="needs the sb3 extra"),
]
SECTIONS = (
    "Held-out levels of the original env",
    "Validation and training by round",
    "What each arm trained on",
    "Candidates and gates",
    "Admitted components",
    "Interaction each arm spent",
    "Configuration and versions",
)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]  # fmt: skip


def shown(page, tmp_path, name):
    """The page as Chromium draws it: its DOM, and a screenshot's pixels."""
    flags = [*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / f"{name}.png"
    subprocess.run([CHROMIUM, *flags, "--window-size=1200,2400", f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    from PIL import Image

    return dom, np.asarray(Image.open(shot).convert("RGB"))


def test_a_run_writes_its_report_and_tensorboard_and_report_rebuilds_it_finished_or_not(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["run", "MiniGrid-DoorKey-6x6-v0", "--learner", "ppo", "--arms", "original,plr,rigger", "--rounds", "2",
            "--budget-steps", "1024", "--collect-episodes", "10", "--eval-episodes", "20", "--val-episodes", "10",
            "--candidates", "2", "--credit-chunks", "0", "-o", str(run)]  # fmt: skip
    assert run_cli(app, args, "envrigger") == 0
    page = run / "report.html"
    html = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html)  # nothing fetched: the file stands alone
    dom, pixels = shown(page, tmp_path, "finished")
    for section in SECTIONS:
        assert section in dom, section
    assert dom.count("<img") >= 1 and "rigger − original" in dom and "rigger − plr" in dom  # paired over held-out levels
    summary = json.loads(json.dumps([json.loads(line) for line in [(run / "final.json").read_text()]]))[0]
    for arm in ("original", "plr", "rigger"):
        assert f"{summary['arms'][arm]['heldout']['success']:.3f}" in dom
    assert "verifier_integrity" in dom  # each candidate's gates, admitted or not
    lines = ((pixels[..., 0] < 80) & (pixels[..., 1] > 90) & (pixels[..., 1] < 160) & (pixels[..., 2] > 150)).sum()  # matplotlib's blue
    assert lines > 30, lines
    assert list((run / "tensorboard" / "rigger").glob("events.out.tfevents.*")) and list((run / "tensorboard" / "loop").glob("events.*"))

    # An interrupted run: no held-out evaluation yet, and the page says so.
    (run / "final.json").unlink()
    page.unlink()
    assert run_cli(app, ["report", str(run)], "envrigger") == 0
    assert f"wrote {page}" in capsys.readouterr().out.replace("\n", "")
    dom, _ = shown(page, tmp_path, "interrupted")
    assert "Not finished: no held-out evaluation yet" in dom and "Validation and training by round" in dom


def test_report_refuses_what_is_not_a_run_in_one_line(tmp_path, capsys):
    assert run_cli(app, ["report", str(tmp_path / "missing")], "envrigger") == 2
    (tmp_path / "empty").mkdir()
    assert run_cli(app, ["report", str(tmp_path / "empty")], "envrigger") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "is not a directory" in err[0] and "no loop run here" in err[1]
