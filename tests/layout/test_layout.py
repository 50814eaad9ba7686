"""The layout keeps its promises: no import circles, envharness never imports envrigger, nothing imports benchmarks.

Imports are read from the source (every ``import`` and ``from ... import`` statement, at
module level or inside a function), so a circle hidden behind a function-level import is
seen too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("envharness", "envrigger")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (a ``from pkg import name`` counts as ``pkg.name`` when that is a module).

    Importing ``a.b.c`` from outside ``a.b`` runs ``a/b/__init__.py`` first, so the packages on
    the way count as imported too; not the top-level one (imported before anything inside it),
    nor a package the importer is inside (already being imported when the importer runs).
    """
    me = _module_name(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            for i in range(2, len(parts) + 1):
                prefix = ".".join(parts[:i])
                inside = me == prefix or me.startswith(prefix + ".")
                if prefix in known and (i == len(parts) or not inside):
                    found.add(prefix)
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    return {name: _imports(path, set(paths)) - {name} for name, path in paths.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_module_of_either_package_imports_itself_through_others():
    assert _circles(_graph()) == []


def test_the_circle_finder_sees_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_envharness_never_imports_envrigger():
    offenders = {m: sorted(d for d in deps if d.startswith("envrigger")) for m, deps in _graph().items() if m.startswith("envharness")}
    assert {m: d for m, d in offenders.items() if d} == {}


def test_nothing_in_the_packages_or_tests_imports_benchmarks():
    for path in [*(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in modules if m.split(".")[0] == "benchmarks"], path


def test_every_envrigger_subpackage_has_a_face_that_says_what_it_offers():
    for package in sorted(p.parent for p in (ROOT / "envrigger").rglob("__init__.py")):
        face = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
        assert ast.get_docstring(face), f"{package.relative_to(ROOT)}/__init__.py has no docstring"


def test_tests_mirror_the_packages():
    """A test module sits in the folder of what it tests: a package's tree, or a named cross-cutting suite."""
    allowed = {"envharness", "envrigger", "security", "sandbox", "faults", "first_hour", "docs", "benchmarks", "layout", "peers"}
    tops = {p.relative_to(ROOT / "tests").parts[0] for p in (ROOT / "tests").rglob("test_*.py")}
    assert tops <= allowed
    assert not list((ROOT / "tests").glob("test_*.py")), "test modules at the top of tests/: move each into its folder"
    for package in PACKAGES:
        for path in (ROOT / "tests" / package).rglob("test_*.py"):
            folder = path.parent.relative_to(ROOT / "tests")
            assert (ROOT / folder).is_dir(), f"{path.relative_to(ROOT)}: tests/{folder} mirrors no package folder {folder}"


def test_a_test_module_at_the_top_of_a_package_folder_is_not_about_a_subpackage():
    """tests/<package>/test_<name>.py tests a top-level module or the package as a whole; a subpackage's tests sit in its folder.

    A module named after a subpackage or one of its modules (test_transforms.py, test_code_repair.py)
    and not after a top-level module (test_errors.py) belongs in tests/<package>/<subpackage>/.
    """
    for package in PACKAGES:
        top = {p.stem for p in (ROOT / package).glob("*.py")}
        inner = {
            name
            for sub in (ROOT / package).iterdir()
            if (sub / "__init__.py").is_file()
            for name in [sub.name, *(p.stem for p in sub.rglob("*.py") if p.stem != "__init__")]
        }
        for path in (ROOT / "tests" / package).glob("test_*.py"):
            name = path.stem.removeprefix("test_")
            assert name not in inner - top, f"{path.relative_to(ROOT)} is about a subpackage's {name}: move it into that folder"


def test_test_module_names_are_unique_across_the_suite():
    """With no __init__.py in tests/, a test module is imported by its file name: two of one name cannot both be collected."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_no_test_module_imports_another_test_module_or_a_conftest():
    """Shared test helpers live in modules of their own (tests/stored.py, tests/harness_helpers.py...), never in a test module.

    Nor in a conftest.py: every conftest.py of the suite is imported as the module ``conftest``,
    so ``from conftest import ...`` reads whichever one pytest loaded last.
    """
    offenders = []
    for path in (ROOT / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in getattr(node, "names", [])]
            last = [n.split(".")[-1] for n in names]
            if isinstance(node, ast.Import | ast.ImportFrom) and any(n.startswith("test_") or n == "conftest" for n in last):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def _private_imports() -> list[str]:
    """``module: from other import _name`` for every underscored name one project module imports from another."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                    for alias in node.names:
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            found.append(f"{_module_name(path)}: from {node.module} import {alias.name}")
    return found


def test_no_private_name_is_imported_from_another_module():
    # A name another module needs is part of its module's interface: public, and documented there.
    assert _private_imports() == []


def _function_lengths(folder: Path) -> dict[str, int]:
    """Every function and method under ``folder``, by ``module:name``, and its length in lines (docstring included)."""
    lengths: dict[str, int] = {}
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                module = ".".join(path.relative_to(folder).with_suffix("").parts)
                lengths[f"{module}:{node.name}"] = int(node.end_lineno or node.lineno) - node.lineno + 1
    return lengths


def test_the_loop_reads_as_its_story_and_no_function_in_it_is_over_100_lines():
    lengths = _function_lengths(ROOT / "envrigger" / "loop")
    assert lengths["run:_run_loop"] <= 80
    assert {name: n for name, n in lengths.items() if n > 100} == {}


def test_the_length_check_sees_a_long_function(tmp_path):
    (tmp_path / "long.py").write_text("def long():\n" + "    x = 1\n" * 120, encoding="utf-8")
    assert max(_function_lengths(tmp_path).values()) == 121


# envrigger's parts from the bottom up: a module may import its own layer and those below, never one above. The
# registries sit low (family_registry below the agents and policies that consult it, the families that fill it above
# them); a report reads the loop's results, a ledger draws with the report's plots, the command line uses everything.
LAYERS = (
    {"errors", "stats", "options", "structured", "family_registry"},
    {"data"},
    {"policies", "skills"},
    {"agents", "rollout"},
    {"families"},
    {"diagnose"},
    {"loop"},
    {"report", "live", "integrations"},
    {"ledger", "export"},
    {"cli"},
)


def _layer(module: str) -> int:
    part = module.split(".")[1] if module.count(".") else ""
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


def _upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every (importer, imported) pair of envrigger modules where the imported module sits in a higher layer."""
    inside = {m for m in graph if m.startswith("envrigger.") and m.count(".")}
    return {(m, n) for m in inside for n in graph[m] if n in inside and _layer(n) > _layer(m)}


def test_every_part_of_envrigger_has_a_layer_and_imports_only_down_the_layers():
    graph = _graph()
    parts = {m.split(".")[1] for m in graph if m.startswith("envrigger.") and m.count(".")}
    assert parts == set().union(*LAYERS)  # a new part is given its layer here
    assert _upward(graph) == set()


def test_the_layer_check_sees_an_import_up_the_layers():
    graph = {"envrigger.policies.random": {"envrigger.families.minigrid"}, "envrigger.families.minigrid": {"envrigger.policies.random"}}
    assert _upward(graph) == {("envrigger.policies.random", "envrigger.families.minigrid")}
