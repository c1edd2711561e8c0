"""`serve` replicas of one configuration share its consumers out (issue 35).

Every replica registers in each checkpoint store its consumers live in (state/replicas.py) and
beats there on a thread of its own, every `beat_seconds`; each beat also reads the store's roster
(the live replicas of this configuration and every consumer's lease) and renews the leases of the
consumers this replica holds, so an idle consumer keeps its lease between cycles.

A consumer's cycle asks `claim` before it opens the consumer: a consumer whose lease another live
process holds is skipped (not a failure), and a replica claims free or expired consumers only up
to its fair share, ceil(consumers / live replicas). A replica registers (is counted in the others'
shares) only once it can deliver, its Spark session started: one that joins while its JVM starts
would otherwise be handed consumers it cannot read for tens of seconds (a rolling restart's lag).
Until then it registers as starting (a replica, whose leases are a replica's, in no share) and
claims nothing while other replicas live; alone, it claims at once, its first cycles opening stores
and planning while the JVM starts, up to its share among the replicas starting with it. After a
cycle that committed its batches, a replica above its share whose peers have room `release`s that
consumer: a hand-over at a batch boundary, never by racing a lease mid-write. The claim itself is
the store's `acquire_lease`, one transaction that locks the consumer's row: two replicas claiming
one consumer cannot both win. The registry only counts replicas; the lease stays the one guarantee
of a single writer.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from icetail.kernel.errors import ConfigError, IcetailError, message_line
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.service.table_patterns import TablePattern
from icetail.state.replicas import ReplicaId, ReplicaRegistry, Roster, group_key, starting_key
from icetail.state.store import SqlCheckpointStore, open_store
from icetail.state.urls import new_sqlite_file, remove_sqlite_file

log = logging.getLogger("icetail.serve")

MIN_BEAT_SECONDS = 0.2


def fair_share(consumers: int, replicas: int) -> int:
    """The most consumers one of `replicas` live replicas claims: ceil(consumers / replicas)."""
    return math.ceil(consumers / max(1, replicas))


def beat_seconds(interval_seconds: float, lease_ttl_seconds: float) -> float:
    """How often a replica beats: a sixth of the lease TTL, so an idle consumer's lease (renewed
    once a third of it passed) never has less than half its TTL left; at most one poll interval,
    so hand-overs are seen by the next cycle."""
    return max(MIN_BEAT_SECONDS, min(interval_seconds, lease_ttl_seconds / 6))


class Assignment:
    """One replica's share of its configuration's consumers; every method is thread-safe.

    `held(state_url)` counts the consumers this replica holds open in that store (Service's jobs).
    """

    def __init__(
        self,
        pipelines: Sequence[PipelineConfig],
        held: Callable[[str], int],
        *,
        beat_s: float,
        patterns: Sequence[TablePattern] = (),
        deliverable: Callable[[], bool] = lambda: True,
    ) -> None:
        """`deliverable()`: whether this replica can deliver now (its Spark session started)."""
        self.me = ReplicaId.of_this_process()
        self._held = held
        self._deliverable = deliverable
        self._beat_s = beat_s
        templates = [*pipelines, *(p.template for p in patterns)]
        self._ttl_s = max(p.lease_ttl_seconds for p in templates)  # a replica's heartbeat outlives its leases
        self._consumers: dict[str, tuple[str, ...]] = {p.state_url: () for p in templates}
        for p in pipelines:
            self._consumers[p.state_url] = (*self._consumers[p.state_url], p.consumer_id)
        # each store's group: the configuration's identity there, its consumers and its patterns (the
        # tables a pattern matches change, the group must not: replicas see a new table at different polls)
        self._groups = {
            url: group_key([*consumers, *(p.key for p in patterns if p.template.state_url == url)])
            for url, consumers in self._consumers.items()
        }
        self._lock = threading.Lock()
        self._stores: dict[str, SqlCheckpointStore] = {}
        self._created: dict[str, str] = {}  # SQLite files this replica's registration created, by store URL
        self._rosters: dict[str, Roster] = {}
        self._claiming = dict.fromkeys(self._consumers, 0)
        self._released = dict.fromkeys(self._consumers, False)  # since the last roster: wait for the next
        self._unreachable: dict[str, str] = {}  # stores whose last beat failed, and why
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, config: PipelineConfig) -> None:
        """Share one more consumer (a table a pattern found) from the next claim on."""
        with self._lock:
            known = self._consumers[config.state_url]
            if config.consumer_id not in known:
                self._consumers[config.state_url] = (*known, config.consumer_id)

    @property
    def owner(self) -> str:
        """The lease owner of every consumer this replica holds: its name."""
        return self.me.name

    # the heartbeat -----------------------------------------------------------------------
    def start(self, renew_held: Callable[[], None]) -> None:
        """Register (ConfigError now if a store refuses this replica), then beat until `stop`."""
        self.beat(first=True)
        self._thread = threading.Thread(target=self._loop, args=(renew_held,), name="icetail-replica", daemon=True)
        self._thread.start()

    def _loop(self, renew_held: Callable[[], None]) -> None:
        while not self._stop.wait(self._beat_s):
            renew_held()
            self.beat()

    def beat(self, *, first: bool = False) -> None:
        """Renew this replica's heartbeat in each store (as starting while it cannot deliver yet) and
        read its roster; a store that fails keeps its last roster (its consumers' own cycles report the
        store), except a refusal of this replica."""
        for url, consumers in self._consumers.items():
            try:
                if url not in self._stores:
                    created = new_sqlite_file(url)
                    self._stores[url] = open_store(url)
                    if created is not None:
                        self._created[url] = created
                registry = ReplicaRegistry(self._stores[url])
                group = self._groups[url]
                registry.heartbeat(self.me, group if self._deliverable() else starting_key(group), self._ttl_s)
                roster = registry.roster(self.me, group, consumers)
            except ConfigError:
                if first:
                    raise
                log.exception("replica refused by the checkpoint store")
                continue
            except IcetailError as exc:
                log.warning("replica heartbeat failed", extra={"state": url, "error": message_line(exc)})
                with self._lock:
                    self._unreachable[url] = message_line(exc)
                continue
            with self._lock:
                self._unreachable.pop(url, None)
                self._rosters[url] = roster
                self._released[url] = False

    def stop(self) -> None:
        """Stop beating and leave every store (the others count this replica out at once). A SQLite
        store this replica's registration created, and that nothing else was written to (no consumer,
        no stop, no other replica), is removed: a serve refused at its first cycle leaves nothing behind."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for url, store in self._stores.items():
            unused = False
            try:
                registry = ReplicaRegistry(store)
                registry.leave(self.me)
                if url in self._created:
                    unused = not (store.list_consumers() or store.stopped_consumers() or registry.replicas())
            except IcetailError as exc:
                log.warning("could not leave the replica registry", extra={"error": message_line(exc)})
            store.close()
            if unused:
                remove_sqlite_file(self._created[url])

    # decisions ---------------------------------------------------------------------------
    def holder_elsewhere(self, config: PipelineConfig) -> str | None:
        """The live process other than this replica that holds the consumer, as of the last roster."""
        with self._lock:
            roster = self._rosters.get(config.state_url)
        holder = roster.holder(config.consumer_id) if roster is not None else None
        return holder if holder != self.owner else None

    def current_holder(self, config: PipelineConfig) -> str | None:
        """The live holder of the consumer now, from a fresh roster (None if the store cannot say)."""
        url = config.state_url
        try:
            registry = ReplicaRegistry(self._stores[url])
            roster = registry.roster(self.me, self._groups[url], self._consumers[url])
        except (KeyError, IcetailError):
            return None
        with self._lock:
            self._rosters[url] = roster
        return roster.holder(config.consumer_id)

    def is_replica(self, config: PipelineConfig, owner: str) -> bool:
        """Whether a lease owner is a `serve` replica the store knows (live or not yet forgotten)."""
        with self._lock:
            roster = self._rosters.get(config.state_url)
        return roster is not None and owner in roster.registered

    def _others_live(self, roster: Roster) -> bool:
        return any(r.name != self.owner for r in roster.live)

    def _live(self, roster: Roster) -> int:
        return len(roster.live) + (0 if any(r.name == self.owner for r in roster.live) else 1)

    def _share(self, url: str, roster: Roster) -> int:
        """ceil(consumers / live replicas); while this replica starts too, the other starting ones count:
        replicas started together then claim their shares, not all of it the first one to plan."""
        replicas = self._live(roster)
        if not self._deliverable():
            replicas += sum(1 for r in roster.starting if r.name != self.owner)
        return fair_share(len(self._consumers[url]), replicas)

    def replicas_alive(self) -> int:
        """Live replicas of this configuration, this one included, in the last rosters (the most of
        its stores: every replica beats in each); 1 before a first roster."""
        with self._lock:
            return max((self._live(roster) for roster in self._rosters.values()), default=1)

    def store_problem(self) -> str | None:
        """Why this replica's last heartbeat failed in a store (it can neither renew nor take over
        there), or None: a replica cut off from its store is not ready, whatever it holds."""
        with self._lock:
            problems = list(self._unreachable.values())
        return f"replica heartbeat failed: {problems[0]}" if problems else None

    def over_share(self) -> str | None:
        """Why this replica holds more than its share (it hands the surplus over at batch boundaries),
        or None; a replica holding less, nothing at all included, is within its share."""
        with self._lock:
            for url, roster in self._rosters.items():
                share, held = self._share(url, roster), self._held(url)
                if held > share:
                    return (
                        f"this replica holds {held} of {len(self._consumers[url])} consumers, above its share of "
                        f"{share} among {self._live(roster)} replicas; handing over at the next batch boundary"
                    )
        return None

    def expired_holder(self, config: PipelineConfig) -> str | None:
        """The replica whose lease on the consumer expired (or whose process is gone), as of the last
        roster: claiming the consumer now takes it over (hand-over cause `expired`)."""
        with self._lock:
            roster = self._rosters.get(config.state_url)
        if roster is None:
            return None
        lease = roster.leases.get(config.consumer_id)
        if lease is None or lease.owner == self.owner or roster.holder(config.consumer_id) is not None:
            return None
        return lease.owner if lease.owner in roster.registered else None

    @contextmanager
    def claim(self, config: PipelineConfig) -> Iterator[str | None]:
        """Yield None if this replica may claim the consumer now (open it inside), else why not."""
        url = config.state_url
        with self._lock:
            roster = self._rosters.get(url)
            reason = None
            holder = roster.holder(config.consumer_id) if roster is not None else None
            if holder is not None and holder != self.owner:
                reason = f"leased to {holder}"
            elif roster is not None and not self._deliverable() and self._others_live(roster):
                reason = "this replica's Spark session is starting; the live replicas deliver meanwhile"
            elif roster is not None and self._held(url) + self._claiming[url] >= self._share(url, roster):
                reason = f"this replica holds its share ({self._share(url, roster)}) of {len(self._consumers[url])}"
            if reason is None:
                self._claiming[url] += 1
        if reason is not None:
            yield reason
            return
        try:
            yield None
        finally:
            with self._lock:
                self._claiming[url] -= 1

    def should_release(self, config: PipelineConfig) -> str | None:
        """Why this replica hands the consumer over now (after a committed batch), or None to keep it:
        it holds more than its share and its peers have room beyond the consumers already free."""
        url = config.state_url
        with self._lock:
            roster = self._rosters.get(url)
            if roster is None or self._released[url]:
                return None
            share = self._share(url, roster)
            room = sum(max(0, share - roster.held_by(r.name)) for r in roster.live if r.name != self.owner)
            held = self._held(url)
            if held <= share or room <= roster.free():
                return None
            self._released[url] = True  # one hand-over per roster: the next shows where it went
        return f"this replica holds {held} consumers, above its share of {share}, and its peers have room"
