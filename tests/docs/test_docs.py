"""The Python examples in README.md and docs/ run as written, each page top to bottom."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envharness.transforms import TRANSFORMS

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p)], ids=lambda p: p.name)
def test_python_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    registered = dict(TRANSFORMS)
    namespace = {"__name__": "docs_example"}
    try:
        for block in _blocks(page):
            exec(compile(block, f"<{page.name} example>", "exec"), namespace)
    finally:  # examples may register their own transforms; keep the catalog as shipped
        TRANSFORMS.clear()
        TRANSFORMS.update(registered)


def test_docs_have_python_examples():
    assert sum(len(_blocks(p)) for p in PAGES) >= 4
