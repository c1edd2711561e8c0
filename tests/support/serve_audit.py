"""Who wrote what, recorded by PostgreSQL itself: triggers a replicas test installs on a checkpoint
store (and on a PostgreSQL mirror's ledger) that log, in the writing transaction, every progress
write and every lease change with the consumer's lease row at that instant, on the database clock.

A store session names its process in `application_name` (`icetail-state:PID`, state/postgres_store.py);
a mirror session does not (it is `icetail`), so each replica is started with
`PGOPTIONS=-c icetail_audit.replica=NAME` (`replica_env`), which libpq sends for every session of
that process, and the triggers read it back. The audit rows commit with the write they describe:
a write the store refuses (a fenced late write) leaves none.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from tests.support.pg_mirror import query

AUDIT = "icetail_test_audit"
SETTING = "icetail_audit.replica"

# the progress writes of state/sql_batches.py: each is fenced by the lease (state/fencing.py)
PROGRESS = ("begin", "abandon_or_finish", "chunk", "history", "cursor")


def replica_env(name: str) -> dict[str, str]:
    return {"PGOPTIONS": f"-c {SETTING}={name}"}


def install(state_schema: str, ledger_schema: str | None = None) -> None:
    """The audit table and the triggers, in `state_schema` (dropped with it); the store's tables must exist."""
    s = f'"{state_schema}"'
    now = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
    query(
        f"""
        CREATE TABLE {s}.{AUDIT} (
            id BIGSERIAL PRIMARY KEY, kind TEXT NOT NULL, consumer TEXT NOT NULL, batch_id TEXT, chunk TEXT,
            from_snap BIGINT, to_snap BIGINT, app TEXT, label TEXT,
            lease_owner TEXT, lease_expires_ms BIGINT, old_owner TEXT, old_expires_ms BIGINT,
            now_ms BIGINT NOT NULL
        )
        """
    )
    query(
        f"""
        CREATE FUNCTION {s}.icetail_test_audit_store() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            c TEXT; o TEXT; e BIGINT; k TEXT; b TEXT; f BIGINT; t BIGINT;
        BEGIN
            IF TG_TABLE_NAME = 'icetail_consumers' THEN
                IF TG_OP = 'INSERT' THEN
                    INSERT INTO {s}.{AUDIT} (kind, consumer, app, label, lease_owner, lease_expires_ms, now_ms)
                    VALUES ('create', NEW.consumer, current_setting('application_name'),
                            current_setting('{SETTING}', true), NEW.lease_owner, NEW.lease_expires_at_ms, {now});
                    RETURN NULL;
                END IF;
                IF NEW.lease_owner IS DISTINCT FROM OLD.lease_owner THEN
                    INSERT INTO {s}.{AUDIT} (kind, consumer, app, label, lease_owner, lease_expires_ms,
                                             old_owner, old_expires_ms, now_ms)
                    VALUES ('lease', NEW.consumer, current_setting('application_name'),
                            current_setting('{SETTING}', true), NEW.lease_owner, NEW.lease_expires_at_ms,
                            OLD.lease_owner, OLD.lease_expires_at_ms, {now});
                END IF;
                IF NEW.cursor_snapshot_id IS DISTINCT FROM OLD.cursor_snapshot_id
                   OR NEW.generation IS DISTINCT FROM OLD.generation THEN
                    INSERT INTO {s}.{AUDIT} (kind, consumer, from_snap, to_snap, app, label, lease_owner,
                                             lease_expires_ms, now_ms)
                    VALUES ('cursor', NEW.consumer, OLD.cursor_snapshot_id, NEW.cursor_snapshot_id,
                            current_setting('application_name'), current_setting('{SETTING}', true),
                            NEW.lease_owner, NEW.lease_expires_at_ms, {now});
                END IF;
                RETURN NULL;
            END IF;
            IF TG_TABLE_NAME = 'icetail_inflight_batches' THEN
                IF TG_OP = 'INSERT' THEN
                    k := 'begin'; c := NEW.consumer; b := NEW.batch_id;
                    f := NEW.from_snapshot_exclusive; t := NEW.to_snapshot_inclusive;
                ELSE
                    k := 'abandon_or_finish'; c := OLD.consumer; b := OLD.batch_id;
                    f := OLD.from_snapshot_exclusive; t := OLD.to_snapshot_inclusive;
                END IF;
            ELSIF TG_TABLE_NAME = 'icetail_inflight_splits' THEN
                k := 'chunk'; c := NEW.consumer; b := NEW.batch_id;
            ELSE  -- icetail_history
                k := 'history'; c := NEW.consumer; b := NEW.batch_id;
                f := NEW.from_snapshot_exclusive; t := NEW.to_snapshot_inclusive;
            END IF;
            SELECT lease_owner, lease_expires_at_ms INTO o, e FROM {s}.icetail_consumers WHERE consumer = c;
            INSERT INTO {s}.{AUDIT} (kind, consumer, batch_id, from_snap, to_snap, app, label,
                                     lease_owner, lease_expires_ms, now_ms)
            VALUES (k, c, b, f, t, current_setting('application_name'), current_setting('{SETTING}', true),
                    o, e, {now});
            RETURN NULL;
        END $$
        """
    )
    for table, events in (
        ("icetail_consumers", "INSERT OR UPDATE"),
        ("icetail_inflight_batches", "INSERT OR DELETE"),
        ("icetail_inflight_splits", "UPDATE"),
        ("icetail_history", "INSERT"),
    ):
        query(
            f"CREATE TRIGGER icetail_test_audit AFTER {events} ON {s}.{table} "
            f"FOR EACH ROW EXECUTE FUNCTION {s}.icetail_test_audit_store()"
        )
    if ledger_schema is None:
        return
    m = f'"{ledger_schema}"'
    query(
        f"""
        CREATE FUNCTION {m}.icetail_test_audit_ledger() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            o TEXT; e BIGINT;
        BEGIN
            SELECT lease_owner, lease_expires_at_ms INTO o, e FROM {s}.icetail_consumers WHERE consumer = NEW.consumer;
            INSERT INTO {s}.{AUDIT} (kind, consumer, batch_id, chunk, app, label, lease_owner, lease_expires_ms, now_ms)
            VALUES ('sink', NEW.consumer, NEW.batch_id, NEW.chunk, current_setting('application_name'),
                    current_setting('{SETTING}', true), o, e, {now});
            RETURN NULL;
        END $$
        """
    )
    query(
        f"CREATE TRIGGER icetail_test_audit AFTER INSERT ON {m}.icetail_mirror_ledger "
        f"FOR EACH ROW EXECUTE FUNCTION {m}.icetail_test_audit_ledger()"
    )


@dataclass(frozen=True)
class Write:
    id: int
    kind: str
    consumer: str
    batch_id: str | None
    chunk: str | None
    from_snap: int | None
    to_snap: int | None
    app: str | None
    label: str | None
    lease_owner: str | None
    lease_expires_ms: int | None
    old_owner: str | None
    old_expires_ms: int | None
    now_ms: int

    @property
    def writer_pid(self) -> int | None:
        """The pid of the writing process, from its store session's name (`icetail-state:PID`)."""
        if self.app and self.app.startswith("icetail-state:"):
            return int(self.app.split(":", 1)[1])
        return None


def owner_pid(owner: str | None) -> int | None:
    """A lease owner is a replica's name, `host:pid:token`."""
    return None if owner is None else int(owner.split(":")[1])


def writes(state_schema: str, after_id: int = 0) -> list[Write]:
    rows = query(
        f"SELECT id, kind, consumer, batch_id, chunk, from_snap, to_snap, app, label, lease_owner, lease_expires_ms, "
        f'old_owner, old_expires_ms, now_ms FROM "{state_schema}".{AUDIT} WHERE id > %s ORDER BY id',
        (after_id,),
    )
    return [Write(*row) for row in rows]


def last_id(state_schema: str) -> int:
    return int(query(f'SELECT COALESCE(MAX(id), 0) FROM "{state_schema}".{AUDIT}')[0][0])


def problems(log: list[Write], pids: Mapping[str, int], killed: set[int]) -> list[str]:
    """What the audit shows against one delivery per consumer at a time; empty when none.

    `pids`: each replica's name (its PGOPTIONS label) and pid; `killed`: pids the test SIGKILLed.
    - every progress write of the store is made by the process named in the lease it is fenced by,
      at that instant (the write holds the consumer's row locked);
    - every chunk a PostgreSQL mirror applied was claimed in its ledger by the replica holding the
      consumer's lease at that instant; and each chunk of a consumer once, ever;
    - no progress write is made under a lease already expired on the database clock, even one
      nobody took over (the store refuses it: state/fencing.py); a mirror chunk is checked against
      the replica's own deadline just before its COMMIT, so `late` lists the chunks that still
      committed past the expiry, for the record;
    - a lease passes from one owner straight to another only once it expired, or its holder's pid
      was killed (the same host: state/fencing.py, kernel/processes.py); otherwise it was released;
    - the batches a consumer began have distinct ids and ranges that never overlap; the finished
      ones form one chain from the first.
    """
    out: list[str] = []
    names = {pid: name for name, pid in pids.items()}
    sink_chunks: Counter[tuple[str, str]] = Counter()
    begun: dict[str, list[Write]] = defaultdict(list)
    finished: dict[str, list[Write]] = defaultdict(list)
    for w in log:
        if w.kind in PROGRESS:
            if w.writer_pid is None or w.writer_pid != owner_pid(w.lease_owner):
                out.append(f"{w.kind} of {w.consumer} by pid {w.writer_pid}, lease held by {w.lease_owner}: {w}")
            elif w.lease_expires_ms is None or w.lease_expires_ms <= w.now_ms:
                ago = w.now_ms - (w.lease_expires_ms or 0)
                out.append(f"{w.kind} of {w.consumer} under a lease expired {ago} ms ago: {w}")
            elif w.label != names.get(w.writer_pid):
                out.append(f"{w.kind} of {w.consumer}: session label {w.label!r} is not pid {w.writer_pid}'s: {w}")
            if w.kind == "begin":
                begun[w.consumer].append(w)
            if w.kind == "history":
                finished[w.consumer].append(w)
        elif w.kind == "sink":
            sink_chunks[(w.consumer, w.chunk or "")] += 1
            if w.label not in pids or pids[w.label] != owner_pid(w.lease_owner):
                out.append(f"mirror chunk of {w.consumer} applied by {w.label!r}, lease held by {w.lease_owner}: {w}")
        elif w.kind == "lease" and w.old_owner is not None and w.lease_owner is not None:
            if w.old_owner != w.lease_owner:
                expired = w.old_expires_ms is not None and w.old_expires_ms <= w.now_ms
                if not expired and owner_pid(w.old_owner) not in killed:
                    out.append(f"lease of {w.consumer} taken from live {w.old_owner} by {w.lease_owner}: {w}")
    out += [f"mirror chunk {c} of {consumer} applied {n} times" for (consumer, c), n in sink_chunks.items() if n > 1]
    for consumer in sorted(set(begun) | set(finished)):
        batches = begun.get(consumer, [])
        ids = Counter(b.batch_id for b in batches)
        out += [f"batch {b} of {consumer} begun {n} times" for b, n in ids.items() if n > 1]
        starts = Counter(b.from_snap for b in batches)
        out += [f"{consumer}: {n} batches begun after snapshot {f}" for f, n in starts.items() if n > 1]
        chain = finished.get(consumer, [])
        if chain and chain[0].from_snap is not None:
            out.append(f"{consumer}: the first finished batch starts after {chain[0].from_snap}")
        for before, after in zip(chain, chain[1:], strict=False):
            if after.from_snap != before.to_snap:
                out.append(f"{consumer}: batch {after.batch_id} starts after {after.from_snap}, not {before.to_snap}")
        spans = {b.batch_id: (b.from_snap, b.to_snap) for b in batches}
        out += [
            f"{consumer}: finished batch {h.batch_id} {(h.from_snap, h.to_snap)}, begun as {spans.get(h.batch_id)}"
            for h in chain
            if batches and spans.get(h.batch_id) != (h.from_snap, h.to_snap)
        ]
    return out


def late(log: list[Write]) -> list[Write]:
    """Progress writes and mirror chunks made under a lease already expired on the database clock
    (by its holder still: nobody had taken it over; `problems` names any other)."""
    return [
        w
        for w in log
        if (w.kind in PROGRESS or w.kind == "sink") and (w.lease_expires_ms is None or w.lease_expires_ms <= w.now_ms)
    ]


def owners_by_consumer(log: list[Write]) -> dict[str, list[int]]:
    """Per consumer, the pids that made its progress writes, in order, each run of one pid once."""
    runs: dict[str, list[int]] = defaultdict(list)
    for w in log:
        if w.kind in PROGRESS and w.writer_pid is not None:
            seen = runs[w.consumer]
            if not seen or seen[-1] != w.writer_pid:
                seen.append(w.writer_pid)
    return runs
