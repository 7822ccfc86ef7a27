"""The SQL text of the checkpoint store: the versioned migrations and every statement.

Kept apart from :mod:`plait.checkpoint.sql._core` (the logic that runs them) so that each module
does one job. Statements are written once for SQLite and PostgreSQL: ``{P}`` is the table
prefix (``{I}`` the same without the schema, for index names, which a schema qualifies by
themselves), ``?`` the parameter marker (rewritten to ``%s`` for psycopg), and the other
``{...}`` fields are the few fragments a :class:`~plait.checkpoint.sql._core.Dialect` supplies.

Layout (``P`` is the table prefix, which includes the Postgres schema when one is set)::

    P_migrations  version, applied_at             the schema version this store is at
    P_checkpoints ns, thread_id, id -> parent_id, step, created_at, source, metadata, body
    P_blobs       ns, thread_id, channel, id -> base_id, data
    P_writes      seq, (ns, thread_id, checkpoint_id, task_id, kind, wkey) unique -> value
    P_threads     ns, thread_id -> gen, owner, holder, taken_at, expires_at, held, status, updated_at
                  (indexed newest first; those at rest in a status other than idle, by status: schema 11)

A thread's row (schema 7; it replaced ``P_leases``) holds its lease, fenced by generation
(``gen``; ``held`` is 0 once the lease is given back or revoked, and the row stays, so that
generations never restart), and how the thread stands when no run holds it (``status``),
with the time it last came to rest or was taken (``updated_at``, the order of listings).
See :mod:`plait.checkpoint.lease` for the rules.

A checkpoint row holds metadata and a small body (versions, ``channel -> blob id``, next
tasks, barriers). A blob is one channel's value as written by one checkpoint (its id is that
checkpoint's id): JSON in full when ``base_id`` is NULL, else a delta against the blob
``base_id`` of the same channel (see :mod:`plait.checkpoint.delta`). A checkpoint stores a
blob only for the channels it changed and points at its parent's blobs for the rest, so
branches inside a thread share blobs and storage grows with what was written. A blob of at
most ``INLINE_MAX`` bytes is kept in the body of the checkpoint that wrote it instead of a
row of ``P_blobs`` (schema 3): blob ``(channel, id)`` is the row, or entry ``channel`` of
the body of checkpoint ``id``. A body whose blobs are all its checkpoint's own leaves the map
out (schema 12).

A migration is never edited once released: a schema change is a new version whose
statements bring a store from the previous version to it, so ``SqlCore.component.migrate`` can
upgrade any older store in place and refuse a newer one.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "STATEMENTS", "joins"]

SCHEMA_VERSION = 13
"""The schema version this code reads and writes."""

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE {P}checkpoints (
            ns TEXT NOT NULL, thread_id TEXT NOT NULL, id TEXT NOT NULL, parent_id TEXT,
            step BIGINT NOT NULL, created_at {real} NOT NULL, source TEXT NOT NULL,
            metadata {blob} NOT NULL, body {blob} NOT NULL,
            PRIMARY KEY (ns, thread_id, id)){small_table}""",
        """CREATE TABLE {P}blobs (
            ns TEXT NOT NULL, thread_id TEXT NOT NULL, channel TEXT NOT NULL, id TEXT NOT NULL,
            base_id TEXT, data {blob} NOT NULL,
            PRIMARY KEY (ns, thread_id, channel, id))""",
        """CREATE TABLE {P}writes (
            seq {serial_pk}, ns TEXT NOT NULL, thread_id TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL, kind TEXT NOT NULL, wkey TEXT NOT NULL, value {blob} NOT NULL,
            UNIQUE (ns, thread_id, checkpoint_id, task_id, kind, wkey))""",
        """CREATE TABLE {P}leases (
            ns TEXT NOT NULL, thread_id TEXT NOT NULL, owner TEXT NOT NULL, expires_at {real} NOT NULL,
            PRIMARY KEY (ns, thread_id)){small_table}""",
    ),
    # 2: fenced commits. Nothing shared changes: PostgreSQL adds a function (PG_MIGRATIONS),
    # SQLite checks fences with plain SELECTs and only records the version.
    2: (),
    # 3: small blobs in checkpoint bodies (an older plait would not find them), and one
    # round trip per PostgreSQL commit: functions that check server-side (PG_MIGRATIONS).
    3: (),
    # 4: PostgreSQL only: a fenced commit of one checkpoint row, a lease, and a lease with a
    # run's first read, each as one call that psycopg prepares (PG_MIGRATIONS).
    4: (),
    # 5: PostgreSQL only: put_checkpoint() checks the lease and the parent itself (PG_MIGRATIONS).
    5: (),
    # 6: fences that also require the expected head to have no pending writes
    # (Fence.expect_no_writes): PostgreSQL's fence() and put_checkpoint() take one more
    # argument (PG_MIGRATIONS); SQLite checks with a SELECT and only records the version.
    6: (),
    # 7: leases fenced by generation, holders recorded, and a thread's status at rest: one
    # row per thread replaces the leases table. Existing threads get a row (their status is
    # filled in by the migration's step after version 7, which reads their heads); a lease
    # held by an older plait becomes generation 1. PostgreSQL's functions are replaced (PG_MIGRATIONS).
    7: (
        """CREATE TABLE {P}threads (
            ns TEXT NOT NULL, thread_id TEXT NOT NULL, gen BIGINT NOT NULL, owner TEXT, holder TEXT,
            taken_at {real} NOT NULL, expires_at {real} NOT NULL, held INTEGER NOT NULL, status TEXT NOT NULL,
            updated_at {real} NOT NULL,
            PRIMARY KEY (ns, thread_id)){small_table}""",
        # One index, for listings newest first (a status filter reads it in that order too):
        # each is rewritten whenever a thread comes to rest, a second one would double that.
        "CREATE INDEX {I}threads_recent ON {P}threads (updated_at, ns, thread_id)",
        """INSERT INTO {P}threads (ns, thread_id, gen, owner, holder, taken_at, expires_at, held, status, updated_at)
            SELECT ns, thread_id, 0, NULL, NULL, 0, 0, 0, 'idle', max(created_at) FROM {P}checkpoints
            GROUP BY ns, thread_id""",
        """INSERT INTO {P}threads AS t (ns, thread_id, gen, owner, holder, taken_at, expires_at, held, status,
                updated_at)
            SELECT ns, thread_id, 1, owner, NULL, 0, expires_at, 1, 'stale', expires_at FROM {P}leases WHERE true
            ON CONFLICT (ns, thread_id) DO UPDATE SET gen = 1, owner = excluded.owner,
                expires_at = excluded.expires_at, held = 1""",
        "DROP TABLE {P}leases",
    ),
    # PostgreSQL's take_lease is flushed from version 8 on (see postgres._functions.TAKE_8); SQLite
    # only records the version (its lease writes never outlive a crash of the machine: every
    # run on it dies with it).
    8: (),
    9: (),  # PostgreSQL's functions again, bound to their schema (see postgres._schema)
    # 10: the memory store (plait.Store) beside the checkpoints: its tables differ by engine
    # (JSON text or jsonb, float32 blobs or float8[]), so each dialect brings them (see
    # sql._memory_sql).
    10: (),
    # 11: a partial index of the threads at rest in a status other than idle (waiting on an
    # interrupt, failed, ready to go on): a listing filtered by such a status reads its page
    # from it, newest first, instead of walking every thread's row. Idle threads (most of a
    # store) and threads a run holds are not in it, so a run pays for it only when it leaves
    # its thread waiting, failed or ready. A status filter names the index's condition word
    # for word (see sql._threads), which is how SQLite knows the index applies.
    11: (
        "CREATE INDEX {I}threads_waiting ON {P}threads (status, updated_at, ns, thread_id) "
        "WHERE held = 0 AND status <> 'idle'",
    ),
    # 12: a body leaves out its blob map when each channel's blob is the checkpoint's own,
    # and names a planned task whose id the engine derives from the checkpoint by its node
    # alone (see _records.encode_body): an older plait would take such a body for a damaged
    # one. Rows stored before read as they did.
    12: (),
    # 13: PostgreSQL only: fence() and put_checkpoint() check the past checkpoint a commit
    # builds on (Fence.expect_parent_no_writes) themselves (PG_MIGRATIONS); SQLite checks it
    # with SELECTs and only records the version.
    13: (),
}

_THREADS = """SELECT {clock}, t.ns, t.thread_id, t.gen, t.owner, t.holder, t.taken_at, t.expires_at, t.held,
            t.status, t.updated_at, h.id, h.step, h.created_at, h.source,
            {count}
        FROM {P}threads t {head_join}
        {where}
        ORDER BY t.updated_at DESC, t.ns DESC, t.thread_id DESC
        LIMIT ?"""
_COUNT = "(SELECT count(*) FROM {P}checkpoints n WHERE n.ns = t.ns AND n.thread_id = t.thread_id)"


# One checkpoint (the head, or by id) with its pending writes, a row per write (or one row of
# NULLs for none); ``{thread}`` and ``{thread_join}`` add the thread's row (the ``_status``
# statements below) or nothing.
_HEAD_WRITES = """SELECT c.id, c.parent_id, c.step, c.created_at, c.metadata, c.body,
            w.task_id, w.kind, w.wkey, w.value{thread}
        FROM (SELECT id, parent_id, step, created_at, metadata, body FROM {P}checkpoints
              WHERE ns = ? AND thread_id = ? ORDER BY id DESC LIMIT 1) c
        LEFT JOIN {P}writes w ON w.ns = ? AND w.thread_id = ? AND w.checkpoint_id = c.id
        {thread_join}
        ORDER BY w.seq"""
_ONE_WRITES = """SELECT c.id, c.parent_id, c.step, c.created_at, c.metadata, c.body,
            w.task_id, w.kind, w.wkey, w.value{thread}
        FROM {P}checkpoints c
        LEFT JOIN {P}writes w ON w.ns = c.ns AND w.thread_id = c.thread_id AND w.checkpoint_id = c.id
        {thread_join}
        WHERE c.ns = ? AND c.thread_id = ? AND c.id = ?
        ORDER BY w.seq"""
CHECKPOINT_WRITE_COLUMNS = 10
"""How many columns of a ``head_writes``/``one_writes`` row are the checkpoint's and its
write's: the ``_status`` statements' thread columns come after them."""
_THREAD_COLUMNS = ", {clock}, t.gen, t.owner, t.holder, t.taken_at, t.expires_at, t.held, t.status, t.updated_at"


STATEMENTS: dict[str, str] = {
    "ins_cp": """INSERT INTO {P}checkpoints
        (ns, thread_id, id, parent_id, step, created_at, source, metadata, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (ns, thread_id, id) DO UPDATE SET parent_id = excluded.parent_id, step = excluded.step,
        created_at = excluded.created_at, source = excluded.source, metadata = excluded.metadata,
        body = excluded.body""",
    # Whether a checkpoint exists: on a cache hit a commit writes deltas against the parent's
    # blobs without reading them, and this check, in the commit's transaction, catches a
    # parent that another process deleted since, so that those deltas are never committed
    # (skipped by a run's commit under a lease it found current: see sql._commit._trusts_cache).
    # (A RETURNING subquery on the insert did the same in one statement, at 2.5 times the
    # cost of both statements together in SQLite 3.40.)
    "has_cp": "SELECT 1 FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id = ?",
    "ins_blob": """INSERT INTO {P}blobs (ns, thread_id, channel, id, base_id, data) VALUES (?, ?, ?, ?, ?, ?)
        ON CONFLICT (ns, thread_id, channel, id) DO UPDATE SET base_id = excluded.base_id, data = excluded.data""",
    "ins_write": """INSERT INTO {P}writes (ns, thread_id, checkpoint_id, task_id, kind, wkey, value)
        VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (ns, thread_id, checkpoint_id, task_id, kind, wkey) DO UPDATE SET value = excluded.value""",
    "del_writes_of": "DELETE FROM {P}writes WHERE ns = ? AND thread_id = ? AND checkpoint_id = ?",
    "body_of": "SELECT body FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id = ?",
    # One checkpoint (the head, or by id) with its pending writes, a row per write (or one row
    # of NULLs for none): one statement, one snapshot, one round trip.
    "head_writes": _HEAD_WRITES.replace("{thread}", "").replace("{thread_join}", ""),
    "one_writes": _ONE_WRITES.replace("{thread}", "").replace("{thread_join}", ""),
    # The same two with the thread's row and the lease clock (as ``thread_status`` reads them)
    # on every row: what get_state shows, in the same round trip (on PostgreSQL, one of three
    # that a read of a thread's state took).
    "head_writes_status": _HEAD_WRITES.replace("{thread}", _THREAD_COLUMNS).replace(
        "{thread_join}", "LEFT JOIN {P}threads t ON t.ns = ? AND t.thread_id = ?"
    ),
    "one_writes_status": _ONE_WRITES.replace("{thread}", _THREAD_COLUMNS).replace(
        "{thread_join}", "LEFT JOIN {P}threads t ON t.ns = c.ns AND t.thread_id = c.thread_id"
    ),
    # The lineage walk: one recursive query. ``depth`` bounds it by the limit, and by the
    # thread's size so that foreign data with a parent cycle cannot make it run forever.
    "lineage": """WITH RECURSIVE lin (id, parent_id, step, created_at, metadata, body, depth) AS (
            SELECT id, parent_id, step, created_at, metadata, body, 0 FROM {P}checkpoints
            WHERE ns = ? AND thread_id = ? AND id = {start}
          UNION ALL
            SELECT c.id, c.parent_id, c.step, c.created_at, c.metadata, c.body, lin.depth + 1
            FROM lin {parent_join}
            WHERE lin.depth + 1 < ?
              AND lin.depth < (SELECT count(*) FROM {P}checkpoints WHERE ns = ? AND thread_id = ?)
        )
        SELECT id, parent_id, step, created_at, metadata, body,
          (SELECT count(*) FROM {P}checkpoints WHERE ns = ? AND thread_id = ?)
        FROM lin ORDER BY depth""",
    # The blob chains of a set of (channel, blob id) keys, bases included: one recursive
    # query on keys only (UNION shares the chains of several checkpoints), then the data.
    "blobs": """WITH RECURSIVE need (channel, id) AS (
            {keys}
          UNION
            SELECT b.channel, b.base_id FROM need {base_join}
            WHERE b.base_id IS NOT NULL
        )
        SELECT need.channel, need.id, b.base_id, b.data FROM need {data_join}""",
    # The bodies of the checkpoints a set of (channel, blob id) keys names, and of their
    # ancestors up to a depth: blobs small enough to be kept in the body of the checkpoint
    # that wrote them (see INLINE_MAX) are based on blobs of its ancestors (the parent, for
    # the appends between two anchors of a list chain), so one query finds a whole run.
    "bodies_up": """WITH RECURSIVE k (channel, id) AS ({keys}),
        lin (id, parent_id, body, depth) AS (
            SELECT c.id, c.parent_id, c.body, 0 FROM {P}checkpoints c
            WHERE c.ns = ? AND c.thread_id = ? AND c.id IN (SELECT k.id FROM k)
          UNION ALL
            SELECT c.id, c.parent_id, c.body, lin.depth + 1 FROM lin {parent_join}
            WHERE lin.depth + 1 < ?
        )
        SELECT id, body FROM lin""",
    # The blobs of one channel in an id range: one index range scan. history() uses it when
    # its lineage is most of the thread, so that few of the rows it reads are not needed.
    "blob_range": """SELECT channel, id, base_id, data FROM {P}blobs
        WHERE ns = ? AND thread_id = ? AND channel = ? AND id >= ? AND id <= ?""",
    "del_cps": "DELETE FROM {P}checkpoints WHERE ns = ? AND thread_id = ?",
    "del_blobs": "DELETE FROM {P}blobs WHERE ns = ? AND thread_id = ?",
    "del_writes": "DELETE FROM {P}writes WHERE ns = ? AND thread_id = ?",
    "tree": "SELECT id, parent_id, body FROM {P}checkpoints WHERE ns = ? AND thread_id = ?",
    "blob_keys": "SELECT channel, id, base_id FROM {P}blobs WHERE ns = ? AND thread_id = ?",
    "del_cp": "DELETE FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id = ?",
    "del_blob": "DELETE FROM {P}blobs WHERE ns = ? AND thread_id = ? AND channel = ? AND id = ?",
    "reroot": "UPDATE {P}checkpoints SET parent_id = NULL WHERE ns = ? AND thread_id = ? AND id = ?",
    # A thread's row (see plait.checkpoint.lease): read and written whole by the backends that
    # apply the lease rules in Python (SQLite, inside its write transaction).
    "thread_row": """SELECT gen, owner, holder, taken_at, expires_at, held, status, updated_at FROM {P}threads
        WHERE ns = ? AND thread_id = ?""",
    # How a thread stands, for a read of its state (get_state): its row and the lease clock,
    # one primary-key lookup (a listing's entry also counts the checkpoints and joins the head).
    "thread_status": """SELECT {clock}, gen, owner, holder, taken_at, expires_at, held, status, updated_at
        FROM {P}threads WHERE ns = ? AND thread_id = ?""",
    # A run's fenced commit needs only its lease's generation and whether it is still held.
    "fence_gen": "SELECT gen, held FROM {P}threads WHERE ns = ? AND thread_id = ?",
    "put_row": """INSERT INTO {P}threads (ns, thread_id, gen, owner, holder, taken_at, expires_at, held, status,
            updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (ns, thread_id) DO UPDATE SET gen = excluded.gen, owner = excluded.owner,
        holder = excluded.holder, taken_at = excluded.taken_at, expires_at = excluded.expires_at,
        held = excluded.held, status = excluded.status, updated_at = excluded.updated_at""",
    # A run's lease given back with its last commit, leaving the thread as the run left it.
    "release": """UPDATE {P}threads SET held = 0, status = coalesce(?, status), updated_at = {clock}
        WHERE ns = ? AND thread_id = ? AND gen = ? AND held = 1""",
    # How a one-off write (update, fork, a commit without a run) leaves its thread.
    "settle": """INSERT INTO {P}threads (ns, thread_id, gen, owner, holder, taken_at, expires_at, held, status,
            updated_at) VALUES (?, ?, 0, NULL, NULL, 0, 0, 0, ?, {clock})
        ON CONFLICT (ns, thread_id) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at""",
    # A subgraph's namespace gets a row of its own too (its commits are fenced by its parent's
    # lease, so no lease of its own writes one), so that listings and sweeps see it; a row a
    # lease holds is left alone. (Alias and WHERE keep it apart from "settle", which a dialect
    # module may fuse with a commit's other statements.)
    "child_row": """INSERT INTO {P}threads AS t (ns, thread_id, gen, owner, holder, taken_at, expires_at, held,
            status, updated_at) VALUES (?, ?, 0, NULL, NULL, 0, 0, 0, ?, {clock})
        ON CONFLICT (ns, thread_id) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at
        WHERE t.held = 0""",
    # A deleted thread keeps its row, its lease revoked: generations never restart, so a run
    # that held the thread cannot write into a new thread of the same id.
    "tombstone": """UPDATE {P}threads SET gen = gen + 1, owner = ?, holder = NULL, held = 0, status = 'idle',
        updated_at = {clock} WHERE ns = ? AND thread_id = ?""",
    # A prune back to a checkpoint revokes the lease the same way, leaving the status of the
    # checkpoint that is the head again.
    "revoke": """UPDATE {P}threads SET gen = gen + 1, owner = ?, holder = NULL, held = 0, status = ?,
        updated_at = {clock} WHERE ns = ? AND thread_id = ?""",
    # Listings: the thread rows newest first (an index scan), each with its head and its count.
    "threads": _THREADS.replace("{count}", _COUNT),
    # The same without the count, for a sweep that needs none (0 in its place): on a store
    # whose tables no vacuum has yet marked all-visible, PostgreSQL counts by visiting every
    # checkpoint's heap page, 0.5 s of a listing of 10,000 threads x 50 steps
    # (docs/benchmarks.md, "Sweeping").
    "threads_uncounted": _THREADS.replace("{count}", "0"),
    # Space per stored (namespace, thread): checkpoints, and the bytes of their rows' payload
    # (metadata and body, blobs, pending writes), for ``plait db stats`` (plait.checkpoint.space).
    # One scan of each table, grouped; CASTs because PostgreSQL sums bigints into numerics.
    "sizes": """SELECT ns, thread_id, CAST(sum(n) AS BIGINT), CAST(sum(b) AS BIGINT) FROM (
            SELECT ns, thread_id, count(*) AS n, sum(length(metadata) + length(body)) AS b
            FROM {P}checkpoints GROUP BY ns, thread_id
          UNION ALL
            SELECT ns, thread_id, 0, sum(length(data)) FROM {P}blobs GROUP BY ns, thread_id
          UNION ALL
            SELECT ns, thread_id, 0, sum(length(value)) FROM {P}writes GROUP BY ns, thread_id
        ) s GROUP BY ns, thread_id""",
    # Fences (see Fence): the head a fence compares with, and PostgreSQL's one-statement check.
    # ORDER BY ... LIMIT 1, not max(): PostgreSQL plans max() over a table without statistics
    # as a scan of the whole thread; this is one index lookup everywhere.
    "head_id": "SELECT id FROM {P}checkpoints WHERE ns = ? AND thread_id = ? ORDER BY id DESC LIMIT 1",
    "has_writes": "SELECT 1 FROM {P}writes WHERE ns = ? AND thread_id = ? AND checkpoint_id = ? LIMIT 1",
    # PostgreSQL's functions (see plait.checkpoint.postgres._functions).
    "fence": """SELECT {P}fence(?::text, ?::text, ?::text, ?::bigint, ?::boolean, ?::text, ?::text, ?::text,
        ?::boolean, ?::float8, ?::text)""",
    "require_parent": "SELECT {P}require_parent(?::text, ?::text, ?::text)",
    "take_lease": """SELECT gen, taken_at, expires_at
        FROM {P}take_lease(?::text, ?::text, ?::text, ?::float8, ?::text, ?::bigint, ?::float8)""",
    "renew_lease": "SELECT {P}renew_lease(?::text, ?::text, ?::bigint, ?::float8, ?::float8)",
    "give_lease": "SELECT {P}give_lease(?::text, ?::text, ?::bigint, ?::text, ?::float8)",
    "take_lease_and_get": """SELECT * FROM {P}take_lease_and_get(?::text, ?::text, ?::text, ?::float8, ?::text,
        ?::bigint, ?::float8, ?::text)""",
    "put_checkpoint": """SELECT {P}put_checkpoint(?::text, ?::text, ?::text, ?::bigint, ?::boolean, ?::text, ?::text,
        ?::text, ?::boolean, ?::float8, ?::text, ?::text, ?::text, ?::bigint, ?::float8, ?::text, ?::bytea,
        ?::bytea, ?::boolean, ?::boolean, ?::text)""",
}


def joins(*, lateral: bool) -> dict[str, str]:
    """The joins of the recursive reads (``{parent_join}``, ``{base_join}``, ``{data_join}``),
    and of a listing's thread rows to their heads (``{head_join}``).

    Each looks up one row by its full primary key. With ``lateral`` (PostgreSQL) the lookup
    is a LATERAL subquery, which can only run as an index lookup per row: as a plain join,
    a table without statistics yet (a new store) was planned as a scan of the thread's rows
    per step (O(n²)), which made a 500-step history take 40 ms in the database instead of 4.
    SQLite has no LATERAL and already plans these joins as index lookups.
    """
    blob = "ns = ? AND {a}.thread_id = ? AND {a}.channel = need.channel AND {a}.id = need.id"
    specs = {  # name: (join kind, table, alias, the columns used, the lookup)
        "parent_join": ("", "{P}checkpoints", "c", "*", "ns = ? AND {a}.thread_id = ? AND {a}.id = lin.parent_id"),
        "base_join": ("", "{P}blobs", "b", "x.channel, x.base_id", blob),
        "data_join": ("LEFT ", "{P}blobs", "b", "x.base_id, x.data", blob),
    }
    out = {
        "head_join": (
            "JOIN LATERAL (SELECT x.id, x.step, x.created_at, x.source, x.metadata FROM {P}checkpoints x "
            "WHERE x.ns = t.ns AND x.thread_id = t.thread_id ORDER BY x.id DESC LIMIT 1) h ON true"
            if lateral
            else "JOIN {P}checkpoints h ON h.ns = t.ns AND h.thread_id = t.thread_id AND h.id = "
            "(SELECT max(x.id) FROM {P}checkpoints x WHERE x.ns = t.ns AND x.thread_id = t.thread_id)"
        )
    }
    for name, (kind, table, alias, columns, cond) in specs.items():
        if lateral:
            # LIMIT 1 (a primary-key lookup finds one row anyway) keeps the planner from
            # flattening the subquery back into the plain join it would misplan.
            sub = f"SELECT {columns} FROM {table} x WHERE x.{cond.format(a='x')} LIMIT 1"
            out[name] = f"{kind}JOIN LATERAL ({sub}) {alias} ON true"
        else:
            out[name] = f"{kind}JOIN {table} {alias} ON {alias}.{cond.format(a=alias)}"
    return out
