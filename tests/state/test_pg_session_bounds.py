"""A client cut off mid-transaction does not keep its locks (icetail/kernel/pg_session.py).

The store's sessions ask the server to end a transaction left idle (5 s): a replica whose link
dropped while it held a consumer's row lock would otherwise block the replica taking the consumer
over until the server's two-hour keepalive. Played here with a real PostgreSQL: a store session
locks the row and goes silent; another store's lease acquire (which waits on that row for at most
its 10 s lock_timeout) gets it once the server ended the silent one.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from icetail.kernel.errors import StateError
from icetail.state.checkpoint import Cursor
from icetail.state.postgres_store import DEFAULT_LOCK_TIMEOUT_MS, IDLE_IN_TRANSACTION_MS
from icetail.state.store import open_store
from tests.support.checkpoints import PG_URL


def test_store_and_mirror_sessions_carry_the_bounds(pg_schema: str) -> None:
    from icetail.sinks.postgres.mirror import connect
    from icetail.sinks.postgres.url import parse_mirror_url

    with open_store(f"{PG_URL}?schema={pg_schema}") as store:
        shown = store.transact(
            lambda tx: tx.query(
                "SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('tcp_user_timeout')"
            )[0],
            write=False,
        )
    assert shown == ("5s", "30000")  # ms
    sink = connect(parse_mirror_url(f"{PG_URL}?table=public.bounds_probe"))
    try:
        assert sink.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("1min",)
    finally:
        sink.close()


@pytest.mark.parametrize("last_call", ["query", "execute_many"])
def test_a_silent_session_holding_a_consumer_row_is_ended_by_the_server(pg_schema: str, last_call: str) -> None:
    """`execute_many`: the holder's last call before it goes silent inserts rows as beginning a batch
    does (its splits). With psycopg's executemany (pipeline mode: a Flush after the Sync disarms the
    server's idle timeout) the server kept the silent transaction for good (issue 47)."""
    assert IDLE_IN_TRANSACTION_MS < DEFAULT_LOCK_TIMEOUT_MS  # else the taker-over gives up first
    url = f"{PG_URL}?schema={pg_schema}"
    with open_store(url) as setup:
        setup.ensure_consumer("c", "cat", "db.t", Cursor.before_first_snapshot())
    locked, release = threading.Event(), threading.Event()
    ended: list[BaseException] = []

    def silent_holder() -> None:
        with open_store(url) as store:

            def work(tx: object) -> None:
                tx.query("SELECT consumer FROM icetail_consumers WHERE consumer = ? FOR UPDATE", ("c",))  # type: ignore[attr-defined]
                if last_call == "execute_many":
                    tx.execute_many(  # type: ignore[attr-defined]
                        "INSERT INTO icetail_meta (key, value) VALUES (?, ?)", [("probe-1", "a"), ("probe-2", "b")]
                    )
                locked.set()
                release.wait(60)  # the client goes silent inside its transaction

            try:
                store.transact(work, write=True)
            except (StateError, psycopg.Error) as exc:
                ended.append(exc)

    holder = threading.Thread(target=silent_holder, daemon=True)
    holder.start()
    assert locked.wait(30)
    with open_store(url) as taker:
        started = time.monotonic()
        lease = taker.acquire_lease("c", "taker", 30)  # waits on the row until the server ends the holder
        waited = time.monotonic() - started
    release.set()
    holder.join(30)
    assert lease.owner == "taker"
    assert waited * 1000 >= IDLE_IN_TRANSACTION_MS * 0.8, waited  # it did wait on the silent holder's lock
    assert len(ended) == 1, ended  # the holder's transaction was ended by the server, not committed
