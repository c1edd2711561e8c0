"""A process's sessions to one PostgreSQL mirror target, shared by every consumer writing there.

A `serve` replica following a few hundred tables into one database opened one session per
consumer and kept it: three replicas of 100 mirrored tables each outgrew the server's default
`max_connections` (100) on their own. A session is now borrowed for one step (binding a table, a
group's transaction) and given back, so a process holds at most as many as it has steps running at
once (serve's scheduler threads, `concurrent_tables`), and keeps at most `KEEP_IDLE` of them open
while idle. A session given back broken, closed or inside a transaction is closed, never reused;
one given back broken closes the idle ones too, since what broke it (a server restart, a network
cut) most likely broke them: the next step opens a fresh session instead of failing on each.
Sessions of one pool share every setting a session is opened with (the URL, its lock_timeout).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

KEEP_IDLE = 8  # idle sessions kept per target and process; more are closed when given back

_pools: dict[Hashable, SessionPool] = {}
_pools_lock = threading.Lock()


class SessionPool:
    """Idle sessions of one target, handed to one borrower at a time."""

    def __init__(self, open_session: Callable[[], Any], keep_idle: int = KEEP_IDLE) -> None:
        self._open = open_session
        self._keep_idle = keep_idle
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    @contextmanager
    def session(self) -> Iterator[Any]:
        """An open session for the caller alone until the block ends."""
        conn = self._take() or self._open()
        try:
            yield conn
        finally:
            self._give_back(conn)

    def close_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self) -> Any:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not (conn.closed or conn.broken):
                    return conn
        return None

    def _give_back(self, conn: Any) -> None:
        if conn.broken:
            conn.close()
            self.close_idle()
            return
        if not conn.closed and _idle_outside_transaction(conn):
            with self._lock:
                if len(self._idle) < self._keep_idle:
                    self._idle.append(conn)
                    return
        conn.close()


def _idle_outside_transaction(conn: Any) -> bool:
    from psycopg.pq import TransactionStatus

    return bool(conn.info.transaction_status == TransactionStatus.IDLE)


def pool_for(key: Hashable, open_session: Callable[[], Any]) -> SessionPool:
    """The process's pool for `key` (every setting a session is opened with), made on first use."""
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = SessionPool(open_session)
        return pool
