"""Master seeds as Ray tasks on a cluster (``envrigger run --seeds N --ray-address ADDRESS``, ``heldout.py --ray-address``).

Contains :func:`run_seeds_on_ray`. Each unfinished master seed is one Ray task declaring the
CPUs its rollouts use (``LoopConfig.workers``, 1 when unset). The task runs the seed's loop
in a temporary directory on whichever node Ray picks, starting from what the seed's
directory already holds (sent with the task, so an interrupted seed resumes), and returns
the whole directory, which the driver unpacks in place of the seed's: no shared file
system is needed. A seed with its ``final.json`` is never sent. A node that dies loses only
its in-flight seeds: Ray runs the task again elsewhere (up to three times), from the state
that was sent. A seed's results are the same wherever it ran: the loop's results do not
depend on the process, machine or worker count (see :func:`~envrigger.loop.seeds.run_many`).
Every node needs this package installed, as for the ``ray`` rollout backend.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envrigger.data import DirectoryLock
from envrigger.errors import TrajectoryError
from envrigger.loop.config import LoopConfig

RETRIES = 3  # a task whose node died is run again this many times (Ray's system-failure retries)


def pack(directory: Path) -> bytes | None:
    """The seed directory as a gzipped tar (without its writer lock); None when there is nothing yet."""
    if not directory.is_dir() or not any(directory.iterdir()):
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(directory.rglob("*")):
            if path.name != DirectoryLock.NAME:
                archive.add(path, arcname=str(path.relative_to(directory)), recursive=False)
    return buffer.getvalue()


MAX_RESULT_BYTES = 2 * 1024**3
"""The most a seed's returned directory may hold, unpacked; a larger archive is refused before anything is written."""


def unpack(packed: bytes, directory: Path, sent: LoopConfig | None = None) -> None:
    """Replace ``directory`` with the packed one: extracted beside it first, checked, then swapped in.

    A node's answer is checked as a stranger's (a node can lie, or be someone else's): only
    regular files and folders, inside the seed's directory, at most :data:`MAX_RESULT_BYTES`
    unpacked; a finished seed (``final.json``, a library whose rounds match their checksums)
    run with the config it was sent (``sent``). Anything else raises a one-line
    :class:`~envrigger.errors.TrajectoryError` and leaves ``directory`` as it was.
    """
    incoming = directory.parent / f".{directory.name}.incoming"
    shutil.rmtree(incoming, ignore_errors=True)
    incoming.mkdir(parents=True)
    try:
        try:
            with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as archive:
                members = archive.getmembers()
                odd = next((m.name for m in members if not (m.isfile() or m.isdir())), None)
                if odd is not None:
                    raise TrajectoryError(f"the result holds {odd!r}, which is not a regular file or folder")
                if sum(m.size for m in members) > MAX_RESULT_BYTES:
                    raise TrajectoryError(f"the result unpacks to more than {MAX_RESULT_BYTES:,} bytes")
                archive.extractall(incoming, filter="data")
        except (tarfile.TarError, OSError, EOFError) as error:
            raise TrajectoryError(
                f"the result is not a readable seed archive ({str(error).splitlines()[0] if str(error) else error})"
            ) from None
        _check_result(incoming, sent)
    except TrajectoryError as error:
        shutil.rmtree(incoming, ignore_errors=True)
        raise TrajectoryError(
            f"{directory}: the cluster's result was refused: {error}; run the same command again to rerun the seed"
        ) from None
    old = directory.parent / f".{directory.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if directory.exists():
        directory.rename(old)
    incoming.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def _check_result(where: Path, sent: LoopConfig | None) -> None:
    """A finished seed's directory, run with the config ``sent`` (None: any config it saved): or a one-line TrajectoryError."""
    from envrigger.loop.library import Library
    from envrigger.loop.results import FinalResults

    for name in ("loop.json", "final.json", "library.db"):
        if not (where / name).is_file():
            raise TrajectoryError(f"the seed's {name} is missing: the node did not finish it")
    try:
        ran = LoopConfig.saved((where / "loop.json").read_text(), where="loop.json")
        FinalResults.load(where / "final.json")
        library = Library(where / "library.db", create=False, read_only=True)
        try:
            library.rounds()
        finally:
            library.close()
    except Exception as error:  # noqa: BLE001 - whatever a forged file makes a reader raise is a refusal
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TrajectoryError(f"its files do not read back ({detail[:300]})") from None
    # The loop writes a learner's defaults into a new run's learner_params (LEARNER_WRITTEN): what was sent must be kept.
    differ = [] if sent is None else [k for k in LoopConfig.model_fields if k != "learner_params" and getattr(ran, k) != getattr(sent, k)]
    if sent is not None and any(k not in ran.learner_params or ran.learner_params[k] != v for k, v in sent.learner_params.items()):
        differ.append("learner_params")
    if differ:
        raise TrajectoryError(f"it was run with another config than the one sent ({', '.join(sorted(differ)[:5])} differ)")


def seed_task(fresh: str | None, packed: bytes | None) -> bytes:
    """One master seed, run where Ray placed it: unpack what the seed had, run (or resume) its loop, pack the result."""
    from envrigger.loop.run import run_loop

    with tempfile.TemporaryDirectory(prefix="envrigger-seed-") as scratch:
        where = Path(scratch) / "seed"
        where.mkdir()
        if packed is not None:
            with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as archive:
                archive.extractall(where, filter="data")
        config = LoopConfig.model_validate_json(fresh) if fresh is not None and not (where / "loop.json").is_file() else None
        run_loop(where, config)
        result = pack(where)
        assert result is not None  # a finished loop has written its files
        return result


def run_seeds_on_ray(tasks: list[tuple[Path, LoopConfig | None, str]], address: str, log: Callable[[str], None]) -> None:
    """Run each ``(directory, new config or None to resume, label)`` as a Ray task on the cluster at ``address``.

    Raises :class:`~envrigger.errors.TrajectoryError` naming every seed that failed (after
    the others finished); calling again resumes them.
    """
    from envrigger.rollout.ray_backend import RAY_POOL

    ray = RAY_POOL.connect(address)
    pending: dict[Any, tuple[Path, str, LoopConfig]] = {}
    for where, fresh, label in tasks:
        if (where / "final.json").is_file():
            log(f"{label}{where}: finished already")
            continue
        config = fresh or LoopConfig.saved((where / "loop.json").read_text(), where=str(where / "loop.json"))
        remote = ray.remote(num_cpus=config.workers or 1, max_retries=RETRIES, retry_exceptions=False)(seed_task)
        pending[remote.remote(None if fresh is None else fresh.model_dump_json(), pack(where))] = (where, label, config)
        log(f"{label}{where}: sent to the Ray cluster ({config.workers or 1} CPU)")
    failed: list[str] = []
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        where, label, sent = pending.pop(done[0])
        try:
            unpack(ray.get(done[0]), where, sent)
        except Exception as error:  # noqa: BLE001 - one failed seed does not stop the others
            first = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            failed.append(f"{where} ({first[:300]})")
            log(f"{label}{where}: failed on the cluster: {first[:300]}")
            continue
        log(f"{label}{where}: finished on the cluster")
    if failed:
        raise TrajectoryError(
            f"{len(failed)} master seed(s) failed on the Ray cluster: {'; '.join(failed)}; run the same command again to resume them"
        )
