"""One path per file: reader/, monitor/ and state/ are icetail.reader, .monitor and .state, with no links.

pyproject.toml maps the folders into the package (package-dir) and lists every package by hand
(setuptools' find cannot prefix a mapped folder), so a new subpackage left off the list would be
missing from the wheel without a word. A checkout reaches the folders through icetail/__init__.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.layout import ROOT, home_of, installed_files, listed_packages, package_dir, wheel_differences

PROBE = (
    "import icetail, icetail.reader, icetail.monitor, icetail.state\n"
    "print(*icetail.__path__, icetail.reader.__file__, icetail.monitor.__file__, icetail.state.__file__, sep='\\n')\n"
)


def _package_roots() -> dict[str, Path]:
    """Each folder that starts a package name: icetail/ itself and the mapped rooms."""
    return {"icetail": ROOT / "icetail"} | {name: ROOT / folder for name, folder in package_dir().items() if name}


def _folders_under(top: Path) -> list[Path]:
    return sorted(Path(d) for d, _, _ in os.walk(top) if "__pycache__" not in Path(d).parts)


def test_the_package_list_is_every_folder_with_an_init() -> None:
    found = [
        ".".join([name, *folder.relative_to(top).parts])
        for name, top in _package_roots().items()
        for folder in _folders_under(top)
        if (folder / "__init__.py").is_file()
    ]
    assert sorted(listed_packages()) == sorted(found), "pyproject.toml [tool.setuptools] packages"
    assert all(home_of(package).is_dir() for package in listed_packages())


def test_every_module_sits_in_a_package() -> None:
    """A folder of modules without __init__.py would be a namespace package: never listed, never shipped."""
    loose = [
        str(folder.relative_to(ROOT))
        for top in _package_roots().values()
        for folder in _folders_under(top)
        if any(folder.glob("*.py")) and not (folder / "__init__.py").is_file()
    ]
    assert not loose, f"modules outside a package: {loose}"


def test_no_tracked_file_is_a_link_and_no_room_has_a_twin_in_the_package() -> None:
    staged = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    links = [line.split("\t", 1)[1] for line in staged.splitlines() if line.startswith("120000 ")]
    assert not links, f"symlinks: {links}"
    twins = [name for name in package_dir() if name and (ROOT / Path(*name.split("."))).exists()]
    assert not twins, f"{twins}: in icetail/ as well as in their mapped folders"


def test_a_checkout_on_a_plain_path_imports_the_rooms_from_their_folders(tmp_path: Path) -> None:
    """spark-submit from a checkout, Spark's Python workers, PYTHONPATH=checkout: no install step."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"} | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == [
        str(ROOT / "icetail"),
        str(ROOT),
        str(ROOT / "reader" / "__init__.py"),
        str(ROOT / "monitor" / "__init__.py"),
        str(ROOT / "state" / "__init__.py"),
    ]


def test_the_package_laid_out_as_installed_keeps_to_itself(tmp_path: Path) -> None:
    """Installed (a wheel, the spark-submit zip), the rooms are inside the package: its path is its own
    folder even when the folder above looks like a checkout."""
    site = tmp_path / "site"
    for name, path in installed_files().items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, site / name)
    (site / "pyproject.toml").write_text("")
    (site / "reader").mkdir()
    (site / "reader" / "__init__.py").write_text("raise ImportError('the checkout decoy was imported')\n")
    probe = f"import sys; sys.path.insert(0, {str(site)!r})\n{PROBE}"
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    package = site / "icetail"
    assert done.stdout.split("\n")[:-1] == [
        str(package),
        *(str(package / room / "__init__.py") for room in ("reader", "monitor", "state")),
    ]


def test_a_wheel_is_checked_against_the_layout(tmp_path: Path) -> None:
    """make wheel-smoke runs this check on the built wheel (`python -m tests.support.layout WHEEL`)."""
    layout = installed_files()
    assert "icetail/reader/split/read.py" in layout and "icetail/reader/spark/log4j2.properties" in layout
    whole, short = tmp_path / "whole.whl", tmp_path / "short.whl"
    with zipfile.ZipFile(whole, "w") as zf:
        for name, path in layout.items():
            zf.write(path, name)
        zf.writestr("icetail-0.1.0.dist-info/RECORD", "")
    assert wheel_differences(whole) == []
    with zipfile.ZipFile(short, "w") as zf:
        for name, path in layout.items():
            if name != "icetail/state/store.py":
                zf.write(path, name)
        zf.writestr("icetail/reader/store.py", "")
    assert wheel_differences(short) == ["missing icetail/state/store.py", "extra icetail/reader/store.py"]
