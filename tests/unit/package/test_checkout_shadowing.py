"""A script saved next to a checkout folder named `icetail` imports the package, not the folder (issue 33).

From the script's directory, Python's path search sees the checkout folder (no __init__.py: the
package is one level down, icetail/icetail/) and keeps it as a namespace package unless some
later sys.path entry holds a regular `icetail` package. setuptools' editable import hook runs
after that search, so the namespace won and `icetail.read_changes` was missing. In compat mode
(the Makefile's `--config-settings editable_mode=compat`) `pip install -e` writes a .pth path
entry of the checkout's root ("" = "." in pyproject's package-dir) instead of the hook, and the
regular package wins; the hook is what setuptools installs otherwise, since reader/, monitor/
and state/ are mapped folders. (Checked with real `pip install -e` runs; pip needs an index for
setuptools >= 77, so here the path entry it writes is written by the test.)
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[3]
SCRIPT = "import icetail\nprint(icetail.__file__, callable(icetail.read_changes))\n"


def test_an_editable_install_is_a_path_entry_of_the_checkout() -> None:
    """In compat mode setuptools writes a .pth of the root package-dir "" names: the checkout."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"][""] == "."
    makefile = (REPO / "Makefile").read_text().splitlines()
    editable = [line for line in makefile if "pip install" in line and " -e " in line]
    assert editable, "the Makefile installs icetail editable"
    assert all("--config-settings editable_mode=compat -e " in line for line in editable), editable


def _venv_running(tmp_path: Path, *, checkout_on_path: bool) -> subprocess.CompletedProcess[str]:
    """`python script.py` in a directory that holds a checkout named `icetail`, in a fresh venv whose
    site-packages lists this interpreter's site-packages (the dependencies) and, when
    `checkout_on_path`, first the checkout itself, as the editable install's .pth does."""
    users = tmp_path / "project"
    users.mkdir()
    checkout = users / "icetail"
    checkout.symlink_to(REPO, target_is_directory=True)  # the clone, by its usual name
    pth_lines = [*([str(checkout)] if checkout_on_path else []), *site.getsitepackages()]
    (users / "script.py").write_text(SCRIPT)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "icetail-test.pth").write_text("".join(f"{line}\n" for line in pth_lines))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    return subprocess.run([str(python), "script.py"], cwd=users, env=env, capture_output=True, text=True)


def test_with_the_checkout_on_the_path_the_package_wins(tmp_path: Path) -> None:
    done = _venv_running(tmp_path, checkout_on_path=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path / "project" / "icetail" / "icetail" / "__init__.py"), "True"]


def test_without_it_the_folder_shadows_the_package(tmp_path: Path) -> None:
    """What an import hook (or no install) leaves: the namespace package, and the error users saw."""
    done = _venv_running(tmp_path, checkout_on_path=False)
    assert done.returncode == 1
    assert "AttributeError: module 'icetail' has no attribute 'read_changes'" in done.stderr, done.stderr
