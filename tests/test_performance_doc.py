"""docs/performance.md speaks to users; the run log keeps the developers' words (issue 33, item 8).

Above its appendix the page names no benchmark run id (R26), no source module and none of the
log's internal words; the appendix's run ids all exist in bench/RESULTS.md, so every figure can
still be traced to its rounds.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "performance.md").read_text()
LOG = (ROOT / "bench" / "RESULTS.md").read_text()
RUN_ID = re.compile(r"\bR\d+[a-z]?\b")


def _users_part() -> str:
    return PAGE.split("\n## Appendix A", 1)[0]


def test_the_users_part_names_no_run_module_or_internal_word() -> None:
    text = _users_part()
    found = {
        "run ids": sorted(set(RUN_ID.findall(text))),
        "modules": sorted(set(re.findall(r"\b(?:bench|reader|monitor|state)(?:\.[a-z_]+|/[\w/]+\.py)\b", text))),
        "words": sorted({w for w in ("zygote", "tracemalloc", "py-spy") if w in text.lower()}),
    }
    assert found == {"run ids": [], "modules": [], "words": []}


def test_its_first_screen_answers_the_usual_questions() -> None:
    glance = _users_part().split("\n## At a glance", 1)[1].split("\n## ", 1)[0]
    for needle in ("AMD EPYC", "pyspark 3.5.9", "pyspark 4.3.0", "The service", "CPU", "MiB",
                   "Rows per second", "What to tune first"):  # fmt: skip
        assert needle in glance, needle


def test_the_first_screen_opens_with_a_newcomers_three_answers() -> None:
    """Issue 48 (the first hour): before any load note, one line each for a small range (about 1-2 s, no
    JVM), 8M rows (seconds once Spark is up) and what `serve` holds idle (MiB or GiB)."""
    first = PAGE.splitlines()[:15]
    notes = next((i for i, line in enumerate(first) if "Measured on" in line or "load" in line.lower()), len(first))
    answers = [line for line in first[:notes] if line.startswith("- ")]
    assert len(answers) == 3, first
    small, big, idle = answers
    assert "small range" in small and re.search(r"1–2 s", small) and "no JVM" in small, small
    assert "8M rows" in big and re.search(r"\d(\.\d)? s\b", big), big
    assert "`serve`" in idle and "idle" in idle and re.search(r"\d[\d,.]* (MiB|GiB)", idle), idle


def test_every_run_the_appendix_names_is_in_the_log() -> None:
    appendix = PAGE.split("\n## Appendix A", 1)[1]
    named = set(RUN_ID.findall(appendix))
    assert len(named) > 30
    assert {run for run in named if not re.search(rf"\*\*{run}\*\*|\b{run}\b", LOG)} == set()
