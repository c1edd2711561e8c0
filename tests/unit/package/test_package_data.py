"""What pyproject.toml ships beside the modules names files that exist, in packages that exist.

setuptools skips package data whose package or file it cannot find without a word, and a wheel
without Spark's log4j settings still runs (Spark logs at its defaults): only this catches it.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[3]


def test_every_package_data_entry_names_a_file_of_a_real_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = config["tool"]["setuptools"]["package-data"]
    assert package_data, "pyproject.toml ships no package data"
    for package, files in package_data.items():
        module = importlib.import_module(package)
        assert module.__file__ is not None and module.__file__.endswith("__init__.py"), f"{package} is not a package"
        folder = Path(module.__file__).parent
        for name in files:
            assert (folder / name).is_file(), f"{package}: {name} is not in {folder}"
