"""Bounds on every PostgreSQL session icetail opens (the checkpoint store, the mirror sinks).

A process cut off from the server mid-transaction keeps its row locks on the server until the
server notices: by default not before its TCP keepalive, two hours. Meanwhile the replica that
takes the consumer over (the lease expired) waits on those locks, fails at its lock_timeout and
retries, cycle after cycle. So each session asks the server to end a transaction left idle
(`idle_in_transaction_session_timeout`) and to probe a silent client early (server-side keepalives
and `tcp_user_timeout`); the client side gets the same keepalives through libpq's parameters, so a
call cut off fails within about half a minute instead of the OS's 15 minutes. A URL that sets one
of the libpq parameters itself keeps its value. icetail's transactions never wait on Spark or on a
sink between their statements, so a few seconds idle inside one means the client is gone or stuck.
psycopg is never imported here.
"""

from __future__ import annotations

from typing import Any

CLIENT_TCP_BOUNDS = {"keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3, "tcp_user_timeout": 30_000}
SERVER_TCP_BOUNDS = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "30000",
}


def client_bounds(conninfo: str, **defaults: Any) -> dict[str, Any]:
    """libpq's keepalive and user-timeout parameters, and `defaults`, but those the URL (`conninfo`)
    sets itself."""
    return {name: value for name, value in {**CLIENT_TCP_BOUNDS, **defaults}.items() if name not in conninfo}


def server_bounds_sql(idle_in_transaction_ms: int) -> tuple[str, tuple[str, ...]]:
    """One statement (psycopg's %s placeholders) that sets the server side's bounds for this session."""
    settings = {"idle_in_transaction_session_timeout": str(int(idle_in_transaction_ms)), **SERVER_TCP_BOUNDS}
    calls = ", ".join("set_config(%s, %s, false)" for _ in settings)
    return f"SELECT {calls}", tuple(v for pair in settings.items() for v in pair)
