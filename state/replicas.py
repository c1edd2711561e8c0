"""`serve` replicas registered in the checkpoint store: who is alive to share one configuration.

Each replica registers itself and renews a heartbeat whose expiry is on the database clock, as a
lease's is: no two hosts' clocks are compared. A replica is live until its heartbeat expires; one
that stops (SIGTERM) leaves at once. The registry decides nothing by itself: the lease on each
consumer stays the one guarantee that a single process writes it. Replicas read the registry only
to know their fair share of the consumers (monitor/service/assignment.py).

A SQLite store lives on one host's disk: a replica from another host is refused.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from icetail.kernel.errors import ConfigError
from icetail.kernel.processes import host_name, lease_holder_is_dead, process_token
from icetail.state.backend import Tx
from icetail.state.checkpoint import Lease
from icetail.state.store import SqlCheckpointStore

# a replica gone this long (no heartbeat, never left: SIGKILL) is forgotten by the next one to beat
FORGET_AFTER_MS = 24 * 3600 * 1000
# appended to its group's key while a replica cannot deliver yet (its Spark session starts): it is a
# registered replica (its leases are a replica's) that no share counts, as if of another configuration
STARTING_SUFFIX = "~starting"


def starting_key(group: str) -> str:
    """The key a replica of `group` registers under while it cannot deliver yet."""
    return group + STARTING_SUFFIX

_REPLICA_COLUMNS = "replica, group_key, host, pid, started_at_ms, heartbeat_at_ms, expires_at_ms"


@dataclass(frozen=True)
class ReplicaId:
    """One `serve` process: its host, pid and a token of its start (a pid is reused after a restart)."""

    host: str
    pid: int
    token: str

    @property
    def name(self) -> str:
        """`host:pid:token`, the form of a lease owner: the replica's leases carry its name."""
        return f"{self.host}:{self.pid}:{self.token}"

    @classmethod
    def of_this_process(cls) -> ReplicaId:
        return cls(host_name(), os.getpid(), process_token())


@dataclass(frozen=True)
class Replica:
    """A registered replica as the store holds it; times in epoch ms of the database clock."""

    name: str
    group: str
    host: str
    pid: int
    started_at_ms: int
    heartbeat_at_ms: int
    expires_at_ms: int

    @property
    def starting(self) -> bool:
        """Registered while its Spark session starts: counted in no group's shares yet."""
        return self.group.endswith(STARTING_SUFFIX)

    def is_live(self, now_ms: int, me: str = "") -> bool:
        """Its heartbeat has not expired, and (on this host) its process still runs; `me` is this process's."""
        return self.expires_at_ms > now_ms and not process_gone(self.name, me)


def process_gone(owner: str, me: str) -> bool:
    """Whether the process `owner` names ran on this host, in this PID namespace, and is gone (never this
    process `me`: lease_holder_is_dead counts another token of our own pid gone)."""
    return owner != me and lease_holder_is_dead(owner)


@dataclass(frozen=True)
class Roster:
    """A group's replicas and its consumers' leases, read by replica `me` in one transaction at `now_ms`."""

    me: str
    now_ms: int
    live: tuple[Replica, ...]  # live replicas of the group, by name
    registered: frozenset[str]  # every replica name the store knows, live or not
    leases: Mapping[str, Lease | None]  # the group's consumers: each one's lease (None: free or not created)
    starting: tuple[Replica, ...] = ()  # live replicas of the group whose Spark session still starts

    def holder(self, consumer: str) -> str | None:
        """Who holds the consumer now: the owner of a live lease whose process may still run."""
        lease = self.leases.get(consumer)
        if lease is None or not lease.is_live(self.now_ms) or process_gone(lease.owner, self.me):
            return None
        return lease.owner

    def held_by(self, owner: str) -> int:
        """How many of the group's consumers `owner` holds."""
        return sum(1 for consumer in self.leases if self.holder(consumer) == owner)

    def free(self) -> int:
        """Consumers nobody holds: free, released, or their holder's lease expired."""
        return sum(1 for consumer in self.leases if self.holder(consumer) is None)


def group_key(consumers: Collection[str]) -> str:
    """A configuration's name in the registry: its consumers, whatever their order."""
    import hashlib

    digest = hashlib.sha256("\n".join(sorted(consumers)).encode()).hexdigest()
    return f"g{digest[:15]}"


class ReplicaRegistry:
    """The replicas table of one store (schema 10)."""

    def __init__(self, store: SqlCheckpointStore) -> None:
        self._store = store

    def _now_ms(self, tx: Tx) -> int:
        return int(tx.query(f"SELECT {self._store.backend.now_ms_sql}")[0][0])

    def _one_host(self) -> bool:
        from icetail.state.sqlite_store import SqliteBackend

        return isinstance(self._store.backend, SqliteBackend)

    def heartbeat(self, me: ReplicaId, group: str, ttl_seconds: float) -> int:
        """Register `me` (or renew its heartbeat) for `ttl_seconds`; the expiry (database clock, ms).

        ConfigError on a SQLite store that a live replica on another host uses.
        """
        ttl_ms = max(1, round(ttl_seconds * 1000))

        def work(tx: Tx) -> int:
            now = self._now_ms(tx)
            if self._one_host():
                others = tx.query(
                    "SELECT replica, host FROM icetail_replicas WHERE host <> ? AND expires_at_ms > ? ORDER BY replica",
                    (me.host, now),
                )
                if others:
                    raise ConfigError(
                        f"checkpoint store {self._store.display} is a SQLite file, for one host, and replica "
                        f"{others[0][0]} on host {others[0][1]} serves from it; replicas on several hosts share a "
                        "PostgreSQL store: --state postgresql://HOST/DB"
                    )
            tx.execute("DELETE FROM icetail_replicas WHERE expires_at_ms < ?", (now - FORGET_AFTER_MS,))
            tx.execute(
                f"INSERT INTO icetail_replicas ({_REPLICA_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (replica) DO UPDATE SET group_key = excluded.group_key, "
                "heartbeat_at_ms = excluded.heartbeat_at_ms, expires_at_ms = excluded.expires_at_ms",
                (me.name, group, me.host, me.pid, now, now, now + ttl_ms),
            )
            return now + ttl_ms

        return self._store.transact(work, write=True)

    def leave(self, me: ReplicaId) -> None:
        """Unregister `me` (a replica that stops): the others count it out at once."""
        self._store.transact(
            lambda tx: tx.execute("DELETE FROM icetail_replicas WHERE replica = ?", (me.name,)), write=True
        )

    def roster(self, me: ReplicaId, group: str, consumers: Collection[str]) -> Roster:
        """The group's live replicas and the leases of `consumers`, at one instant, as `me` sees them."""

        def work(tx: Tx) -> Roster:
            now = self._now_ms(tx)
            replicas = [_replica(r) for r in tx.query(f"SELECT {_REPLICA_COLUMNS} FROM icetail_replicas")]
            wanted = set(consumers)
            leases: dict[str, Lease | None] = dict.fromkeys(wanted)
            for consumer, owner, expires in tx.query(
                "SELECT consumer, lease_owner, lease_expires_at_ms FROM icetail_consumers"
            ):
                if consumer in wanted and owner is not None:
                    leases[consumer] = Lease(owner, int(expires))
            def live_in(key: str) -> tuple[Replica, ...]:
                return tuple(
                    sorted((r for r in replicas if r.group == key and r.is_live(now, me.name)), key=lambda r: r.name)
                )

            registered = frozenset(r.name for r in replicas)
            return Roster(me.name, now, live_in(group), registered, leases, live_in(starting_key(group)))

        return self._store.transact(work, write=False)

    def replicas(self) -> tuple[tuple[Replica, bool], ...]:
        """Every registered replica and whether it is live, by name (for `icetail status`)."""

        def work(tx: Tx) -> tuple[tuple[Replica, bool], ...]:
            now = self._now_ms(tx)
            rows = tx.query(f"SELECT {_REPLICA_COLUMNS} FROM icetail_replicas ORDER BY replica")
            return tuple((r, r.is_live(now)) for r in map(_replica, rows))

        return self._store.transact(work, write=False)


def _replica(row: tuple[Any, ...]) -> Replica:
    name, group, host, pid, started, beat, expires = row
    return Replica(name, group, host, int(pid), int(started), int(beat), int(expires))
