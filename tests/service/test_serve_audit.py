"""The audit triggers of the replicas test (tests/support/serve_audit.py) catch what they are there
for: on a real PostgreSQL store, raw writes that icetail's fencing would refuse (a non-holder's, a
lease taken from a live holder, a mirror chunk applied twice, a batch chain with a gap) are each
recorded and named, and a write under an expired lease is listed apart (the store lets its holder
make it); the writes a holder makes in order are not named.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from icetail.state.store import open_store
from tests.support import serve_audit
from tests.support.stores import PG_URL, drop_state, new_state_url, pg_unavailable

FAR = 2**62  # a lease expiry far ahead of the database clock
A, B = "host:111:aaaa", "host:222:bbbb"


@pytest.fixture
def schemas(tmp_path: Path) -> Iterator[tuple[str, str]]:
    if reason := pg_unavailable():
        pytest.skip(reason)
    url = new_state_url("postgresql", tmp_path)
    with open_store(url):
        pass
    state = url.split("?schema=")[1]
    mirror = state.replace("icetail_pipe_", "icetail_mirror_")
    yield state, mirror
    drop_state(url)
    drop_state(f"{PG_URL}?schema={mirror}")


def session(pid: int, label: str):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(
        PG_URL, autocommit=True, application_name=f"icetail-state:{pid}", options=f"-c {serve_audit.SETTING}={label}"
    )


def test_the_audit_names_every_write_the_fencing_would_refuse(schemas: tuple[str, str]) -> None:
    import psycopg

    from icetail.sinks.postgres.apply import ensure_ledger

    state, mirror = schemas
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        ensure_ledger(conn, mirror)
    serve_audit.install(state, mirror)
    s = f'"{state}"'
    history = (
        f"INSERT INTO {s}.icetail_history (consumer, seq, batch_id, from_snapshot_exclusive, to_snapshot_inclusive, "
        "row_count, split_count, started_at_ms, finished_at_ms) VALUES ('c', %s, %s, %s, %s, 0, 0, 0, 0)"
    )
    ledger = f'INSERT INTO "{mirror}".icetail_mirror_ledger (consumer, chunk, batch_id, target) VALUES (%s, %s, %s, %s)'
    with session(111, "a") as a, session(222, "b") as b:
        a.execute(
            f"INSERT INTO {s}.icetail_consumers (consumer, catalog_name, table_name, generation, lease_owner, "
            "lease_expires_at_ms, created_at_ms, updated_at_ms) VALUES ('c', 'cat', 'ns.t', 0, %s, %s, 0, 0)",
            (A, FAR),
        )
        a.execute(history, (1, "b1", None, 10))  # the holder, in order: fine
        a.execute(ledger, ("c", "k1", "b1", "t"))
        a.execute(history, (2, "b2", 10, 20))
        clean = serve_audit.writes(state)
        assert [w.kind for w in clean] == ["create", "history", "sink", "history"], clean
        assert not serve_audit.problems(clean, {"a": 111, "b": 222}, killed=set())

        b.execute(history, (3, "b3", 20, 30))  # not the holder
        a.execute(f"UPDATE {s}.icetail_consumers SET lease_expires_at_ms = 0 WHERE consumer = 'c'")
        a.execute(history, (4, "b4", 35, 40))  # under an expired lease, and a gap in the chain
        a.execute(f"UPDATE {s}.icetail_consumers SET lease_expires_at_ms = %s WHERE consumer = 'c'", (FAR,))
        b.execute(f"UPDATE {s}.icetail_consumers SET lease_owner = %s WHERE consumer = 'c'", (B,))  # from live a
        b.execute(f'DELETE FROM "{mirror}".icetail_mirror_ledger')
        b.execute(ledger, ("c", "k1", "b1", "t"))  # a chunk again
    found = serve_audit.problems(serve_audit.writes(state), {"a": 111, "b": 222}, killed=set())
    text = "\n".join(found)
    assert "history of c by pid 222, lease held by host:111:aaaa" in text, text
    assert [(w.kind, w.batch_id) for w in serve_audit.late(serve_audit.writes(state))] == [("history", "b4")]
    assert "history of c under a lease expired" in text, text
    assert "batch b4 starts after 35, not 30" in text, text
    assert "lease of c taken from live host:111:aaaa by host:222:bbbb" in text, text
    assert "mirror chunk k1 of c applied 2 times" in text, text
    # a lease taken from a killed holder is no problem
    assert not any("taken from live" in p for p in serve_audit.problems(serve_audit.writes(state), {}, killed={111}))
