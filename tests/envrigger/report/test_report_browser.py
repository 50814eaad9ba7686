"""The HTML diagnosis as a user sees it: opened in a real headless Chromium, self-contained, with pictures."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from planted_walkers import SometimesLava  # the lava-prone walker (tests/planted_walkers.py)

from envrigger.diagnose import diagnose
from envrigger.report import render_html
from envrigger.rollout import rollout

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package chromium; .ci/run installs it)")


def test_the_report_opens_in_chromium_with_frames_of_what_went_wrong(tmp_path):
    from PIL import Image

    run = rollout("MiniGrid-LavaGapS6-v0", lambda env: SometimesLava(env, 0.3), seeds=range(60), out=tmp_path / "lava")
    report = diagnose(run)
    page = render_html(report, run)
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)  # nothing fetched: the file stands alone
    lava = next(f for f in report.findings if f.name == "terminal_cause:lava")
    assert page.count('alt="episode ') >= 2 and f"Episode {lava.evidence[0].episode_id}, steps" in page
    assert "forward" in page  # MiniGrid's own action names, not bare integers
    html = tmp_path / "report.html"
    html.write_text(page)
    shot = tmp_path / "report.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip
    subprocess.run([CHROMIUM, *flags, "--window-size=1200,1600", f"--screenshot={shot}", html.as_uri()], capture_output=True, timeout=120)
    assert shot.is_file()
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    # The page as drawn: text, tables and the frames' lava orange and goal green, not a blank or broken page.
    orange = ((pixels[..., 0] > 200) & (pixels[..., 1] > 120) & (pixels[..., 1] < 190) & (pixels[..., 2] < 80)).sum()
    green = ((pixels[..., 1] > 200) & (pixels[..., 0] < 100) & (pixels[..., 2] < 100)).sum()
    assert orange > 500 and green > 500, (orange, green)
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "terminal_cause:lava" in dom and dom.count("<img") >= 3
