"""Repository contracts: one `icetail` package, imports run one way between its parts, ruff and mypy clean.

The parts, lowest first: `kernel` (icetail/kernel: values, errors, secrets redaction, storage
error kinds; imports no part), `catalogs` (icetail/catalogs.py: opening a pyiceberg catalog by
name, for the monitor and the Iceberg sink), `state` (the checkpoint store), `sinks`
(icetail/sinks: where committed rows go; they read nothing), `reader` (Spark-side reading; its tasks stage chunks
through the sink contract), `monitor` (the control plane, in layers). `state`, `reader` and
`monitor` live in the repository's top-level folders of those names (pyproject's package-dir).
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
ALLOWED = {
    "kernel": set(),
    "catalogs": {"kernel"},
    "state": {"kernel"},
    "sinks": {"kernel", "catalogs"},
    "reader": {"kernel", "sinks"},
    "monitor": {"kernel", "catalogs", "state", "sinks", "reader"},
}
# the design card's top-level folders, mapped into the package (pyproject's package-dir: icetail.state
# is state/); the other parts live in icetail/ itself
ROOMS = ("state", "reader", "monitor")
FOLDER = {part: ROOT / part if part in ROOMS else ROOT / "icetail" / part for part in ALLOWED}
FOLDER["catalogs"] = ROOT / "icetail" / "catalogs.py"  # a part that is one module


def _sources(part: str) -> list[pathlib.Path]:
    """The part's modules: the files of its folder, or the one module it is."""
    where = FOLDER[part]
    return [where] if where.is_file() else sorted(where.rglob("*.py"))
# monitor/'s layers, lowest first: each may import the layers before it, never those after it
MONITOR_LAYERS = ("planning", "engine", "service", "cli")


def _imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _imported_packages(path: pathlib.Path) -> set[str]:
    """The parts (`kernel`, `state`, ...) a module imports, as `icetail.<part>`."""
    parts = {name.split(".")[1] for name in _imported_modules(path) if name.startswith("icetail.") and "." in name}
    return parts & set(ALLOWED)


def test_imports_run_one_way() -> None:
    violations = []
    for package, allowed in ALLOWED.items():
        for path in _sources(package):
            for imported in _imported_packages(path) - allowed - {package}:
                violations.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert not violations, "\n".join(violations)


def test_monitor_layers_import_downwards_only() -> None:
    violations = []
    modules = sorted((ROOT / "monitor").glob("*.py"))
    assert [p.name for p in modules] == ["__init__.py"], "monitor/ modules belong in a layer folder"
    for rank, layer in enumerate(MONITOR_LAYERS):
        above = set(MONITOR_LAYERS[rank + 1 :])
        for path in sorted((ROOT / "monitor" / layer).rglob("*.py")):
            for name in _imported_modules(path):
                parts = name.split(".")
                if parts[:2] == ["icetail", "monitor"] and len(parts) > 2 and parts[2] in above:
                    violations.append(f"{path.relative_to(ROOT)} ({layer}) imports {name}")
    assert not violations, "\n".join(violations)


def test_product_code_imports_no_private_names() -> None:
    """A name with a leading underscore is its module's own business; share it under a public name."""
    violations = []
    for part in ALLOWED:
        for path in _sources(part):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("icetail."):
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    violations += [f"{path.relative_to(ROOT)} imports {node.module}.{n}" for n in private]
    assert not violations, "\n".join(violations)


def test_nothing_imports_the_parts_as_top_level_packages() -> None:
    """Installed, only `icetail` exists: a bare `import state` would work in a checkout and fail for users."""
    offenders = []
    for folder in ("state", "reader", "monitor", "icetail", "tests", "bench", "deploy"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            bare = {name for name in _imported_modules(path) if name.split(".")[0] in ROOMS}
            offenders += [f"{path.relative_to(ROOT)} imports {name}" for name in sorted(bare)]
    assert not offenders, "\n".join(offenders)


def test_nothing_imports_a_checkout_folder_through_the_package() -> None:
    """A checkout puts the repository root on icetail's path (icetail/__init__.py), so `icetail.tests`
    or `icetail.bench` would import there and fail installed: `icetail.X` names a part of the package."""
    parts = {p.stem for p in (ROOT / "icetail").iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    parts |= set(ROOMS)
    offenders = []
    for folder in ("state", "reader", "monitor", "icetail", "tests", "bench", "deploy"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            outside = {n for n in _imported_modules(path) if n.startswith("icetail.") and n.split(".")[1] not in parts}
            offenders += [f"{path.relative_to(ROOT)} imports {name}" for name in sorted(outside)]
    assert not offenders, "\n".join(offenders)


def test_ruff_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    """On the package laid out as installed: mypy cannot follow package-dir (.ci/typecheck, as `make lint`)."""
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run([str(ROOT / ".ci" / "typecheck")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".txt", ".cfg"}


def test_no_tracked_file_holds_merge_conflict_markers() -> None:
    """A conflict block once landed in docs/delivery.md unnoticed: no test reads prose."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    offenders = []
    for name in tracked.stdout.split("\0"):
        path = ROOT / name
        if not name or not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        offenders += [f"{name}:{i}" for i, line in enumerate(lines, 1) if line.startswith(("<<<<<<< ", ">>>>>>> "))]
    assert not offenders, f"merge conflict markers in {', '.join(offenders)}"


MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300
PRODUCT_FOLDERS = ("icetail", "monitor", "reader", "state")


def _product_modules() -> list[pathlib.Path]:
    """Every product module once (a folder linked into icetail/ is read at its real path)."""
    found: dict[pathlib.Path, pathlib.Path] = {}
    for folder in PRODUCT_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found.setdefault(path.resolve(), path.resolve())
    return sorted(found.values())


def test_no_product_module_is_over_500_lines() -> None:
    """A module that long holds more than one role: split it along its roles (docs/architecture.md)."""
    modules = _product_modules()
    assert len(modules) > 100, "the scan found the product's modules"
    long = {p.relative_to(ROOT): len(p.read_text().splitlines()) for p in modules}
    offenders = [f"{path}: {lines} lines" for path, lines in long.items() if lines > MAX_MODULE_LINES]
    assert not offenders, "\n".join(offenders)


def test_no_product_class_is_over_300_lines() -> None:
    """A class that long does more than one job: give each way of doing it a class of its own."""
    offenders = []
    classes = 0
    for path in _product_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes += 1
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > MAX_CLASS_LINES:
                    offenders.append(f"{path.relative_to(ROOT)}: class {node.name}, {lines} lines")
    assert classes > 100, "the scan found the product's classes"
    assert not offenders, "\n".join(offenders)
