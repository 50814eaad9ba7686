"""TensorBoard for a loop run: each arm's PPO training through SB3's own logger, and the loop's own scalars.

Contains :func:`available` and :class:`LoopBoard`. When the ``tensorboard`` package is
installed (``pip install "envharness[tensorboard]"``), ``envrigger run`` writes
``RUN/tensorboard/ARM/`` (SB3's ``rollout/ep_rew_mean``, ``rollout/ep_len_mean``,
``rollout/success_rate``, ``train/*`` losses and entropy, at the arm's timestep) and
``RUN/tensorboard/loop/`` (per round: each arm's validation success and interaction, the
library's size, candidates, admissions and the gate that refused each of the others).
Open it with ``tensorboard --logdir RUN/tensorboard``. Logging reads what training does and
changes none of it: a run with and without it trains the same bits. A folder of these that is
a symbolic link (a run from someone else) is refused, never written through.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from envharness.files import check_inside, make_directories_inside


def available() -> bool:
    """Whether TensorBoard's event writer can be used here (the ``tensorboard`` package and torch)."""
    return importlib.util.find_spec("tensorboard") is not None and importlib.util.find_spec("torch") is not None


class LoopBoard:
    """The loop's scalars, one event file under ``RUN/tensorboard/loop``, a point per round.

    Example:
        >>> import tempfile, pathlib
        >>> if available():
        ...     board = LoopBoard(pathlib.Path(tempfile.mkdtemp()))
        ...     board.round({"round": 1, "arms": {"original": {"validation": {"success": 0.5}, "interaction": {"total": 100}}}})
        ...     board.close()
    """

    def __init__(self, out: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.out = Path(out)
        self.directory = self.out / "tensorboard"
        self._writer = SummaryWriter(str(make_directories_inside(self.directory / "loop", self.out)))

    def arm_directory(self, arm: str) -> Path:
        """Where ``arm``'s learner logs its training (checked: not a link planted in the run)."""
        check_inside(self.directory / arm, self.out, folder=True)
        return self.directory / arm

    def round(self, summary: dict[str, Any]) -> None:
        """Write one finished round's scalars (its number is the step)."""
        step, add = int(summary["round"]), self._writer.add_scalar
        for arm, record in summary.get("arms", {}).items():
            add(f"validation_success/{arm}", float(record["validation"]["success"]), step)
            add(f"interaction_env_steps/{arm}", float(record.get("interaction", {}).get("total", 0)), step)
        if "library_size" in summary:
            add("library/size", float(summary["library_size"]), step)
        if "candidates" in summary:
            add("library/candidates", float(summary["candidates"]), step)
            add("library/admitted", float(len(summary.get("admitted", []))), step)
            for gate, count in summary.get("rejected_by", {}).items():
                add(f"refused_by/{gate}", float(count), step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


__all__ = ["LoopBoard", "available"]
