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

import numpy as np

from envharness.files import write_text_atomically
from envrigger.data import DirectoryLock, TrajectoryError
from envrigger.loop.arms import random_specs
from envrigger.loop.board import LoopBoard, available
from envrigger.loop.config import LoopConfig
from envrigger.loop.credit import REPLAY, Credit, chunked_training, credited_training
from envrigger.loop.evaluate import evaluate
from envrigger.loop.learners import load_learner, make_learner
from envrigger.loop.levels import LevelSplit
from envrigger.loop.library import Library
from envrigger.loop.mixture import TrainingEpisodes
from envrigger.loop.propose import transforms_label
from envrigger.loop.results import FinalResults, LoopResult, RoundSummary
from envrigger.loop.round import rigger_round
from envrigger.loop.samplers import PLR, Curriculum, Fixed, Uniform
from envrigger.loop.train import Arm, train_arm

SELECT_OFFSET = 50_000  # original-select's second copy trains on other seeds of each chunk's range than its first
Stage = Callable[[str, int], AbstractContextManager[Callable[[int], None]]]
"""``stage(label, total)`` opens a long stage; the context gives ``advance(n)``, called as its work is done."""


def quiet_stage(label: str, total: int) -> AbstractContextManager[Callable[[int], None]]:
    """A :data:`Stage` that shows nothing (the default: a library call prints no bars)."""
    return contextlib.nullcontext(lambda n: None)


def save_json(path: Path, data: Any) -> None:
    """Write a loop's JSON record (``state.json``, ``result.json``, ...) atomically, indented for reading."""
    write_text_atomically(path, json.dumps(data, indent=2))


def _load_levels(out: Path) -> dict[str, set[str]]:
    """Every level id each use played in the rounds before (empty at the start)."""
    rounds = sorted(out.glob("levels-round-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    saved = json.loads(rounds[-1].read_text()) if rounds else {}
    return {use: set(levels) for use, levels in saved.items()}


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


def _retired(summaries: list[dict[str, Any]], config: LoopConfig) -> set[str]:
    """The components the rigger arm mastered in an earlier round: won on more than the band's top share of enough episodes."""
    from envrigger.loop.round import mastered

    out: set[str] = set()
    for summary in summaries:
        trained = summary.get("arms", {}).get("rigger", {}).get("train", {})
        for h, wins, picks in zip(trained.get("components", []), trained["wins"][1:], trained["picks"][1:], strict=False):
            if mastered(wins, picks, config.band):
                out.add(h)
    return out


def _run_loop(
    out: Path,
    config: LoopConfig | None,
    on_round: Callable[[RoundSummary], None] | None,
    log: Callable[[str], None],
    stage: Stage = quiet_stage,
) -> LoopResult:
    config_path = out / "loop.json"
    if config is None:
        if not config_path.is_file():
            raise TrajectoryError(f"--resume: {out} holds no loop run (no loop.json); start one with `envrigger run ENV -o {out}`")
        config = LoopConfig.saved(config_path.read_text(), where=str(config_path))
        if (out / "final.json").is_file() and (out / "library.db").is_file():
            # A finished run needs nothing else: its kept record (loop.json, library.db, final.json) resumes as itself.
            finished = Library(out / "library.db", create=False)
            rounds = finished.rounds()
            finished.close()
            return LoopResult(rounds=[RoundSummary.model_validate(r) for r in rounds], final=FinalResults.load(out / "final.json"))
    elif config_path.is_file():
        raise TrajectoryError(f"{out} already holds a loop run; resume it with `envrigger run --resume {out}` or pick a new directory")
    base = config.spec
    probe = base.build()
    spaces = (probe.observation_space, probe.action_space)
    split_path = out / "levels.json"
    if split_path.is_file():
        split = LevelSplit.model_validate_json(split_path.read_text())
    else:
        log("drawing held-out and validation levels")
        with stage("drawing levels", LevelSplit.draws(config)) as tick:
            split = LevelSplit.make(base, config, tick=tick)  # refuses before anything is written
    if not config_path.is_file():
        out.mkdir(parents=True, exist_ok=True)
        save_json(config_path, json.loads(config.model_dump_json()))
    if not split_path.is_file():
        save_json(split_path, json.loads(split.model_dump_json()))
    reserved = split.reserved
    library = Library(out / "library.db")
    done = library.rounds()
    arms = []
    for name in config.arms:
        if done:
            learner = load_learner(config.learner, Arm(name, None).path(out, done[-1]["round"]), probe)
        else:
            learner = make_learner(config.learner, probe, config.seed, **config.learner_params)
        # The plr and rigger arms keep a replay buffer of levels across rounds (and resumes).
        streams = {"plr": 3, "rigger": 4, "plr-random": 5}
        replay = PLR(np.random.default_rng([config.seed, streams[name]])) if name in streams else None
        if replay is not None and done and (out / f"{name}-replay.json").is_file():
            replay.restore(json.loads((out / f"{name}-replay.json").read_text()))
        arms.append(Arm(name, learner, replay))
    board = LoopBoard(out) if available() else None  # TensorBoard, when installed: RUN/tensorboard/{ARM,loop}
    summaries = list(done)
    # The credit is part of the round's committed record, so a resumed run continues from the last finished round's.
    credit = Credit(config.credit_retire, done[-1].get("credit_state") if done else None)
    credited = "rigger" in config.arms and config.credit_chunks > 0 and config.learner != "none"
    shadow = None  # --credit-baseline shadow: the rigger arm's learner trained on the original env alone, across rounds
    if credited and config.credit_baseline == "shadow":
        if done:
            shadow = load_learner(config.learner, out / f"rigger-shadow-round-{done[-1]['round']}", probe)
        else:
            shadow = make_learner(config.learner, probe, config.seed, **config.learner_params)
    probe.close()
    for number in range(len(done) + 1, config.rounds + 1):
        started = time.perf_counter()
        workdir = out / f"round-{number}"
        shutil.rmtree(workdir, ignore_errors=True)  # an unfinished round starts over
        workdir.mkdir(parents=True)
        used = _load_levels(out)
        summary: dict[str, Any] = {"round": number, "arms": {}}
        retired = _retired(summaries, config) if config.retire_mastered else set()
        if retired:
            summary["retired"] = sorted(retired)
        for arm in arms:
            spent = {"train": 0, "collect": 0, "validate": 0}
            evidence = None
            sampler: Fixed
            if arm.name in ("rigger", "rigger-noreplay", "plr-random"):
                # As the round began: a round restarted after a crash does not see what its killed attempt admitted.
                present = library.components()
                current = [c for c in present if (c.round is None or c.round < number) and c.hash not in retired]
                if arm.name == "rigger" and credited:  # a component the original env's validation levels blamed trains no more
                    current = [c for c in current if c.hash not in credit.retired]
                components = [c.spec for c in current]
                if arm.name == "plr-random":  # as many components as the rigger arm trains on, drawn at random: no diagnosis
                    drawn = np.random.default_rng([config.seed, number, 5])
                    components = random_specs(base, drawn, len(components)) if components else []
                stream = {"rigger": 1, "plr-random": 5, "rigger-noreplay": 6}[arm.name]
                chooser = Curriculum(1 + len(components), np.random.default_rng([config.seed, number, stream]))
                if arm.replay is not None:
                    arm.replay.chooser = chooser
                    sampler = arm.replay
                else:  # rigger-noreplay: the curriculum alone, no replay of original levels
                    sampler = chooser
                specs = [base, *components]
                if arm.name == "rigger":
                    summary["library_size"] = len(components)
                    summary["library_version"] = library.version - sum(c.round == number for c in present)
                    evidence = TrainingEpisodes(config.collect_episodes, config.budget_steps // 2)
            elif arm.name in ("dr", "dr-any"):
                drawn = np.random.default_rng([config.seed, number, 2])
                kinds = ("state",) if arm.name == "dr" else ("state", "rule", "observation")
                pool = random_specs(base, drawn, config.dr_pool, kinds=kinds)
                specs, sampler = [base, *pool], Uniform(1 + len(pool), np.random.default_rng([config.seed, number, 2]))
            elif arm.name == "plr":
                assert arm.replay is not None
                specs, sampler = [base], arm.replay
            else:  # original, original-select
                specs, sampler = [base], Fixed()
            log(f"round {number}: training the {arm.name} arm on {len(specs)} env(s) for {config.budget_steps:,} steps")
            if board is not None and hasattr(arm.learner, "log_to"):
                arm.learner.log_to(board.arm_directory(arm.name))
            clock = time.perf_counter()
            with stage(f"training {arm.name}", config.budget_steps) as advance:
                if arm.name == "rigger" and credited:
                    pieces = [c.hash for c in current]
                    trained, record = credited_training(
                        workdir / "credit", arm, specs, pieces, sampler, config, number, reserved, credit, evidence, advance,
                        shadow=shadow,
                    )  # fmt: skip
                    spent["credit"] = record.pop("steps")
                    used.setdefault("rigger:credit", set()).update(record.pop("levels"))
                    record["retired_now"] = [p for p in record["retired"] if p in pieces or p == REPLAY]
                    trained["credit"] = record
                    log(
                        f"round {number}: credit chunks kept "
                        + ", ".join(f"{c['kept']} ({c['curriculum']:.2f} vs {c['original']:.2f} alone)" for c in record["chunks"])
                    )
                elif arm.name == "original-select":  # the credit's selection without reshaping: two copies on the original env
                    trained, record = credited_training(
                        workdir / "select", arm, specs, [], sampler, config, number, reserved, Credit(config.credit_retire), None,
                        advance, alone_offset=SELECT_OFFSET,
                    )  # fmt: skip
                    spent["credit"] = record.pop("steps")
                    used.setdefault("original-select:credit", set()).update(record.pop("levels"))
                    trained["credit"] = record
                    log(
                        f"round {number}: selection chunks kept "
                        + ", ".join(
                            f"the {'first' if c['kept'] == 'curriculum' else 'second'} copy ({c['curriculum']:.2f} vs {c['original']:.2f})"
                            for c in record["chunks"]
                        )
                    )
                elif arm.name == "original" and shadow is not None:  # the same training as the rigger arm's shadow, chunk for chunk
                    trained = chunked_training(arm, config, number, reserved, advance)
                else:
                    trained = train_arm(arm, specs, sampler, config, number, reserved, evidence, advance=advance)
            seconds = {"train": time.perf_counter() - clock}
            used.setdefault(f"{arm.name}:train", set()).update(trained.pop("levels"))
            # What the arm trained on, by name: the original and each reshaping (its picks are in this order).
            trained["envs"] = ["original", *(transforms_label(s.transforms) for s in specs[1:])]
            if arm.name == "rigger":  # which library component each of its picks after the first is (what retiring reads)
                trained["components"] = [c.hash for c in current]
            spent["train"] = trained["steps"]
            if trained.get("search_steps"):  # a start along a level's own solution: the search's env steps are this arm's interaction
                spent["search"] = trained["search_steps"]
            if evidence is not None and number < config.rounds:  # what the last round would admit, no round trains on
                per_component = {
                    c.hash: (int(w), int(n)) for c, w, n in zip(current, trained["wins"][1:], trained["picks"][1:], strict=True)
                }
                rigged = rigger_round(workdir, config, library, arm.learner, number, reserved, spaces, evidence, log, per_component)
                spent.update(collect=rigged.pop("collect_steps"), validate=rigged.pop("validate_steps"))
                transfer_steps, transfer_levels = rigged.pop("transfer_steps"), rigged.pop("transfer_levels")
                if config.transfer_steps:
                    spent["transfer"] = transfer_steps
                    used.setdefault("rigger:transfer", set()).update(transfer_levels)
                used.setdefault("rigger:collect", set()).update(rigged.pop("collect_levels"))
                used.setdefault("rigger:validate", set()).update(rigged.pop("validate_levels"))
                seconds.update(rigged.pop("seconds"))
                summary.update(rigged)
            spent["total"] = (
                spent["train"]
                + spent["collect"]
                + spent["validate"]
                + spent.get("transfer", 0)
                + spent.get("credit", 0)
                + spent.get("search", 0)
            )
            clock = time.perf_counter()
            scored = evaluate(arm.learner.policy(), base, split.validation_seeds, workdir / f"select-{arm.name}", config)
            seconds["select"] = time.perf_counter() - clock
            summary["arms"][arm.name] = {"train": trained, "interaction": spent, "validation": scored}
            before = summaries[-1]["arms"].get(arm.name, {}).get("validation") if summaries else None
            if before is not None and "diversity" in before and None not in scored["diversity"].values():
                from envrigger.ledger.attribution import collapse

                pair = [{"accepted": v["success"], **v["diversity"]} for v in (before, scored)]
                found = collapse(pair[0], pair[1]) if None not in pair[0].values() else None
                if found is not None:  # more uniform on the validation levels, and no better: it stopped exploring
                    summary.setdefault("arm_findings", {})[arm.name] = [found]
            summary.setdefault("stage_seconds", {})[arm.name] = seconds  # wall time by stage, like wall_time not stable
        summary["wall_time"] = time.perf_counter() - started
        for arm in arms:
            arm.learner.save(arm.path(out, number))
        if shadow is not None:
            shadow.save(out / f"rigger-shadow-round-{number}")
        for arm in arms:
            if arm.replay is not None:
                save_json(out / f"{arm.name}-replay.json", arm.replay.state())
        if credited:
            summary["credit_state"] = credit.state()
        save_json(out / f"levels-round-{number}.json", {use: sorted(levels) for use, levels in used.items()})
        committed = RoundSummary.model_validate(summary)
        summary = committed.dump()
        library.complete_round(number, summary)  # the commit point of the round
        summaries.append(summary)
        if board is not None:
            board.round(summary)
        if on_round is not None:
            on_round(committed)
    library.close()
    if board is not None:
        board.close()
    final_path = out / "final.json"
    if not final_path.is_file():
        save_json(final_path, FinalResults.model_validate(_final(out, config, split, summaries, log)).dump())
    final = FinalResults.load(final_path)  # what a resumed run returns too: equal, at the schema version written
    return LoopResult(rounds=[RoundSummary.model_validate(s) for s in summaries], final=final)


def _final(out: Path, config: LoopConfig, split: LevelSplit, summaries: list[dict[str, Any]], log: Callable[[str], None]) -> dict[str, Any]:
    """Pick each arm's round on validation levels, then evaluate it once on the held-out levels."""
    used = _load_levels(out)
    overlap = split.check(used)
    probe = config.spec.build()
    arms: dict[str, Any] = {}
    for name in config.arms:
        scores = [(s["arms"][name]["validation"]["success"], s["round"]) for s in summaries]
        best = max(scores)[1]  # ties go to the later round
        trained_on = used.get(f"{name}:train", set())
        heldout = None
        if config.heldout:
            learner = load_learner(config.learner, Arm(name, None).path(out, best), probe)
            log(f"held-out evaluation of the {name} arm (round {best}, picked on validation levels)")
            shutil.rmtree(out / f"heldout-{name}", ignore_errors=True)  # an evaluation a crash cut short starts over
            heldout = evaluate(learner.policy(), config.heldout_base, split.heldout_seeds, out / f"heldout-{name}", config, trained_on)
        spent = {
            k: sum(s["arms"][name]["interaction"].get(k, 0) for s in summaries)
            for k in ("train", "collect", "validate", "transfer", "credit", "search", "total")
        }
        spent["select"] = sum(s["arms"][name]["validation"]["env_steps"] for s in summaries)
        arms[name] = {
            "round": best,
            "validation": summaries[best - 1]["arms"][name]["validation"]["success"],
            "heldout": heldout,
            "interaction": spent,
        }
    probe.close()
    warnings = []
    if (
        config.heldout
        and "rigger" in arms
        and "original" in arms
        and arms["rigger"]["heldout"]["success"] < arms["original"]["heldout"]["success"]
    ):
        warnings.append(
            f"the rigger arm ended below the original-env baseline on held-out levels "
            f"({arms['rigger']['heldout']['success']:.3f} < {arms['original']['heldout']['success']:.3f}): its curriculum "
            "did not help here; `envrigger export` asks for --force"
        )
        log("warning: " + warnings[-1])
    return {
        "arms": arms,
        "warnings": warnings,
        "levels": {
            "disjoint": split.disjoint,
            "heldout": len(split.heldout_levels),
            "validation": len(split.validation_levels),
            "overlap": overlap,
        },
    }
