"""`tables:` entries naming tables by pattern (issue 35): parsed by the real `serve` loader, refused
in one line when a template would mix tables, and expanded against a real pyiceberg SQL catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from icetail.kernel.errors import ConfigError, TableNotFoundError
from icetail.monitor.cli.main import build_parser
from icetail.monitor.service.config import ServiceConfig, build_service_config, run_config
from icetail.monitor.service.followed import CatalogLister, FollowedTables
from icetail.monitor.service.table_patterns import TablePattern
from tests.support.catalogs import catalogs_in_process, new_catalog

TOP = {"catalog": "prod", "state": "sqlite:////var/lib/icetail/state.db", "sink": "parquet:///data/changes"}


def build(tmp_path: Path, content: dict[str, Any], command: str = "serve") -> ServiceConfig:
    path = tmp_path / "icetail.yaml"
    path.write_text(yaml.safe_dump(content))
    return build_service_config(build_parser().parse_args([command, "--config", str(path)]), environ={})


def refused(tmp_path: Path, content: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        build(tmp_path, content)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def only_pattern(config: ServiceConfig) -> TablePattern:
    assert config.pipelines == ()
    (pattern,) = config.patterns
    return pattern


def test_a_pattern_entry_inherits_the_top_level_keys_and_fills_its_templates(tmp_path: Path) -> None:
    entry = {
        "namespace": "sales",
        "include": "orders_*",
        "exclude": "orders_tmp_*",
        "sink": "jsonl:///out/{namespace}/{table}.jsonl",
        "consumer": "sales-{table}",
        "start": "latest",
    }
    pattern = only_pattern(build(tmp_path, {**TOP, "tables": [entry]}))
    assert (pattern.namespace, pattern.include, pattern.exclude) == ("sales", "orders_*", ("orders_tmp_*",))
    eu = pattern.pipeline("orders_eu")
    assert (eu.catalog, eu.table, eu.consumer_id) == ("prod", "sales.orders_eu", "sales-orders_eu")
    assert (eu.sink_url, eu.start, eu.state_url) == ("jsonl:///out/sales/orders_eu.jsonl", "latest", TOP["state"])


def test_include_defaults_to_every_table_and_names_match_case_sensitively_as_globs(tmp_path: Path) -> None:
    pattern = only_pattern(build(tmp_path, {**TOP, "tables": [{"namespace": "sales", "exclude": ["tmp_*", "x?"]}]}))
    assert pattern.include == "*"
    followed = [n for n in ("orders", "tmp_1", "TMP_1", "x1", "x12", "Orders") if pattern.matches(n)]
    assert followed == ["orders", "TMP_1", "x12", "Orders"]
    cased = only_pattern(build(tmp_path, {**TOP, "tables": [{"namespace": "sales", "include": "orders_[ab]*"}]}))
    names = ("orders_a1", "orders_b", "orders_c", "ORDERS_a")
    assert [n for n in names if cased.matches(n)] == ["orders_a1", "orders_b"]


def test_a_parquet_folder_is_shared_and_each_table_keeps_its_default_consumer(tmp_path: Path) -> None:
    pattern = only_pattern(build(tmp_path, {**TOP, "tables": [{"namespace": "sales"}]}))
    a, b = pattern.pipeline("a"), pattern.pipeline("b")
    assert (a.consumer_id, b.consumer_id) == ("prod.sales.a", "prod.sales.b")
    assert a.sink_url == b.sink_url == "parquet:///data/changes"  # chunk files carry the consumer id


def test_plain_entries_and_patterns_side_by_side(tmp_path: Path) -> None:
    config = build(tmp_path, {**TOP, "tables": [{"table": "db.events"}, {"namespace": "sales"}]})
    assert [p.table for p in config.pipelines] == ["db.events"]
    assert [p.namespace for p in config.patterns] == ["sales"]
    assert [t.table for t in config.templates] == ["db.events", "sales.t"]


@pytest.mark.parametrize(
    ("sink", "example"),
    [
        ("jsonl:///out/all.jsonl", "jsonl:///out/{table}.jsonl"),
        ("iceberg://prod/mirror.everything", "iceberg://CATALOG/NS.{table}_changes"),
        ("postgresql://u@localhost/db?table=public.changes", "postgresql://HOST/DB?table=SCHEMA.{table}"),
        ("-", "parquet:///out"),
        ("jsonl:///out/{namespace}.jsonl", "jsonl:///out/{table}.jsonl"),
    ],
)
def test_a_sink_that_would_mix_the_matched_tables_is_refused(tmp_path: Path, sink: str, example: str) -> None:
    message = refused(tmp_path, {**TOP, "tables": [{"namespace": "sales", "sink": sink}]})
    assert "would write every table the pattern matches into one" in message and "{table}" in message, message
    assert example in message and "tables[0]" in message, message


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"namespace": "sales", "consumer": "sales"}, "would share consumer 'sales'; put {table} in it"),
        ({"namespace": "sales", "sink": "jsonl:///out/{tabel}.jsonl"}, "placeholder {tabel}"),
        ({"namespace": "sales", "table": "sales.orders"}, "one table or a namespace pattern, not both"),
        ({"include": "orders_*"}, "include/exclude need a namespace"),
        ({"namespace": "", "include": "orders_*"}, "namespace must be a non-empty string"),
        ({"namespace": "sales", "exclude": [1]}, "exclude must be a non-empty string"),
        ({"namespace": "sales", "sink": "jsonl:///out/{table}.txt?x=1"}, "jsonl"),
        ({"namespace": "sales", "consumer": "_{table}"}, "not valid"),
    ],
)
def test_pattern_refusals_name_the_entry_and_the_fix(tmp_path: Path, entry: dict[str, Any], expected: str) -> None:
    message = refused(tmp_path, {**TOP, "tables": [entry]})
    assert expected in message and "tables[0]" in message, message


def test_the_same_pattern_twice_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, {**TOP, "tables": [{"namespace": "sales"}, {"namespace": "sales"}]})
    assert "same pattern" in message


def test_run_refuses_a_pattern(tmp_path: Path) -> None:
    path = tmp_path / "icetail.yaml"
    path.write_text(yaml.safe_dump({**TOP, "tables": [{"namespace": "sales"}]}))
    with pytest.raises(ConfigError, match="use `icetail serve` for a pattern"):
        run_config(build_parser().parse_args(["run", "--config", str(path)]), environ={})


ROWS = pa.table({"id": pa.array([1], pa.int64())})


def test_each_poll_follows_the_tables_created_since_and_reports_a_namespace_that_is_gone(tmp_path: Path) -> None:
    cat = new_catalog(tmp_path / "src", "pat")
    catalog = cat.catalog()
    catalog.create_namespace("sales")
    for name in ("orders_eu", "orders_tmp_1", "refunds"):
        catalog.create_table(f"sales.{name}", ROWS.schema)
    content = {**TOP, "catalog": "pat", "tables": [{"namespace": "sales", "include": "orders_*", "exclude": "*tmp*"}]}
    config = build(tmp_path, content)
    with catalogs_in_process(cat):
        followed = FollowedTables(config.pipelines, config.patterns, CatalogLister())
        first = followed.poll()
        assert ([p.table for p in first.new], first.errors) == (["sales.orders_eu"], ())
        assert followed.poll().new == ()  # nothing new
        catalog.create_table("sales.orders_us", ROWS.schema)
        catalog.create_table("sales.orders_tmp_2", ROWS.schema)
        catalog.drop_table("sales.orders_eu")
        assert [p.consumer_id for p in followed.poll().new] == ["pat.sales.orders_us"]
        catalog.drop_table("sales.orders_us")
        catalog.drop_table("sales.orders_tmp_1")
        catalog.drop_table("sales.orders_tmp_2")
        catalog.drop_table("sales.refunds")
        catalog.drop_namespace("sales")
        gone = followed.poll()
        assert gone.new == () and len(gone.errors) == 1 and isinstance(gone.errors[0], TableNotFoundError)
        assert "namespace 'sales' does not exist in catalog 'pat'" in str(gone.errors[0])


def test_a_table_whose_name_would_leave_the_sinks_folder_is_not_followed(tmp_path: Path) -> None:
    """A catalog may hold tables named `..` or `x/../y` (pyiceberg's SQL catalog takes them): such a
    name fills the sink template's path, so a pattern does not follow it (one log line, not an error
    of the poll) and follows the tables with plain names."""
    cat = new_catalog(tmp_path / "src", "pat")
    catalog = cat.catalog()
    catalog.create_namespace("sales")
    for name in ("..", "x/../y", "a b", "orders_ok"):
        catalog.create_table(("sales", name), ROWS.schema)
    sink = f"parquet://{tmp_path}/out/{{table}}/"
    config = build(tmp_path, {**TOP, "catalog": "pat", "sink": sink, "tables": [{"namespace": "sales"}]})
    (pattern,) = config.patterns
    for hostile in ("..", "x/../y", "a b", "."):
        with pytest.raises(ConfigError, match="is not followed by a pattern"):
            pattern.pipeline(hostile)
    with catalogs_in_process(cat):
        listing = FollowedTables(config.pipelines, config.patterns, CatalogLister()).poll()
    assert ([p.table for p in listing.new], listing.errors) == (["sales.orders_ok"], ())
    assert listing.new[0].sink_url == f"parquet://{tmp_path}/out/orders_ok/"
