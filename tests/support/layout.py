"""Where each file of the installed `icetail` lives in the repository, read from pyproject's package-dir.

reader/, monitor/ and state/ are icetail.reader, icetail.monitor and icetail.state (pyproject.toml,
[tool.setuptools]). The tests of the wheel, the spark-submit zip and the package list share this
one reading of the mapping. `python -m tests.support.layout WHEEL` checks a built wheel against it
(make wheel-smoke).
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _setuptools(root: Path) -> dict[str, object]:
    config: dict[str, object] = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    return config


def package_dir(root: Path = ROOT) -> dict[str, str]:
    """pyproject's package-dir: a package name (or "" for the root) -> its folder, relative to `root`."""
    mapping = _setuptools(root)["package-dir"]
    assert isinstance(mapping, dict)
    return {str(name): str(folder) for name, folder in mapping.items()}


def home_of(package: str, root: Path = ROOT) -> Path:
    """The folder holding `package`'s modules: the longest mapped prefix decides, as in setuptools."""
    mapping = package_dir(root)
    prefix = max((p for p in mapping if p == "" or package == p or package.startswith(p + ".")), key=len)
    rest = package[len(prefix) :].lstrip(".")
    return root / mapping[prefix] / Path(*rest.split(".")) if rest else root / mapping[prefix]


def listed_packages(root: Path = ROOT) -> list[str]:
    packages = _setuptools(root)["packages"]
    assert isinstance(packages, list)
    return [str(p) for p in packages]


def installed_files(root: Path = ROOT) -> dict[str, Path]:
    """Each module and data file by its name in a wheel (icetail/reader/split/read.py) -> its file here."""
    data = _setuptools(root).get("package-data", {})
    assert isinstance(data, dict)
    files: dict[str, Path] = {}
    for package in listed_packages(root):
        home, prefix = home_of(package, root), package.replace(".", "/")
        for path in sorted(home.glob("*.py")):
            files[f"{prefix}/{path.name}"] = path
        for name in data.get(package, []):
            files[f"{prefix}/{name}"] = home / name
    return files


def wheel_differences(wheel: Path, root: Path = ROOT) -> list[str]:
    """What a wheel misses of the layout, and what it holds beyond it (its .dist-info aside)."""
    with zipfile.ZipFile(wheel) as zf:
        held = {name for name in zf.namelist() if ".dist-info/" not in name}
    expected = set(installed_files(root))
    missing = [f"missing {name}" for name in sorted(expected - held)]
    return missing + [f"extra {name}" for name in sorted(held - expected)]


if __name__ == "__main__":
    differences = [f"{wheel}: {d}" for wheel in sys.argv[1:] for d in wheel_differences(Path(wheel))]
    print("\n".join(differences) or f"the wheel holds every file of the layout: {' '.join(sys.argv[1:])}")
    sys.exit(1 if differences or len(sys.argv) < 2 else 0)
