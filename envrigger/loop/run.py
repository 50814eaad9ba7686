"""The loop of one master seed: every round trains every arm, the rigger round admits, and the end evaluates held-out.

Contains :func:`run_loop`. Every round ends with an atomic checkpoint of every learner
and a committed round record in the library database, so a run killed at any point (even
``kill -9``) resumes at the first unfinished round without losing admitted components or
completed rounds.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from envharness.adapters.base import digest
from envharness.files import write_text_atomically
from envharness.reading import read_text
from envrigger.data import DirectoryLock, TrajectoryError
from envrigger.loop.arms import registered
from envrigger.loop.arms.base import RoundState, RunState, Stage
from envrigger.loop.board import LoopBoard, available
from envrigger.loop.config import LoopConfig
from envrigger.loop.evaluate import evaluate
from envrigger.loop.learners import load_learner
from envrigger.loop.levels import FIX_SAVED, LevelSplit, read_used_levels
from envrigger.loop.library import Library
from envrigger.loop.results import STEP_KINDS, ArmFinal, FinalResults, LevelCounts, LoopResult, RoundSummary, read_rounds
from envrigger.loop.train import learner_path


def quiet_stage(label: str, total: int) -> AbstractContextManager[Callable[[int], None]]:
    """A :data:`Stage` that shows nothing (the default: a library call prints no bars)."""
    return contextlib.nullcontext(lambda n: None)


def save_json(path: Path, data: Any) -> None:
    """Write a loop's JSON record (``state.json``, ``result.json``, ...) atomically, indented for reading."""
    write_text_atomically(path, json.dumps(data, indent=2))


def _load_levels(out: Path) -> dict[str, set[str]]:
    """Every level id each use played in the rounds before (empty at the start)."""
    rounds = sorted(out.glob("levels-round-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    return read_used_levels(rounds[-1]) if rounds else {}


def run_loop(
    out: str | Path,
    config: LoopConfig | None = None,
    on_round: Callable[[RoundSummary], None] | None = None,
    log: Callable[[str], None] = lambda message: None,
    stage: Stage = quiet_stage,
) -> LoopResult:
    """Run (or, without ``config``, resume) a loop in ``out``; returns every round's summary and the final results.

    ``final`` (:class:`~envrigger.loop.results.FinalResults`, also ``out/final.json``) holds,
    per arm, the round picked on validation levels and its held-out result, the env steps
    spent, and the level-overlap check (see :class:`LevelSplit`). ``on_round`` gets each
    round's :class:`~envrigger.loop.results.RoundSummary` as the library commits it.
    ``stage`` shows the long stages (drawing levels, training) as they go; the CLI passes
    progress bars.
    """
    out = Path(out)
    with one_writer(out):  # one writer per loop directory: a second run or --resume is refused
        return _run_loop(out, config, on_round, log, stage)


@contextlib.contextmanager
def one_writer(out: Path) -> Iterator[None]:
    """Hold ``out``'s :class:`DirectoryLock`; a directory made here and left empty by a refusal is removed again."""
    if out.exists() and not out.is_dir():
        raise TrajectoryError(f"{out} is a file; choose a directory for the run")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with DirectoryLock(out):
            yield
    except BaseException:
        if created and all(path.name == DirectoryLock.NAME for path in out.iterdir()):
            shutil.rmtree(out, ignore_errors=True)
        raise


def _resumed(out: Path, config: LoopConfig | None) -> tuple[LoopConfig, LoopResult | None]:
    """The run's config (given, or saved for ``--resume``) and, for a finished run resumed, its kept result."""
    config_path = out / "loop.json"
    if config is not None:
        if config_path.is_file():
            raise TrajectoryError(f"{out} already holds a loop run; resume it with `envrigger run --resume {out}` or pick a new directory")
        return config, None
    if not config_path.exists():
        raise TrajectoryError(f"--resume: {out} holds no loop run (no loop.json); start one with `envrigger run ENV -o {out}`")
    config = LoopConfig.saved(read_text(config_path, FIX_SAVED, TrajectoryError), where=str(config_path))
    if (out / "final.json").exists() and (out / "library.db").is_file():
        # A finished run needs nothing else: its kept record (loop.json, library.db, final.json) resumes as itself.
        finished = Library(out / "library.db", create=False, read_only=True)
        rounds = finished.rounds()
        finished.close()
        return config, LoopResult(rounds=read_rounds(rounds, str(out / "library.db")), final=FinalResults.load(out / "final.json"))
    return config, None


def _levels(out: Path, config: LoopConfig, log: Callable[[str], None], stage: Stage) -> LevelSplit:
    """The held-out and validation levels (drawn on a new run, read on a resumed one); writes ``loop.json`` and ``levels.json``."""
    split_path = out / "levels.json"
    if split_path.exists():
        split = LevelSplit.read(split_path)
    else:
        log("drawing held-out and validation levels")
        with stage("drawing levels", LevelSplit.draws(config)) as tick:
            split = LevelSplit.make(config.spec, config, tick=tick)  # refuses before anything is written
    if not (out / "loop.json").is_file():
        save_json(out / "loop.json", json.loads(config.model_dump_json()))
    if not split_path.is_file():
        save_json(split_path, json.loads(split.model_dump_json()))
    return split


def _run_loop(
    out: Path,
    config: LoopConfig | None,
    on_round: Callable[[RoundSummary], None] | None,
    log: Callable[[str], None],
    stage: Stage = quiet_stage,
) -> LoopResult:
    config, finished = _resumed(out, config)
    if finished is not None:
        return finished
    split = _levels(out, config, log, stage)
    library = Library(out / "library.db")
    probe = config.spec.build()
    run = RunState(out, config, split, library, probe, log, done=read_rounds(library.rounds(), str(out / "library.db")))
    arms = registered()
    for name in config.arms:
        run.arms[name] = arms[name](run)
    probe.close()
    board = LoopBoard(out) if available() else None  # TensorBoard, when installed: RUN/tensorboard/{ARM,loop}
    for number in range(len(run.done) + 1, config.rounds + 1):
        started = time.perf_counter()
        workdir = out / f"round-{number}"
        shutil.rmtree(workdir, ignore_errors=True)  # an unfinished round starts over
        workdir.mkdir(parents=True)
        owners = {key: arm.name for arm in run.arms.values() for key in arm.round_fields}
        rnd = RoundState(number, workdir, _load_levels(out), owners)
        for arm in run.arms.values():
            arm.begin_round(rnd)
        for arm in run.arms.values():
            rnd.played(arm.name, arm.play(rnd, stage, board))
        wall_time = time.perf_counter() - started
        for arm in run.arms.values():
            arm.end_round(rnd)
            arm.save(number)
        save_json(out / f"levels-round-{number}.json", {use: sorted(levels) for use, levels in rnd.used.items()})
        committed = rnd.summary(wall_time)
        library.complete_round(number, committed.dump())  # the commit point of the round
        run.done.append(committed)
        if board is not None:
            board.round(committed.dump())
        if on_round is not None:
            on_round(committed)
    library.close()
    if board is not None:
        board.close()
    final_path = out / "final.json"
    if not final_path.exists():
        save_json(final_path, _final(out, config, split, run.done, log).dump())
    final = FinalResults.load(final_path)  # what a resumed run returns too: equal, at the schema version written
    return LoopResult(rounds=run.done, final=final)


def _final(out: Path, config: LoopConfig, split: LevelSplit, rounds: list[RoundSummary], log: Callable[[str], None]) -> FinalResults:
    """Pick each arm's round on validation levels, then evaluate it once on the held-out levels."""
    used = _load_levels(out)
    probe = config.spec.build()
    arms: dict[str, ArmFinal] = {}
    for name in config.arms:
        best = max((r.arms[name].validation.success, r.round) for r in rounds)[1]  # ties go to the later round
        heldout = None
        if config.heldout:
            learner = load_learner(config.learner, learner_path(out, name, best), probe)
            log(f"held-out evaluation of the {name} arm (round {best}, picked on validation levels)")
            shutil.rmtree(out / f"heldout-{name}", ignore_errors=True)  # an evaluation a crash cut short starts over
            trained_on = used.get(f"{name}:train", set())
            heldout = evaluate(learner.policy(), config.heldout_base, split.heldout_seeds, out / f"heldout-{name}", config, trained_on)
        kinds = (*STEP_KINDS, "total")
        spent = {k: sum(int(r.arms[name].interaction.get(k, 0)) for r in rounds) for k in kinds}
        spent["select"] = sum(r.arms[name].validation.env_steps for r in rounds)
        validation = rounds[best - 1].arms[name].validation.success
        arms[name] = ArmFinal.model_validate({"round": best, "validation": validation, "heldout": heldout, "interaction": spent})
    probe.close()
    warnings = []
    rigger, original = arms.get("rigger"), arms.get("original")
    if rigger is not None and original is not None and rigger.heldout is not None and original.heldout is not None:
        if rigger.heldout.success < original.heldout.success:
            warnings.append(
                f"the rigger arm ended below the original-env baseline on held-out levels "
                f"({rigger.heldout.success:.3f} < {original.heldout.success:.3f}): its curriculum "
                "did not help here; `envrigger export` asks for --force"
            )
            log("warning: " + warnings[-1])
    allowed = config.rounds * config.budget_steps
    for name, arm in arms.items():
        if config.budget_counts == "all" and arm.interaction["total"] > 1.05 * allowed:
            warnings.append(
                f"the {name} arm took {arm.interaction['total']:,} env steps, {arm.interaction['total'] / allowed - 1:.0%} over the "
                f"{allowed:,} every arm was allowed: its overhead in a round exceeded a round's budget; raise --budget-steps, or "
                "lower --collect-episodes, --candidates or the credit's scoring (credit_episodes)"
            )
            log("warning: " + warnings[-1])
    counts: dict[str, Any] = {"disjoint": split.disjoint, "heldout": len(split.heldout_levels), "validation": len(split.validation_levels)}
    counts["heldout_digest"] = digest(sorted(split.heldout_levels))
    return FinalResults(arms=arms, warnings=warnings, levels=LevelCounts(**counts, overlap=split.check(used)))
