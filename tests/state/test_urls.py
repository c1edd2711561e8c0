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
