"""What every perf script shares: machine facts and versions, interleaved timing, the JSON result."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACKAGES = ("envharness", "gymnasium", "minigrid", "numpy", "pyarrow", "ray", "stable-baselines3", "torch")


def facts() -> dict[str, Any]:
    """Versions of the packages that set the figures, and the machine they ran on."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {
        "versions": versions,
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count(), "load_1min_at_start": load},
    }


def interleaved(variants: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Wall seconds of each variant, ``repeats`` times, taking turns so drift on a shared machine hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def ratio_range(numerator: list[float], denominator: list[float]) -> dict[str, float]:
    """Per-repeat ratios (the pairs ran back to back): their median, the lowest and highest, and the best-of ratio."""
    pairs = sorted(a / b for a, b in zip(numerator, denominator, strict=True))
    return {"median": statistics.median(pairs), "low": pairs[0], "high": pairs[-1], "best_of": min(numerator) / min(denominator)}


def write_result(path: str | Path, name: str, config: dict[str, Any], figures: dict[str, Any]) -> None:
    result = {
        "benchmark": name,
        "config": config,
        "figures": figures,
        **facts(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    Path(path).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {path}")
