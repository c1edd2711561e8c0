"""The README's Spark data source example runs as printed, on pyspark 4 (issue 48, "the first hour").

The Quick start's `make demo` now sets up `.venv-demo` on pyspark 4 (tests/unit/package/test_demo_install.py
checks the Makefile), and the README says the example runs there as is after the demo. Here it runs,
copied from README.md, in a child process of this line's interpreter, in a folder holding what the
demo leaves: `.icetail-demo/` with the demo's SQLite catalog and table (the demo's own function).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from icetail.monitor.cli.demo import create_demo_table
from tests.support.processes import REPO_ROOT, child_env

ROW = re.compile(r"^\|\s*(\d+)\|\s*(\w+)\|\s*(\d+)\|$")


def readme_example() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("## Spark data source") :]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block, "README's Spark data source section has a python example"
    return block.group(1)


def test_the_readme_data_source_example_runs(tmp_path: Path) -> None:
    code = readme_example()
    assert "from icetail.spark import ChangesDataSource" in code and 'os.path.abspath(".icetail-demo")' in code
    create_demo_table(str(tmp_path / ".icetail-demo"))  # what `make demo` leaves in the checkout's folder
    (tmp_path / "example.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path, env=child_env(spark_dir=tmp_path / "spark"), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    counts = [m.groups() for m in map(ROW.match, done.stdout.splitlines()) if m]
    assert counts == [
        ("0", "INSERT", "3"),
        ("1", "INSERT", "2"),
        ("2", "DELETE", "1"),
        ("3", "DELETE", "1"),
        ("4", "INSERT", "1"),
        ("5", "INSERT", "1"),
    ], done.stdout
    assert done.stdout.rstrip().endswith("9 change rows in the sink"), done.stdout
