"""Export admitted components: a JSON registry, and a pip-installable package of Gymnasium ids.

Contains :func:`env_ids` and :func:`export_library`. The package is rendered from jinja2
templates; importing it registers every component, so after ``pip install DIR/NAME``::

    import gymnasium as gym, NAME
    env = gym.make("NAME/FrozenLake-c1-v0")
    # or, without the import: gym.make("NAME:NAME/FrozenLake-c1-v0")
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from gymnasium.envs.registration import parse_env_id
from jinja2 import Environment

from envharness.command_line import write_atomically
from envharness.files import make_directories_inside, write_file_atomically
from envrigger.data import TrajectoryError
from envrigger.loop.library import Component, Library

PACKAGE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{{ name }}"
version = "{{ version }}"
description = "Reshaped Gymnasium environments exported by envrigger (library version {{ library_version }})"
requires-python = ">=3.11"
dependencies = ["{{ envharness }}", "gymnasium>=1.0"]

[tool.setuptools]
packages = ["{{ name }}"]

[tool.setuptools.package-data]
{{ name }} = ["registry.json"]
"""

INIT = '''"""Reshaped Gymnasium environments exported by envrigger; importing this module registers them.

Environments (id, the finding it targets, spec hash), each as JSON text: {% for c in components %}
- {{ c.id | tojson }}: {{ c.finding | tojson }} ({{ c.hash | tojson }}){% endfor %}
"""

import json
from importlib import resources

import gymnasium as gym

REGISTRY = json.loads(resources.files(__name__).joinpath("registry.json").read_text())


def register_envs() -> list[str]:
    """Register every environment of this package with Gymnasium (idempotent)."""
    for entry in REGISTRY["environments"]:
        if entry["id"] not in gym.registry:
            gym.register(id=entry["id"], entry_point="envharness.spec:make_harness", kwargs={"spec": entry["spec"]},
                         disable_env_checker=True)
    return [entry["id"] for entry in REGISTRY["environments"]]


ENV_IDS = register_envs()
'''


def env_ids(package: str, components: list[Component]) -> dict[int, str]:
    """Gymnasium ids for components: ``PACKAGE/<BaseName>-c<id>-v0``.

    Example:
        >>> from envharness import HarnessSpec
        >>> c = Component(id=3, hash="ab", spec=HarnessSpec(env_id="MiniGrid-DoorKey-8x8-v0"), finding="loop",
        ...               finding_stats={}, rationale="", origin="catalog", parent=None, gates=[], seeds=[],
        ...               agent_id="q", round=1, created="", library_version=1)
        >>> env_ids("mylab", [c])
        {3: 'mylab/MiniGrid-DoorKey-8x8-c3-v0'}
    """
    out = {}
    for c in components:
        _, name, _ = parse_env_id(c.spec.env_id.split(":")[-1])
        out[c.id] = f"{package}/{name}-c{c.id}-v0"
    return out


def envharness_wheel(to: Path, within: Path | None = None) -> Path:
    """Write this envharness as a wheel into ``to``: built from its source tree, else repacked from the installed copy.

    So an export installs on a machine without the project's source:
    ``pip install --find-links DIR/wheels DIR/PACKAGE``. The wheel is made in a private
    folder, then written into ``to`` never through a link planted below ``within``.
    """
    import shutil
    import subprocess
    import sys
    import tempfile

    import envharness

    root = Path(envharness.__file__).resolve().parent.parent
    make_directories_inside(to, within if within is not None else to.parent)
    with tempfile.TemporaryDirectory(prefix="envrigger-wheel-") as private:
        made = Path(private)
        if not (root / "pyproject.toml").is_file():  # installed from a wheel or an index: no source to build from
            built = _repacked_wheel(made)
        else:
            command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(made), str(root)]
            done = subprocess.run([*command, "--no-build-isolation"], capture_output=True, text=True)  # fast, with this env's setuptools
            if done.returncode != 0:  # e.g. a setuptools too old to build wheels alone: let pip fetch the build backend
                done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise TrajectoryError(f"export: building the envharness wheel failed ({tail}); pass --no-wheel to skip it")
            built = sorted(made.glob("envharness-*.whl"))[-1]
        write_file_atomically(to / built.name, lambda tmp: shutil.copyfile(built, tmp), within=within)
    return to / built.name


# Files pip writes at install time; a wheel carries none of them (RECORD is written anew).
_INSTALL_ONLY = {"INSTALLER", "RECORD", "REQUESTED", "direct_url.json"}


def _repacked_wheel(to: Path) -> Path:
    """The installed envharness distribution packed back into the wheel it was installed from (its files, a fresh RECORD)."""
    import base64
    import hashlib
    import zipfile
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("envharness")
    except PackageNotFoundError:
        raise TrajectoryError(
            "export: envharness is neither installed nor a source tree, so no wheel can be written; pass --no-wheel"
        ) from None
    info = f"envharness-{dist.version}.dist-info"
    tag = next((line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines() if line.startswith("Tag:")), None)
    if tag is None:
        raise TrajectoryError("export: the installed envharness has no WHEEL metadata to repack; install it with pip, or pass --no-wheel")
    members = []
    for file in dist.files or []:
        parts = file.parts
        if parts[0] == ".." or "__pycache__" in parts or file.suffix == ".pyc":  # scripts are remade from entry_points.txt
            continue
        if parts[0] == info and parts[-1] in _INSTALL_ONLY:
            continue
        members.append((file.as_posix(), Path(str(dist.locate_file(file))).read_bytes()))
    target = to / f"envharness-{dist.version}-{tag}.whl"
    record = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in sorted(members):
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
            wheel.writestr(name, data)
        record.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return target


def export_library(library: Library, to: str | Path, package: str = "envrigger_envs", wheel: bool = True) -> dict[str, Path]:
    """Write ``to/registry.json``, the package ``to/<package>/`` and (``wheel``) ``to/wheels/envharness-*.whl``.

    The package requires this exact envharness version; with the wheel beside it, a colleague
    installs it with ``pip install --find-links to/wheels to/<package>``, no source needed.
    """
    if not PACKAGE_NAME.match(package):
        raise TrajectoryError(f"--package: {package!r} is not a valid package name; use lowercase letters, digits and _ (e.g. my_envs)")
    components = library.components()
    if not components:
        raise TrajectoryError(f"{library.path}: the library has no admitted components; run the loop until something is admitted")
    ids = env_ids(package, components)
    registry = {
        "package": package,
        "library": str(library.path),
        "library_version": library.version,
        "environments": [
            {
                "id": ids[c.id],
                "component": c.id,
                "hash": c.hash,
                "finding": c.finding,
                "rationale": c.rationale,
                "origin": c.origin,
                "round": c.round,
                "agent_id": c.agent_id,
                "gates": c.gates,
                "spec": json.loads(c.spec.to_json(indent=None)),
            }
            for c in components
        ],
    }
    to = Path(to)
    text = json.dumps(registry, indent=2) + "\n"
    # `to` is the user's; what lies in it may be someone else's: nothing is written through a link planted there.
    write_atomically(to / "registry.json", text, make_parents=True, within=to)
    templates = Environment(keep_trailing_newline=True)
    root = to / package
    from importlib.metadata import version

    context = {
        "envharness": f"envharness=={version('envharness')}",
        "name": package,
        "version": f"0.{library.version}.0",
        "library_version": library.version,
        "components": [{"id": ids[c.id], "finding": c.finding, "hash": c.hash} for c in components],
    }
    write_atomically(root / "pyproject.toml", templates.from_string(PYPROJECT).render(**context), make_parents=True, within=to)
    write_atomically(root / package / "__init__.py", templates.from_string(INIT).render(**context), make_parents=True, within=to)
    write_atomically(root / package / "registry.json", text, within=to)
    written = {"registry": to / "registry.json", "package": root}
    if wheel:
        written["wheel"] = envharness_wheel(to / "wheels", within=to)
    return written
