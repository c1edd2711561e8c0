"""Docs speak of concepts, not files (issue 34, step 7; issue 47, item 2).

The user docs (README.md, deploy/README.md, deploy/image/README.md and every docs/*.md but
docs/architecture.md) name no product source file (a `.py` of icetail/, monitor/, reader/ or
state/) and no internal module path (`icetail.monitor.engine.api`): files move, concepts stay.
Nor do they name a test or a benchmark's source: they say in words what is guaranteed and how it
is tested ("a crash test SIGKILLs the run mid-batch"). Where the code and the tests live is
docs/architecture.md's business, for contributors (every file it links to exists); the runs'
details are bench/RESULTS.md's.

What a user doc may still name: deploy/ files (what a user ships and runs: `deploy/spark-submit.sh`,
`deploy/image/smoke.py`), bench/'s documents and results (`bench/RESULTS.md`, a run's JSON), and
commands: a benchmark's dotted module name, which is what `python -m` runs (`python -m bench.chaos`),
and a `.py` right after the interpreter on the same line (`python bench/x.py`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.layout import installed_files

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
USER_DOCS = ("README.md", "deploy/README.md", "deploy/image/README.md",
             *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md") if p != ARCHITECTURE))  # fmt: skip
PRODUCT = ("icetail", "monitor", "reader", "state")
NOT_PRODUCT = ("tests", "bench", "deploy")  # not the product: tests and tools, checked below
PY_PATH = re.compile(r"[\w./-]*\w\.py\b")
# a path into tests/ (a file or a folder), as text or as a link's target
TESTS_PATH = re.compile(r"(?<![\w./-])(?:\.\./)*tests/[\w./-]*")
# a test's name: a test module or a test function (`test_lease_partition`, `test_worked_example`)
TEST_NAME = re.compile(r"\btest_\w+")
# a command a user runs: a .py right after the interpreter (`python bench/x.py`, `.venv/bin/python3 y.py`)
PYTHON_COMMAND = re.compile(r"\bpython[\d.]*\s+[\w./-]+\.py\b")
DOTTED = re.compile(r"\b(?:icetail|monitor|reader|state|sinks|kernel|catalogs)(?:\.\w+)+")
# names a user types: the worker daemon module (`--conf spark.python.daemon.module=`, deploy/README.md)
# and a logger name to filter on (docs/sinks.md)
TYPED = {"icetail.reader.spark.daemon", "icetail.sinks.postgres"}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _public_names() -> set[str]:
    """`icetail.X` for each name of `icetail.__all__`, and the data source's module `icetail.spark`."""
    tree = ast.parse((ROOT / "icetail" / "__init__.py").read_text())
    names = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
    )
    data_source = {"icetail.spark", "icetail.spark.ChangesDataSource"}
    return {f"icetail.{name}" for name in names} | {"icetail.__all__"} | data_source


PUBLIC = _public_names()
PRODUCT_BASENAMES = {p.name for part in PRODUCT for p in (ROOT / part).rglob("*.py")}
DEPLOY_BASENAMES = {p.name for p in (ROOT / "deploy").rglob("*.py")}
TOOL_BASENAMES = {p.name for part in ("tests", "bench") for p in (ROOT / part).rglob("*.py")} - DEPLOY_BASENAMES
INSTALLED = set(installed_files())


def _is_module(dotted: str) -> bool:
    """A module of the package as installed (reader/x.py is icetail.reader.x: pyproject's package-dir)."""
    path = dotted.replace(".", "/")
    return f"{path}.py" in INSTALLED or f"{path}/__init__.py" in INSTALLED


def _names_a_product_file(token: str) -> bool:
    path = re.sub(r"^(?:\.\.?/)+", "", token)
    first = path.split("/", 1)[0]
    if first in NOT_PRODUCT:
        return False
    return first in PRODUCT + ("sinks", "kernel") or Path(path).name in PRODUCT_BASENAMES


def _names_an_internal_module(token: str) -> bool:
    """A dotted name some prefix of which is an icetail module that is not public.

    Without `icetail.` in front, a name must go deeper than its part (`state.db` is a file name)."""
    if token in PUBLIC or token in TYPED:
        return False
    bare = not token.startswith("icetail.")
    parts = (f"icetail.{token}" if bare else token).split(".")
    return any(_is_module(".".join(parts[:n])) for n in range(3 if bare else 2, len(parts) + 1))


def _mentions(doc: str) -> list[str]:
    text = (ROOT / doc).read_text()
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [f"{doc}:{number}: {m}" for m in PY_PATH.findall(line) if _names_a_product_file(m)]
        found += [f"{doc}:{number}: {m}" for m in DOTTED.findall(line) if _names_an_internal_module(m)]
    return found


@pytest.mark.parametrize("doc", USER_DOCS)
def test_a_user_doc_names_no_product_source_file(doc: str) -> None:
    assert _mentions(doc) == [], "say the concept; the file belongs in docs/architecture.md"


def _names_a_test_or_bench_source(token: str) -> bool:
    """A `.py` of tests/ or bench/, by path or by a name only a file there has (`holds.py`).

    deploy/'s files are what a user runs; a name a deploy/ file has too is taken for it."""
    path = re.sub(r"^(?:\.\.?/)+", "", token)
    first = path.split("/", 1)[0]
    if first in ("tests", "bench"):
        return True
    return "/" not in path and path in TOOL_BASENAMES


def _test_file_mentions(text: str) -> list[str]:
    """Each tests/ path, test or bench source and test name the text names, commands aside.

    Each is reported once: a path found is taken out of the line before the next kind is sought."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        rest = PYTHON_COMMAND.sub(" ", line)
        tokens = TESTS_PATH.findall(rest)
        rest = TESTS_PATH.sub(" ", rest)
        sources = [m for m in PY_PATH.findall(rest) if _names_a_test_or_bench_source(m)]
        for source in sources:
            rest = rest.replace(source, " ")
        tokens += sources + TEST_NAME.findall(rest)
        found += [f"{number}: {m}" for m in tokens]
    return found


@pytest.mark.parametrize("doc", USER_DOCS)
def test_a_user_doc_names_no_test_or_bench_source_file(doc: str) -> None:
    found = _test_file_mentions((ROOT / doc).read_text())
    assert found == [], f"{doc}: say what is tested, in words; the file belongs in docs/architecture.md"


def test_the_test_file_check_sees_what_it_must() -> None:
    named = """(`tests/pipeline/test_lease_partition.py`) and [the rule](../tests/unit/planning/test_delete_index.py)
    checked by `tests/deploy/`; tests/state/test_lease.py::test_lease_expiry; (`test_worked_example`)
    `bench/chaos/repair.py`, `serve_trial.py`, the hold (holds.py)"""
    assert _test_file_mentions(named) == [
        "1: tests/pipeline/test_lease_partition.py", "1: ../tests/unit/planning/test_delete_index.py",
        "2: tests/deploy/", "2: tests/state/test_lease.py", "2: test_lease_expiry", "2: test_worked_example",
        "3: bench/chaos/repair.py", "3: serve_trial.py", "3: holds.py",
    ]  # fmt: skip
    allowed = """`python bench/cold.py --rows 8`; `.venv/bin/python3 -m bench.chaos --trials 4`; `python -m
    bench.chaos.report FILE.json`; [bench/RESULTS.md](../bench/RESULTS.md); bench/results/chaos/r39.json.gz;
    `deploy/spark-submit.sh`, `deploy/icetail_submit.py`, `smoke.py`, `deploy/image/build.sh`;
    `promtool test rules alerts_test.yml`; /var/lib/icetail/state.db; a crash test SIGKILLs the run"""
    assert _test_file_mentions(allowed) == []


def test_the_check_sees_what_it_must() -> None:
    for token in ("reader/changes/net.py", "../monitor/planning/diff.py", "icetail/sinks/base.py",
                  "pyiceberg_compat.py", "sinks/iceberg/commit.py"):  # fmt: skip
        assert _names_a_product_file(token), token
    for token in ("tests/pipeline/test_crash.py", "bench/chaos/repair.py", "deploy/icetail_submit.py"):
        assert not _names_a_product_file(token), token
    for token in ("icetail.monitor.engine.api", "icetail.monitor", "icetail.kernel.errors.SinkError",
                  "icetail.sinks.iceberg", "monitor.engine.pipeline"):  # fmt: skip
        assert _names_an_internal_module(token), token
    for token in ("icetail.read_changes", "icetail.Pipeline", "icetail.spark", "icetail.chunk",
                  "icetail.mirror.rewrite", "state.db", "sinks.md", "icetail.reader.spark.daemon",
                  "icetail.sinks.postgres"):  # fmt: skip
        assert not _names_an_internal_module(token), token


def _relative_links(doc: Path) -> list[str]:
    targets = [m.split("#", 1)[0] for m in LINK.findall(doc.read_text())]
    return [t for t in targets if t and not re.match(r"^[a-z]+:", t)]


def test_every_file_architecture_md_links_to_exists() -> None:
    links = _relative_links(ARCHITECTURE)
    assert len(links) > 20
    assert [t for t in links if not (ARCHITECTURE.parent / t).exists()] == []


@pytest.mark.parametrize("doc", USER_DOCS)
def test_a_user_doc_links_only_to_files_that_exist(doc: str) -> None:
    path = ROOT / doc
    assert [t for t in _relative_links(path) if not (path.parent / t).exists()] == []


def test_architecture_md_names_each_room() -> None:
    text = ARCHITECTURE.read_text()
    rooms = ["icetail/kernel/", "icetail/catalogs.py", "state/", "icetail/sinks/", "reader/split/",
             "reader/changes/", "reader/spark/", "monitor/planning/", "monitor/engine/", "monitor/service/",
             "monitor/cli/"]  # fmt: skip
    assert [room for room in rooms if room not in text] == []
    for step in ("Plan", "Write ahead", "Read", "Reconcile", "Deliver", "Commit"):
        assert f"**{step}**" in text, step
