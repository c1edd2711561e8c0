"""Store URLs: accepted forms, one-line refusals, no leaked passwords, unreachable servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from icetail.kernel.errors import ConfigError, StateUnavailableError, TransientError
from icetail.state.store import open_store
from icetail.state.urls import PostgresLocation, SqliteLocation, parse_store_url


def test_sqlite_relative_and_absolute_paths() -> None:
    assert parse_store_url("sqlite:///state/icetail.db") == SqliteLocation(
        Path("state/icetail.db"), "sqlite:///state/icetail.db"
    )
    absolute = parse_store_url("sqlite:////var/lib/icetail/state.db")
    assert isinstance(absolute, SqliteLocation) and absolute.path == Path("/var/lib/icetail/state.db")
    quoted = parse_store_url("SQLITE:///a%20b.db")
    assert isinstance(quoted, SqliteLocation) and quoted.path == Path("a b.db")


def test_postgres_schema_is_split_off_and_password_hidden() -> None:
    loc = parse_store_url("postgresql://me:s3cret@db:5433/icetail?schema=pipes&sslmode=require")
    assert isinstance(loc, PostgresLocation)
    assert loc.schema == "pipes"
    assert loc.conninfo == "postgresql://me:s3cret@db:5433/icetail?sslmode=require"
    assert "s3cret" not in loc.display and "***" in loc.display
    default = parse_store_url("postgres://db/icetail")
    assert isinstance(default, PostgresLocation) and default.schema is None


@pytest.mark.parametrize(
    "url",
    [
        "",
        "state.db",
        "mysql://db/x",
        "sqlite://host/state.db",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite:///dir/",
        "sqlite:///x.db?mode=ro",
        "postgresql://db/x?schema=Bad-Name",
        "postgresql://db/x?schema=a&schema=b",
    ],
)
def test_bad_urls_are_one_line_config_errors(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_store_url(url)
    message = str(info.value)
    assert "\n" not in message
    assert repr(url) in message
    assert "sqlite:///relative/path/state.db" in message and "postgresql://" in message


def test_bad_url_message_hides_password() -> None:
    with pytest.raises(ConfigError) as info:
        parse_store_url("postgresql://me:s3cret@db/x?schema=NO")
    assert "s3cret" not in str(info.value)


def test_unreachable_postgres_is_transient() -> None:
    with pytest.raises(StateUnavailableError) as info:
        open_store("postgresql://postgres:pw@127.0.0.1:1/test?connect_timeout=2")
    assert isinstance(info.value, TransientError)
    message = str(info.value)
    assert "cannot reach checkpoint store" in message and "127.0.0.1:1" in message and "pw" not in message


@pytest.mark.parametrize(
    ("url", "fragments"),
    [
        ("postgresql://u:pw1@h/db?shema=x", ("'shema' (did you mean schema?)", "known: schema")),
        ("postgresql://u:pw1@h/db?schema=x&foo=1", ("'foo'", "libpq")),
        ("sqlite:///state.db?mode=ro", ("'mode'", "no query parameters")),
    ],
)
def test_unknown_store_url_parameters_are_refused(url: str, fragments: tuple[str, ...]) -> None:
    """Issue 33.4: an unknown parameter reached libpq (or was ignored) instead of being refused with exit 2."""
    with pytest.raises(ConfigError) as info:
        parse_store_url(url)
    message = str(info.value)
    assert all(f in message for f in fragments), message
    assert "pw1" not in message


def test_libpq_parameters_of_a_store_url_reach_libpq() -> None:
    location = parse_store_url("postgresql://u@h/db?schema=s&sslmode=disable&connect_timeout=2")
    assert isinstance(location, PostgresLocation)
    assert location.schema == "s" and "sslmode=disable" in location.conninfo
