"""The PostgreSQL mirror sink against a real PostgreSQL: types, hostile names, the ledger, start
checks and schema evolution by field id. The pipeline's side is in tests/pipeline/test_pg_mirror.py."""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

import pyarrow as pa
import pytest

from icetail.kernel.errors import SinkError, SinkRejectedError
from icetail.sinks.base import ChunkKey
from icetail.sinks.postgres.mirror import PostgresMirrorSink
from icetail.sinks.registry import open_sink
from tests.support.pg_mirror import ledger, mirror_url, query, target_table

META = [
    pa.field("_change_type", pa.string(), nullable=False),
    pa.field("_change_ordinal", pa.int32(), nullable=False),
    pa.field("_commit_snapshot_id", pa.int64(), nullable=False),
    pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
]


def _field(name: str, type_: pa.DataType, fid: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable, metadata={b"PARQUET:field_id": str(fid).encode()})


def _rows(schema: pa.Schema, data: dict[str, list[Any]], types: list[str], ordinal: int = 1) -> pa.Table:
    n = len(types)
    columns = {
        **data,
        "_change_type": types,
        "_change_ordinal": [ordinal] * n,
        "_commit_snapshot_id": [ordinal] * n,
        "_commit_timestamp": [0] * n,
    }
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in schema}, schema=schema)


def _open(url: str, key: tuple[str, ...], schema: pa.Schema) -> PostgresMirrorSink:
    sink = open_sink(url, consumer="c1")
    assert isinstance(sink, PostgresMirrorSink)
    sink.bind(key, schema)
    return sink


def _key(batch: str, index: int) -> ChunkKey:
    return ChunkKey("c1", batch, index, f"s{index}", 0)


def test_every_type_round_trips_with_its_documented_column_type(pg_schema: str) -> None:
    nested = pa.struct(
        [_field("x", pa.int32(), 20), _field("tags", pa.large_list(_field("element", pa.large_string(), 22)), 21)]
    )
    schema = pa.schema(
        [
            _field("id", pa.int64(), 1, False),
            _field("i", pa.int32(), 2),
            _field("f", pa.float32(), 3),
            _field("d", pa.float64(), 4),
            _field("n", pa.decimal128(12, 3), 5),
            _field("s", pa.large_string(), 6),
            _field("b", pa.bool_(), 7),
            _field("u", pa.uuid(), 8),
            _field("bin", pa.large_binary(), 9),
            _field("fx", pa.binary(3), 10),
            _field("dt", pa.date32(), 11),
            _field("tm", pa.time64("us"), 12),
            _field("ts", pa.timestamp("us"), 13),
            _field("tz", pa.timestamp("us", tz="UTC"), 14),
            _field("st", nested, 15),
            _field("m", pa.map_(pa.large_string(), pa.int32()), 16),
            *META,
        ]
    )
    u = uuid.uuid4()
    row = {
        "id": [1, 2],
        "i": [7, None],
        "f": [1.5, None],
        "d": [float("nan"), -0.25],
        "n": [decimal.Decimal("-12.345"), None],
        "s": ['q"uote,\nnew line', ""],
        "b": [True, None],
        "u": [u.bytes, None],
        "bin": [b"\x00\xff\\", b""],
        "fx": [b"abc", None],
        "dt": [datetime.date(2024, 2, 29), None],
        "tm": [datetime.time(23, 59, 59, 999999), None],
        "ts": [datetime.datetime(2024, 1, 1, 12, 0, 0, 1), None],
        "tz": [datetime.datetime(2024, 1, 1, 12, 0, tzinfo=datetime.timezone.utc), None],
        "st": [{"x": 1, "tags": ["a", "b"]}, None],
        "m": [[("k", 1)], None],
    }
    sink = _open(mirror_url(pg_schema), ("id",), schema)
    rows = _rows(schema, row, ["INSERT", "INSERT"])
    # the row of nulls first (COPY straight into the empty target), the full row through the staging table
    sink.write(_key("b1", 0), rows.slice(1, 1))
    sink.write(_key("b1", 1), rows.slice(0, 1))
    sink.close()
    types = dict(
        query(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attnum > 0 AND NOT attisdropped",
            (f'"{pg_schema}".t',),
        )
    )
    assert types == {
        "id": "bigint",
        "i": "integer",
        "f": "real",
        "d": "double precision",
        "n": "numeric(12,3)",
        "s": "text",
        "b": "boolean",
        "u": "uuid",
        "bin": "bytea",
        "fx": "bytea",
        "dt": "date",
        "tm": "time without time zone",
        "ts": "timestamp without time zone",
        "tz": "timestamp with time zone",
        "st": "jsonb",
        "m": "jsonb",
    }
    got = {
        r[0]: r
        for r in query(f'SELECT id, i, f, d::text, n, s, b, u, bin, fx, dt, tm, ts, tz, st, m FROM "{pg_schema}".t')
    }
    assert got[1][1:] == (
        7,
        1.5,
        "NaN",
        decimal.Decimal("-12.345"),
        'q"uote,\nnew line',
        True,
        u,
        b"\x00\xff\\",
        b"abc",
        datetime.date(2024, 2, 29),
        datetime.time(23, 59, 59, 999999),
        datetime.datetime(2024, 1, 1, 12, 0, 0, 1),
        datetime.datetime(2024, 1, 1, 12, 0, tzinfo=datetime.timezone.utc),
        {"x": 1, "tags": ["a", "b"]},
        [["k", 1]],
    )
    assert got[2][1:] == (None, None, "-0.25", None, "", None, None, b"", None, None, None, None, None, None, None)


def test_hostile_table_and_column_names_are_quoted(pg_schema: str) -> None:
    table = "we\"ird'); DROP TABLE x;--"
    schema = pa.schema([_field('k"ey', pa.int64(), 1, False), _field("select", pa.large_string(), 2), *META])
    sink = _open(mirror_url(pg_schema, table), ('k"ey',), schema)
    sink.write(_key("b1", 0), _rows(schema, {'k"ey': [1, 2], "select": ["a", "b"]}, ["INSERT", "INSERT"]))
    sink.write(_key("b1", 1), _rows(schema, {'k"ey': [1], "select": ["a"]}, ["DELETE"], 2))
    sink.close()
    assert target_table(pg_schema, table).to_pylist() == [{'k"ey': 2, "select": "b"}]


def test_a_replayed_chunk_is_skipped_and_finished_batches_leave_the_ledger(pg_schema: str) -> None:
    schema = pa.schema([_field("id", pa.int64(), 1, False), _field("v", pa.large_string(), 2), *META])
    sink = _open(mirror_url(pg_schema), ("id",), schema)
    sink.write(_key("b1", 0), _rows(schema, {"id": [1, 2], "v": ["a", "b"]}, ["INSERT"] * 2))
    sink.write(_key("b1", 1), _rows(schema, {"id": [1], "v": ["a"]}, ["DELETE"], 2))
    # a crash before the offset commit: the same chunk comes again (here with other rows, to prove it is skipped)
    sink.write(_key("b1", 1), _rows(schema, {"id": [3], "v": ["c"]}, ["INSERT"], 2))
    assert sorted(target_table(pg_schema).column("id").to_pylist()) == [2]
    assert [b for _, b in ledger(pg_schema)] == ["b1", "b1"]
    sink.write(_key("b2", 0), _rows(schema, {"id": [4], "v": ["d"]}, ["INSERT"], 3))
    assert [b for _, b in ledger(pg_schema)] == ["b2"]
    sink.close()


def test_an_existing_table_that_differs_is_refused_in_one_line(pg_schema: str) -> None:
    schema = pa.schema([_field("id", pa.int64(), 1, False), _field("v", pa.large_string(), 2), *META])
    query(f'CREATE SCHEMA "{pg_schema}"')
    query(f'CREATE TABLE "{pg_schema}".t (id bigint PRIMARY KEY, v integer)')
    with pytest.raises(SinkRejectedError) as info:
        _open(mirror_url(pg_schema), ("id",), schema)
    assert "column 'v' is integer, the source's is text" in str(info.value) and "\n" not in str(info.value)
    query(f'DROP TABLE "{pg_schema}".t')
    query(f'CREATE TABLE "{pg_schema}".t (id bigint, v text PRIMARY KEY)')
    with pytest.raises(SinkRejectedError, match=r"has primary key \(v\), but the mirror key is \(id\)"):
        _open(mirror_url(pg_schema), ("id",), schema)


def test_a_matching_table_is_adopted(pg_schema: str) -> None:
    schema = pa.schema([_field("id", pa.int64(), 1, False), _field("v", pa.large_string(), 2), *META])
    query(f'CREATE SCHEMA "{pg_schema}"')
    query(
        f'CREATE TABLE "{pg_schema}".t (id bigint PRIMARY KEY, v text); INSERT INTO "{pg_schema}".t VALUES (1, \'old\')'
    )
    sink = _open(mirror_url(pg_schema), ("id",), schema)
    sink.write(_key("b1", 0), _rows(schema, {"id": [1, 2], "v": ["a", "b"]}, ["UPDATE_BEFORE", "INSERT"]))
    sink.close()
    assert target_table(pg_schema).to_pylist() == [{"id": 2, "v": "b"}]


def test_schema_follows_the_source_by_field_id(pg_schema: str) -> None:
    v1 = pa.schema(
        [
            _field("id", pa.int64(), 1, False),
            _field("n", pa.int32(), 2),
            _field("v", pa.large_string(), 3),
            _field("x", pa.large_string(), 4),
            *META,
        ]
    )
    sink = _open(mirror_url(pg_schema), ("id",), v1)
    sink.write(_key("b1", 0), _rows(v1, {"id": [1], "n": [10], "v": ["a"], "x": ["gone"]}, ["INSERT"]))
    # n widened to bigint, v renamed to w, x dropped, e added
    v2 = pa.schema(
        [
            _field("id", pa.int64(), 1, False),
            _field("n", pa.int64(), 2),
            _field("w", pa.large_string(), 3),
            _field("e", pa.float64(), 5),
            *META,
        ]
    )
    sink.write(_key("b2", 0), _rows(v2, {"id": [2], "n": [6_000_000_000], "w": ["b"], "e": [0.5]}, ["INSERT"], 2))
    sink.close()
    assert sorted(target_table(pg_schema).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "n": 10, "w": "a", "e": None},
        {"id": 2, "n": 6_000_000_000, "w": "b", "e": 0.5},
    ]
    narrowed = pa.schema([_field("id", pa.int64(), 1, False), _field("n", pa.int32(), 2), *META])
    sink = _open(mirror_url(pg_schema), ("id",), v2)
    with pytest.raises(SinkRejectedError, match="'n' is bigint, the source's is integer, which is not a widening"):
        sink.write(_key("b3", 0), _rows(narrowed, {"id": [3], "n": [1]}, ["INSERT"], 3))
    sink.close()


def test_an_unreachable_database_is_transient_and_shows_no_password() -> None:
    sink = open_sink("postgresql://u:topsecret@127.0.0.1:1/d?table=s.t&connect_timeout=2", consumer="c1")
    schema = pa.schema([_field("id", pa.int64(), 1, False), *META])
    with pytest.raises(SinkError) as info:
        sink.bind(("id",), schema)
    assert "topsecret" not in str(info.value) and "cannot reach sink postgresql://u@127.0.0.1:1/d" in str(info.value)


def test_the_ledger_may_live_in_another_schema(pg_schema: str) -> None:
    ledger_schema = f"{pg_schema}_ledger"
    schema = pa.schema([_field("id", pa.int64(), 1, False), *META])
    try:
        sink = _open(mirror_url(pg_schema, extra=f"&ledger={ledger_schema}"), ("id",), schema)
        sink.write(_key("b1", 0), _rows(schema, {"id": [1]}, ["INSERT"]))
        sink.write(_key("b1", 0), _rows(schema, {"id": [2]}, ["INSERT"]))  # a replay
        sink.close()
        assert target_table(pg_schema).column("id").to_pylist() == [1]
        assert ledger(ledger_schema) == [("c1-b1-000000-000000000000", "b1")]
        assert not query("SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = %s",
                         (pg_schema, "icetail_mirror_ledger"))  # fmt: skip
    finally:
        query(f'DROP SCHEMA IF EXISTS "{ledger_schema}" CASCADE')


def test_a_column_named_like_the_staging_op_is_refused(pg_schema: str) -> None:
    schema = pa.schema([_field("id", pa.int64(), 1, False), _field("_icetail_op", pa.large_string(), 2), *META])
    with pytest.raises(SinkRejectedError, match="'_icetail_op' has a name the PostgreSQL mirror uses itself"):
        _open(mirror_url(pg_schema), ("id",), schema)


def test_a_locked_target_fails_the_group_with_a_transient_error_naming_the_lock(pg_schema: str) -> None:
    """A second real connection holds ACCESS EXCLUSIVE on the target: the group fails after
    lock_timeout with a SinkError (retried), not a hang; once the lock is gone the retry applies it."""
    import psycopg

    from tests.support.stores import PG_URL

    schema = pa.schema([_field("id", pa.int64(), 1, nullable=False), _field("v", pa.large_string(), 2), *META])
    sink = _open(mirror_url(pg_schema, extra="&lock_timeout=300ms"), ("id",), schema)
    sink.write(_key("b1", 0), _rows(schema, {"id": [1], "v": ["a"]}, ["INSERT"]))
    with psycopg.connect(PG_URL) as holder:
        holder.execute(f'LOCK TABLE "{pg_schema}".t IN ACCESS EXCLUSIVE MODE')  # held until the block ends
        with pytest.raises(SinkError) as info:
            sink.write(_key("b2", 0), _rows(schema, {"id": [2], "v": ["b"]}, ["INSERT"], ordinal=2))
        message = str(info.value)
        assert "lock_timeout 300ms" in message and "pg_locks" in message and "\n" not in message, message
        assert not isinstance(info.value, SinkRejectedError)
        holder.rollback()
    sink.write(_key("b2", 0), _rows(schema, {"id": [2], "v": ["b"]}, ["INSERT"], ordinal=2))  # the retry
    sink.close()
    assert sorted(target_table(pg_schema).column("id").to_pylist()) == [1, 2]


def test_a_group_is_checked_against_the_lease_at_its_commit(pg_schema: str) -> None:
    """A replica cut off from the store must not commit a group after its lease's deadline, however
    long the group's transaction ran after the pipeline's check (issue 35): the pipeline's deadline
    is checked again inside the transaction, after the rows are applied, before COMMIT."""
    from icetail.monitor.engine.lease_clock import LeaseClock, LeaseDeadlineError

    schema = pa.schema([_field("id", pa.int64(), 1, False), _field("v", pa.large_string(), 2), *META])
    sink = _open(mirror_url(pg_schema), ("id",), schema)
    now = [0.0]
    clock = LeaseClock("c1", 10.0, clock=lambda: now[0])
    with clock.renewal():
        pass
    seen: list[tuple[str, int]] = []

    def check(what: str) -> None:
        seen.append((what, len(ledger(pg_schema))))  # another session: nothing is committed yet
        clock.check(what)

    sink.fence_commits(check)
    sink.write_group([(_key("b1", 0), _rows(schema, {"id": [1], "v": ["a"]}, ["INSERT"]))])  # in time
    rows = _rows(schema, {"id": [2, 3], "v": ["b", "c"]}, ["INSERT"] * 2, 2)
    now[0] = 9.5  # past the deadline (10 s - a 1 s margin) while the next group was applied
    with pytest.raises(LeaseDeadlineError, match="stopped before the mirror's commit"):
        sink.write_group([(_key("b1", 1), rows)])
    assert seen == [("mirror's commit", 0), ("mirror's commit", 1)]  # each time, the group not yet committed
    assert target_table(pg_schema).column("id").to_pylist() == [1] and len(ledger(pg_schema)) == 1  # rolled back
    with clock.renewal():  # renewed: the same group commits, once
        pass
    sink.write_group([(_key("b1", 1), rows)])
    assert sorted(target_table(pg_schema).column("id").to_pylist()) == [1, 2, 3] and len(ledger(pg_schema)) == 2
    sink.close()


def test_the_consumers_of_a_process_share_its_sessions_to_a_target(pg_schema: str) -> None:
    """Twelve consumers mirroring into one database from four threads hold four sessions, not one
    each (issue 35: a replica of a few hundred mirrored tables outgrew max_connections); a session
    the server ended fails one write (transient) and the next one opens afresh."""
    import threading
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    app = f"icetail-test-{uuid.uuid4().hex[:8]}"  # the URL's own application_name: kept, and a pool of its own
    schema = pa.schema([_field("id", pa.int64(), 1, False), _field("v", pa.large_string(), 2), *META])
    sinks = [_open(mirror_url(pg_schema, f"t{i}", f"&application_name={app}"), ("id",), schema) for i in range(12)]
    barrier = threading.Barrier(4)

    def write(i: int) -> None:
        if i < 4:
            barrier.wait(timeout=30)  # the first four at once
        sinks[i].write(ChunkKey(f"c{i}", "b1", 0, "s0", 0), _rows(schema, {"id": [i], "v": ["x"]}, ["INSERT"]))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(12)))

    def sessions() -> int:
        return int(query("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,))[0][0])

    assert 1 <= sessions() <= 4  # every sink still open: before, twelve
    assert [target_table(pg_schema, f"t{i}").column("id").to_pylist() for i in range(12)] == [[i] for i in range(12)]
    query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
    with pytest.raises(SinkError, match="retry"):
        sinks[0].write(ChunkKey("c0", "b2", 0, "s0", 0), _rows(schema, {"id": [100], "v": ["y"]}, ["INSERT"], 2))
    # the next write takes no other dead session: they were closed with the broken one
    sinks[1].write(ChunkKey("c1", "b2", 0, "s0", 0), _rows(schema, {"id": [101], "v": ["y"]}, ["INSERT"], 2))
    sinks[0].write(ChunkKey("c0", "b2", 0, "s0", 0), _rows(schema, {"id": [100], "v": ["y"]}, ["INSERT"], 2))
    assert sessions() == 1
    for sink in sinks:
        sink.close()
