"""PostgreSQL setup errors are terminal SetupErrors in the checkpoint store and in the mirror sink (issue 33.6).

Against the real PostgreSQL: a database and a role that do not exist (refused at connect, where
libpq gives no SQLSTATE, only text) and a role without the CREATE privilege (refused by a
statement: SQLSTATE 42501). Each used to be transient (exit 1, `serve` retrying it) or a plain
terminal error that `serve` retried --max-failures times; a SetupError stops the consumer at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest

from icetail.kernel.errors import SetupError, SinkSetupError, StateSetupError, StateUnavailableError
from icetail.sinks.postgres.mirror import PostgresMirrorSink
from icetail.state.store import open_store
from tests.support.stores import PG_URL, pg_unavailable

HOST = PG_URL.removeprefix("postgresql://").split("@", 1)[1].split("/", 1)[0]
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={b"PARQUET:field_id": b"1"}),
        pa.field("_change_type", pa.string(), False),
        pa.field("_change_ordinal", pa.int32(), False),
        pa.field("_commit_snapshot_id", pa.int64(), False),
        pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC"), False),
    ]
)


def _sql(statement: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(statement.encode())


@pytest.fixture
def weak_role() -> Iterator[str]:
    """A login role that may connect to the test database but create nothing in it."""
    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    role = f"icetail_weak_{uuid.uuid4().hex[:8]}"
    _sql(f'CREATE ROLE "{role}" LOGIN')
    _sql(f'REVOKE CREATE ON DATABASE test FROM "{role}"')
    yield role
    _sql(f'DROP OWNED BY "{role}"')
    _sql(f'DROP ROLE "{role}"')


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (f"postgresql://postgres@{HOST}/icetail_no_such_db", 'database "icetail_no_such_db" does not exist'),
        (f"postgresql://icetail_no_such_role@{HOST}/test", 'role "icetail_no_such_role" does not exist'),
    ],
)
def test_a_store_database_or_role_that_does_not_exist_is_a_setup_error(url: str, reason: str) -> None:
    if pg_unavailable():
        pytest.skip("no PostgreSQL")
    with pytest.raises(StateSetupError) as info:
        open_store(url)
    assert reason in str(info.value) and info.value.exit_code == 2 and info.value.stage == "state"


def test_a_store_that_cannot_be_reached_stays_transient() -> None:
    with pytest.raises(StateUnavailableError):
        open_store("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2")


def test_a_store_schema_the_role_may_not_create_is_a_setup_error(weak_role: str) -> None:
    schema = f"icetail_weak_{uuid.uuid4().hex[:8]}"
    with pytest.raises(StateSetupError, match="permission denied") as info:
        open_store(f"postgresql://{weak_role}@{HOST}/test?schema={schema}")
    assert info.value.exit_code == 2


def test_a_sink_schema_the_role_may_not_create_is_a_setup_error(weak_role: str) -> None:
    schema = f"icetail_weak_{uuid.uuid4().hex[:8]}"
    sink = PostgresMirrorSink(f"postgresql://{weak_role}@{HOST}/test?table={schema}.t", consumer="c1")
    try:
        with pytest.raises(SinkSetupError, match="permission denied") as info:
            sink.bind(("id",), SCHEMA)  # creates the ledger's schema: refused
    finally:
        sink.close()
    assert isinstance(info.value, SetupError) and info.value.stage == "sink"
