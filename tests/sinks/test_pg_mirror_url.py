"""The mirror sink URL: parsed without side effects, normalized without its password, refused in one line."""

from __future__ import annotations

import pytest

from icetail.kernel.errors import ConfigError
from icetail.kernel.secrets import redact_text
from icetail.sinks.postgres.url import parse_mirror_url
from icetail.sinks.registry import open_sink
from icetail.sinks.urls import normalize_sink_url, parse_sink_url


def test_identity_has_no_password_and_one_spelling() -> None:
    a = normalize_sink_url("postgresql://app:s3cret@db:5432/prod?table=public.orders&sslmode=require")
    b = normalize_sink_url("postgres://app@db:5432/prod?sslmode=require&mode=mirror&table=public.orders")
    assert a == b == "postgresql://app@db:5432/prod?table=public.orders&mode=mirror&sslmode=require"
    assert "s3cret" not in a


def test_password_parameter_is_dropped_from_the_identity_but_reaches_libpq() -> None:
    target = parse_mirror_url("postgresql://app@db/prod?table=s.t&password=s3cret&ledger=ops")
    assert "s3cret" not in target.identity and "s3cret" not in repr(target)
    assert "password=s3cret" in target.conninfo and "table=" not in target.conninfo
    assert (target.schema, target.table, target.ledger_schema, target.mode) == ("s", "t", "ops", "mirror")


def test_table_name_is_taken_literally_after_url_decoding() -> None:
    target = parse_mirror_url("postgresql://u@h/d?table=Sales.%22Robert%27%29%3B%20DROP%20TABLE%20x%3B--")
    assert (target.schema, target.table) == ("Sales", "\"Robert'); DROP TABLE x;--")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgresql://u:pw1@h/d", "no target table"),
        ("postgresql://u:pw1@h/d?table=orders", "SCHEMA.TABLE"),
        ("postgresql://u:pw1@h/d?table=.orders", "SCHEMA.TABLE"),
        ("postgresql://u:pw1@h/?table=s.t", "no database"),
        ("postgresql://u:pw1@h/d?table=s.t&table=s.u", "more than once"),
        ("postgresql://u:pw1@h/d?table=s.t&mode=append", "mode='append'"),
        ("postgresql://u:pw1@h/d?table=s.t&password=pw1#x", "fragment"),
        ("postgresql://u:pw1@h/d?table=s." + "x" * 64, "longer than PostgreSQL's 63-byte names"),
        ("postgresql://u:pw1@h/d?table=s.t&lock_timeout=0", "lock_timeout='0' is not a positive duration"),
        ("postgresql://u:pw1@h/d?table=s.t&lock_timeout=30 s", "lock_timeout='30 s'"),
    ],
)
def test_unusable_urls_are_refused_in_one_line_without_the_password(url: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_sink_url(url)
    message = str(info.value)
    assert reason in message and "pw1" not in message and "\n" not in message


def test_lock_timeout_is_icetail_s_not_libpq_s_and_not_part_of_the_identity() -> None:
    assert parse_mirror_url("postgresql://u@h/d?table=s.t").lock_timeout == "30s"
    target = parse_mirror_url("postgresql://u@h/d?table=s.t&lock_timeout=500ms")
    assert target.lock_timeout == "500ms" and "lock_timeout" not in target.conninfo
    assert target.identity == parse_mirror_url("postgresql://u@h/d?table=s.t").identity


def test_history_mode_opens_a_history_sink() -> None:
    sink = open_sink("postgresql://u@h/d?table=s.t&mode=history", consumer="c")
    assert getattr(sink, "history", False) is True
    assert normalize_sink_url("postgresql://u@h/d?mode=history&table=s.t").endswith("?table=s.t&mode=history")


def test_redaction_of_libpq_passwords_in_any_text() -> None:
    text = "a postgresql://u:pw1@h/d?x=1&password=pw2 b host=h password=pw3 c password='p w4'"
    redacted = redact_text(text)
    assert not any(p in redacted for p in ("pw1", "pw2", "pw3", "p w4")), redacted


@pytest.mark.parametrize(
    ("url", "fragments"),
    [
        ("postgresql://u:pw1@h/d?table=public.x&tabel=public.y", ("'tabel' (did you mean table?)", "known: table,")),
        ("postgresql://u:pw1@h/d?table=public.x&foo=bar", ("'foo'", "known: table, mode, ledger, lock_timeout")),
        ("postgresql://u:pw1@h/d?table=s.t&sslmdoe=require", ("'sslmdoe' (did you mean sslmode?)",)),
        ("iceberg://cat/ns.t?mdoe=mirror", ("'mdoe' (did you mean mode?)", "known: mode")),
        ("iceberg://cat/ns.t?mode=mirror&x=1", ("'x'", "known: mode")),
        ("parquet:///tmp/out?mode=w", ("'mode'", "no query parameters")),
    ],
)
def test_unknown_parameters_are_refused_with_the_known_ones(url: str, fragments: tuple[str, ...]) -> None:
    """Issue 33.4: `tabel=` reached psycopg (`unexpected error: ProgrammingError`, exit 1)."""
    with pytest.raises(ConfigError) as info:
        parse_sink_url(url)
    message = str(info.value)
    assert all(f in message for f in fragments), message
    assert "pw1" not in message and "\n" not in message


def test_libpq_parameters_are_known() -> None:
    target = parse_mirror_url("postgresql://u@h/d?table=s.t&sslmode=disable&connect_timeout=3&application_name=a")
    assert "sslmode=disable" in target.conninfo and "connect_timeout=3" in target.conninfo


def test_a_three_part_table_name_is_refused_with_the_form_expected() -> None:
    """Issue 33.4: `table=a.b.c` made schema `a` holding a table `b.c` instead of naming database `a`."""
    with pytest.raises(ConfigError) as info:
        parse_sink_url("postgresql://u@h/test?table=a.b.c")
    message = str(info.value)
    assert "three parts" in message and "table=SCHEMA.TABLE" in message and ".../a?table=b.c" in message


@pytest.mark.parametrize("name", ["s.a%0Ab", "s%0A.t", "s.t%09x"])
def test_control_characters_in_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="control character") as info:
        parse_sink_url(f"postgresql://u@h/d?table={name}")
    assert "\n" not in str(info.value)
