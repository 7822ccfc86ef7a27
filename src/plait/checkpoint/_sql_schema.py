"""The SQL text of the checkpoint store: the versioned migrations and every statement.

Kept apart from :mod:`plait.checkpoint._sql` (the logic that runs them) so that each module
does one job. Statements are written once for SQLite and PostgreSQL: ``{P}`` is the table
prefix, ``?`` the parameter marker (rewritten to ``%s`` for psycopg), and the other
``{...}`` fields are the few fragments a :class:`~plait.checkpoint._sql.Dialect` supplies.

Layout (``P`` is the table prefix, which includes the Postgres schema when one is set)::

    P_migrations  version, applied_at             the schema version this store is at
    P_checkpoints ns, thread_id, id -> parent_id, step, created_at, source, metadata, body
    P_blobs       ns, thread_id, channel, id -> base_id, data
    P_writes      seq, (ns, thread_id, checkpoint_id, task_id, kind, wkey) unique -> value
    P_leases      ns, thread_id -> owner, expires_at

A checkpoint row holds metadata and a small body (versions, ``channel -> blob id``, next
tasks, barriers). A blob is one channel's value as written by one checkpoint (its id is that
checkpoint's id): JSON in full when ``base_id`` is NULL, else a delta against the blob
``base_id`` of the same channel (see :mod:`plait.checkpoint.delta`). A checkpoint stores a
blob only for the channels it changed and points at its parent's blobs for the rest, so
branches inside a thread share blobs and storage grows with what was written. A blob of at
most ``INLINE_MAX`` bytes is kept in the body of the checkpoint that wrote it instead of a
row of ``P_blobs`` (schema 3): blob ``(channel, id)`` is the row, or entry ``channel`` of
the body of checkpoint ``id``.

A migration is never edited once released: a schema change is a new version whose
statements bring a store from the previous version to it, so :meth:`SqlCore.migrate` can
upgrade any older store in place and refuse a newer one.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "PG_MIGRATIONS", "SCHEMA_VERSION", "STATEMENTS", "joins"]

SCHEMA_VERSION = 6
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
}

_PG_LOCK_KEY = 0x706C6169
"""The first key of the per-thread advisory locks ("plai"); two-key locks live apart from
the one-key lock that ``setup()`` takes.

PostgreSQL's ``fence()`` and ``acquire_lease()`` lock one thread (``ns``, ``thread_id``)
until the transaction ends, so that a fence's reads and the commit it guards are one atomic
step with respect to leases taken and to other fenced commits of the thread (at READ
COMMITTED a plain SELECT would let a lease or a head change between the check and the
COMMIT). A hash collision between two threads only makes them wait for each other."""

_FENCE_2 = f"""CREATE OR REPLACE FUNCTION {{P}}fence(
            f_ns text, f_tid text, f_owner text, f_check_head boolean, f_expect text, f_own text) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $fence$
        DECLARE
            held_owner text;
            held_left double precision;
            found_head text;
        BEGIN
            PERFORM pg_advisory_xact_lock({_PG_LOCK_KEY}, hashtext(f_ns || '/' || f_tid));
            SELECT l.owner, l.expires_at - {{now}} INTO held_owner, held_left
                FROM {{P}}leases l WHERE l.ns = f_ns AND l.thread_id = f_tid;
            IF held_owner IS NOT NULL AND held_owner <> f_owner AND held_left > 0 THEN
                RAISE EXCEPTION USING ERRCODE = 'PLT01', MESSAGE = 'plait fence: the thread is leased by another owner',
                    DETAIL = json_build_object('thread_id', f_tid, 'owner', held_owner, 'expires_in', held_left)::text;
            END IF;
            IF f_check_head THEN
                SELECT c.id INTO found_head FROM {{P}}checkpoints c WHERE c.ns = f_ns AND c.thread_id = f_tid
                    ORDER BY c.id DESC LIMIT 1;
                IF found_head IS DISTINCT FROM f_expect AND found_head IS DISTINCT FROM f_own THEN
                    RAISE EXCEPTION USING ERRCODE = 'PLT02', MESSAGE = 'plait fence: the thread has another head',
                        DETAIL = json_build_object('thread_id', f_tid, 'expected', f_expect, 'found', found_head)::text;
                END IF;
            END IF;
            RETURN 1;
        END
        $fence$"""
"""Schema 2's ``fence()``: the lease check, and the head check when asked."""

_FENCE_6 = _FENCE_2.replace(
    "f_own text) RETURNS integer", "f_own text, f_parent text,\n            f_quiet boolean) RETURNS integer"
).replace(
    "                END IF;\n            END IF;\n            RETURN 1;",
    """                END IF;
                IF f_quiet AND found_head = f_expect AND found_head IS DISTINCT FROM f_own THEN
                    PERFORM 1 FROM {P}writes w
                        WHERE w.ns = f_ns AND w.thread_id = f_tid AND w.checkpoint_id = found_head LIMIT 1;
                    IF FOUND THEN
                        RAISE EXCEPTION USING ERRCODE = 'PLT02',
                            MESSAGE = 'plait fence: the expected head has pending writes',
                            DETAIL = json_build_object('thread_id', f_tid, 'expected', f_expect, 'found', found_head,
                                                       'pending_writes', true)::text;
                    END IF;
                END IF;
            END IF;
            IF f_parent IS NOT NULL THEN
                PERFORM 1 FROM {P}checkpoints c WHERE c.ns = f_ns AND c.thread_id = f_tid AND c.id = f_parent;
                IF NOT FOUND THEN
                    RAISE EXCEPTION USING ERRCODE = 'PLT03', MESSAGE = 'plait: the parent checkpoint is gone',
                        DETAIL = json_build_object('namespace', f_ns, 'thread_id', f_tid, 'parent', f_parent)::text;
                END IF;
            END IF;
            RETURN 1;""",
)
"""Schema 6's: schema 2's with, for a head-checked commit, the check that the expected head
has no pending writes (``f_quiet``), and the cached parent's check of ``require_parent()``."""

_PUT_CHECKPOINT_5 = f"""CREATE OR REPLACE FUNCTION {{P}}put_checkpoint(
            f_ns text, f_tid text, f_owner text, f_check_head boolean, f_expect text, f_own text, f_parent text,
            c_id text, c_parent text, c_step bigint, c_created double precision, c_source text,
            c_metadata bytea, c_body bytea, f_release boolean) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $put$
        DECLARE
            held_owner text;
            held_left double precision;
        BEGIN
            IF f_check_head THEN
                PERFORM {{P}}fence(f_ns, f_tid, f_owner, f_check_head, f_expect, f_own, f_parent);
            ELSE
                PERFORM pg_advisory_xact_lock({_PG_LOCK_KEY}, hashtext(f_ns || '/' || f_tid));
                SELECT l.owner, l.expires_at - {{now}} INTO held_owner, held_left
                    FROM {{P}}leases l WHERE l.ns = f_ns AND l.thread_id = f_tid;
                IF held_owner IS NOT NULL AND held_owner <> f_owner AND held_left > 0 THEN
                    RAISE EXCEPTION USING ERRCODE = 'PLT01',
                        MESSAGE = 'plait fence: the thread is leased by another owner',
                        DETAIL = json_build_object('thread_id', f_tid, 'owner', held_owner,
                                                   'expires_in', held_left)::text;
                END IF;
                IF f_parent IS NOT NULL THEN
                    PERFORM 1 FROM {{P}}checkpoints c WHERE c.ns = f_ns AND c.thread_id = f_tid AND c.id = f_parent;
                    IF NOT FOUND THEN
                        RAISE EXCEPTION USING ERRCODE = 'PLT03', MESSAGE = 'plait: the parent checkpoint is gone',
                            DETAIL = json_build_object('namespace', f_ns, 'thread_id', f_tid, 'parent', f_parent)::text;
                    END IF;
                END IF;
            END IF;
            INSERT INTO {{P}}checkpoints AS c (ns, thread_id, id, parent_id, step, created_at, source, metadata, body)
                VALUES (f_ns, f_tid, c_id, c_parent, c_step, c_created, c_source, c_metadata, c_body)
                ON CONFLICT (ns, thread_id, id) DO UPDATE SET parent_id = excluded.parent_id, step = excluded.step,
                created_at = excluded.created_at, source = excluded.source, metadata = excluded.metadata,
                body = excluded.body;
            IF f_release THEN  -- not give_lease(): that would make this commit skip its flush
                DELETE FROM {{P}}leases l WHERE l.ns = f_ns AND l.thread_id = f_tid AND l.owner = f_owner;
            END IF;
            RETURN 1;
        END
        $put$"""
"""Schema 5's ``put_checkpoint()``: the usual commit, its lease and parent checks inline."""

_PUT_CHECKPOINT_6 = _PUT_CHECKPOINT_5.replace(
    "f_parent text,\n            c_id text,", "f_parent text,\n            f_quiet boolean, c_id text,"
).replace("f_expect, f_own, f_parent);", "f_expect, f_own, f_parent, f_quiet);")
"""Schema 6's: the same with ``f_quiet`` (Fence.expect_no_writes) passed on to ``fence()``."""

PG_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # The fence of a commit as one statement that raises server-side, so a pipelined commit
    # sends it with its other statements and waits for no answer: a refusal aborts the
    # transaction and surfaces as the commit's error. SQLSTATE PLT01 (leased by another
    # owner) and PLT02 (another head) carry their facts as JSON in DETAIL. Each query in a
    # volatile function takes a fresh snapshot, so the reads after the lock see everything
    # committed before the lock was granted. A head equal to ``f_own`` (the commit's own
    # newest checkpoint) passes: the commit already landed and is being retried after a
    # lost connection (see HeadCondition).
    2: (_FENCE_2,),
    # One round trip per commit and per lease: checks that raise rather than answer, so a
    # transaction is statements only, sent at once with nothing to wait for before its end
    # (see postgres.py). require_parent: a commit whose deltas were computed against this
    # process's cached head checks that the parent still exists (another process may have
    # deleted the thread meanwhile), SQLSTATE PLT03. A seven-argument fence() is version 2's
    # fence plus that check (one statement for a fenced commit, the common case; NULL: none).
    # acquire_lease: the "lease" statement (insert, renew, or take over an expired lease)
    # that raises PLT01, as fence() does, when another owner holds the lease; a holder that
    # released meanwhile is retried.
    3: (
        """CREATE OR REPLACE FUNCTION {P}require_parent(f_ns text, f_tid text, f_parent text) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $require$
        BEGIN
            PERFORM 1 FROM {P}checkpoints c WHERE c.ns = f_ns AND c.thread_id = f_tid AND c.id = f_parent;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'PLT03', MESSAGE = 'plait: the parent checkpoint is gone',
                    DETAIL = json_build_object('namespace', f_ns, 'thread_id', f_tid, 'parent', f_parent)::text;
            END IF;
            RETURN 1;
        END
        $require$""",
        """CREATE OR REPLACE FUNCTION {P}fence(
            f_ns text, f_tid text, f_owner text, f_check_head boolean, f_expect text, f_own text, f_parent text)
            RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $fence$
        BEGIN
            PERFORM {P}fence(f_ns, f_tid, f_owner, f_check_head, f_expect, f_own);
            IF f_parent IS NOT NULL THEN
                PERFORM {P}require_parent(f_ns, f_tid, f_parent);
            END IF;
            RETURN 1;
        END
        $fence$""",
        f"""CREATE OR REPLACE FUNCTION {{P}}acquire_lease(
            f_ns text, f_tid text, f_owner text, f_ttl double precision) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $lease$
        DECLARE
            got text;
            held_owner text;
            held_left double precision;
        BEGIN
            PERFORM pg_advisory_xact_lock({_PG_LOCK_KEY}, hashtext(f_ns || '/' || f_tid));
            FOR attempt IN 1..3 LOOP
                INSERT INTO {{P}}leases AS l (ns, thread_id, owner, expires_at)
                    VALUES (f_ns, f_tid, f_owner, {{now}} + f_ttl)
                    ON CONFLICT (ns, thread_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
                    WHERE l.owner = excluded.owner OR l.expires_at <= {{now}}
                    RETURNING l.owner INTO got;
                IF got IS NOT NULL THEN
                    RETURN 1;
                END IF;
                SELECT l.owner, l.expires_at - {{now}} INTO held_owner, held_left
                    FROM {{P}}leases l WHERE l.ns = f_ns AND l.thread_id = f_tid;
                IF held_owner IS NOT NULL THEN
                    RAISE EXCEPTION USING ERRCODE = 'PLT01',
                        MESSAGE = 'plait lease: the thread is leased by another owner',
                        DETAIL = json_build_object('thread_id', f_tid, 'owner', held_owner,
                                                   'expires_in', greatest(held_left, 0))::text;
                END IF;
            END LOOP;
            RAISE EXCEPTION USING ERRCODE = 'PLT01', MESSAGE = 'plait lease: the thread is leased by another owner',
                DETAIL = json_build_object('thread_id', f_tid, 'owner', 'another run', 'expires_in', 0)::text;
        END
        $lease$""",
    ),
    # The usual commit (a run's step: its fence and its checkpoint row, nothing else; a
    # run's last step also gives its lease back) as one call: one statement, which psycopg
    # prepares after a few uses, where the two statements sent as one query were parsed and
    # planned at every step (~80 µs of server time here).
    4: (
        """CREATE OR REPLACE FUNCTION {P}put_checkpoint(
            f_ns text, f_tid text, f_owner text, f_check_head boolean, f_expect text, f_own text, f_parent text,
            c_id text, c_parent text, c_step bigint, c_created double precision, c_source text,
            c_metadata bytea, c_body bytea, f_release boolean) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $put$
        BEGIN
            PERFORM {P}fence(f_ns, f_tid, f_owner, f_check_head, f_expect, f_own, f_parent);
            INSERT INTO {P}checkpoints AS c (ns, thread_id, id, parent_id, step, created_at, source, metadata, body)
                VALUES (f_ns, f_tid, c_id, c_parent, c_step, c_created, c_source, c_metadata, c_body)
                ON CONFLICT (ns, thread_id, id) DO UPDATE SET parent_id = excluded.parent_id, step = excluded.step,
                created_at = excluded.created_at, source = excluded.source, metadata = excluded.metadata,
                body = excluded.body;
            IF f_release THEN  -- not give_lease(): that would make this commit skip its flush
                DELETE FROM {P}leases l WHERE l.ns = f_ns AND l.thread_id = f_tid AND l.owner = f_owner;
            END IF;
            RETURN 1;
        END
        $put$""",
        # A lease taken or given back in one statement, so that psycopg prepares it, without
        # waiting for its WAL flush (what SET LOCAL synchronous_commit = off did, sent as a
        # second statement): a lease lost in a crash is harmless (a lost acquire expires, a
        # lost release makes the next run wait for the expiry), and flushing would cost every
        # run two more disk syncs. The setting ends with the statement's transaction.
        """CREATE OR REPLACE FUNCTION {P}take_lease(f_ns text, f_tid text, f_owner text, f_ttl double precision)
            RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $take$
        BEGIN
            PERFORM set_config('synchronous_commit', 'off', true);
            RETURN {P}acquire_lease(f_ns, f_tid, f_owner, f_ttl);
        END
        $take$""",
        """CREATE OR REPLACE FUNCTION {P}give_lease(f_ns text, f_tid text, f_owner text) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $give$
        BEGIN
            PERFORM set_config('synchronous_commit', 'off', true);
            DELETE FROM {P}leases WHERE ns = f_ns AND thread_id = f_tid AND owner = f_owner;
            RETURN 1;
        END
        $give$""",
        # What a run does first, in one round trip: take the lease, then read the checkpoint
        # it starts from (the head, or f_id) with its pending writes, as head_writes and
        # one_writes do. The read is a statement of its own after the lease is taken, so its
        # snapshot sees every commit made before (the previous owner's last one included).
        """CREATE OR REPLACE FUNCTION {P}take_lease_and_get(
            f_ns text, f_tid text, f_owner text, f_ttl double precision, f_id text)
            RETURNS TABLE (id text, parent_id text, step bigint, created_at double precision, metadata bytea,
                           body bytea, task_id text, kind text, wkey text, value bytea)
        LANGUAGE plpgsql VOLATILE AS $start$
        #variable_conflict use_column
        BEGIN
            PERFORM {P}take_lease(f_ns, f_tid, f_owner, f_ttl);
            IF f_id IS NULL THEN
                RETURN QUERY SELECT c.id, c.parent_id, c.step, c.created_at, c.metadata, c.body,
                        w.task_id, w.kind, w.wkey, w.value
                    FROM (SELECT x.id, x.parent_id, x.step, x.created_at, x.metadata, x.body FROM {P}checkpoints x
                          WHERE x.ns = f_ns AND x.thread_id = f_tid ORDER BY x.id DESC LIMIT 1) c
                    LEFT JOIN {P}writes w ON w.ns = f_ns AND w.thread_id = f_tid AND w.checkpoint_id = c.id
                    ORDER BY w.seq;
            ELSE
                RETURN QUERY SELECT c.id, c.parent_id, c.step, c.created_at, c.metadata, c.body,
                        w.task_id, w.kind, w.wkey, w.value
                    FROM {P}checkpoints c
                    LEFT JOIN {P}writes w ON w.ns = c.ns AND w.thread_id = c.thread_id AND w.checkpoint_id = c.id
                    WHERE c.ns = f_ns AND c.thread_id = f_tid AND c.id = f_id
                    ORDER BY w.seq;
            END IF;
        END
        $start$""",
    ),
    # The usual commit again, with the checks of fence() and require_parent() written into
    # it instead of called: each nested call of a plpgsql function is a query of its own
    # (put_checkpoint() -> fence() -> the six-argument fence() and require_parent()), 20-25
    # µs of server time per commit here, 5-6 % of a commit. A commit that checks the head
    # (update_state) still calls fence(), which has that check.
    5: (_PUT_CHECKPOINT_5,),
    # A fence that can also require the expected head to have no pending writes (f_quiet:
    # Fence.expect_no_writes, for a commit built on a head this process remembers), written
    # out in full rather than calling the older fence() and require_parent() (each nested
    # call is a query of its own); put_checkpoint() takes that argument too and calls it for
    # a head-checked commit. PLT02 then carries "pending_writes" in its DETAIL.
    6: (
        _FENCE_6,
        _PUT_CHECKPOINT_6,
    ),
}
"""Migrations only PostgreSQL runs, appended to the shared ones of the same version."""

STATEMENTS: dict[str, str] = {
    "version": "SELECT max(version) FROM {P}migrations",
    "mig_table": "CREATE TABLE IF NOT EXISTS {P}migrations (version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)",
    "mig_done": "INSERT INTO {P}migrations (version, applied_at) VALUES (?, ?)",
    "ins_cp": """INSERT INTO {P}checkpoints
        (ns, thread_id, id, parent_id, step, created_at, source, metadata, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (ns, thread_id, id) DO UPDATE SET parent_id = excluded.parent_id, step = excluded.step,
        created_at = excluded.created_at, source = excluded.source, metadata = excluded.metadata,
        body = excluded.body""",
    # Whether a checkpoint exists: on a cache hit a commit writes deltas against the parent's
    # blobs without reading them, and this check, in the commit's transaction, catches a
    # parent that another process deleted since, so that those deltas are never committed.
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
    "head_writes": """SELECT c.id, c.parent_id, c.step, c.created_at, c.metadata, c.body,
            w.task_id, w.kind, w.wkey, w.value
        FROM (SELECT id, parent_id, step, created_at, metadata, body FROM {P}checkpoints
              WHERE ns = ? AND thread_id = ? ORDER BY id DESC LIMIT 1) c
        LEFT JOIN {P}writes w ON w.ns = ? AND w.thread_id = ? AND w.checkpoint_id = c.id
        ORDER BY w.seq""",
    "one_writes": """SELECT c.id, c.parent_id, c.step, c.created_at, c.metadata, c.body,
            w.task_id, w.kind, w.wkey, w.value
        FROM {P}checkpoints c
        LEFT JOIN {P}writes w ON w.ns = c.ns AND w.thread_id = c.thread_id AND w.checkpoint_id = c.id
        WHERE c.ns = ? AND c.thread_id = ? AND c.id = ?
        ORDER BY w.seq""",
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
    "threads": """SELECT c.ns, c.thread_id, c.id, c.step, c.created_at, c.source, g.n
        FROM (SELECT ns, thread_id, max(id) AS head, count(*) AS n FROM {P}checkpoints {where}
              GROUP BY ns, thread_id) g
        JOIN {P}checkpoints c ON c.ns = g.ns AND c.thread_id = g.thread_id AND c.id = g.head
        ORDER BY c.id DESC""",
    "del_cps": "DELETE FROM {P}checkpoints WHERE ns = ? AND thread_id = ?",
    "del_blobs": "DELETE FROM {P}blobs WHERE ns = ? AND thread_id = ?",
    "del_writes": "DELETE FROM {P}writes WHERE ns = ? AND thread_id = ?",
    "tree": "SELECT id, parent_id, body FROM {P}checkpoints WHERE ns = ? AND thread_id = ?",
    "blob_keys": "SELECT channel, id, base_id FROM {P}blobs WHERE ns = ? AND thread_id = ?",
    "del_cp": "DELETE FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id = ?",
    "del_blob": "DELETE FROM {P}blobs WHERE ns = ? AND thread_id = ? AND channel = ? AND id = ?",
    "reroot": "UPDATE {P}checkpoints SET parent_id = NULL WHERE ns = ? AND thread_id = ? AND id = ?",
    # A lease is taken in one statement: insert, or take over when the holder is the same
    # owner or its lease has expired. No row back means another owner holds it.
    "lease": """INSERT INTO {P}leases AS l (ns, thread_id, owner, expires_at) VALUES (?, ?, ?, {now} + ?)
        ON CONFLICT (ns, thread_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
        WHERE l.owner = excluded.owner OR l.expires_at <= {now}
        RETURNING owner""",
    "lease_holder": "SELECT owner, expires_at - {now} FROM {P}leases WHERE ns = ? AND thread_id = ?",
    # Fences (see Fence): the head a fence compares with, and PostgreSQL's one-statement check.
    # ORDER BY ... LIMIT 1, not max(): PostgreSQL plans max() over a table without statistics
    # as a scan of the whole thread; this is one index lookup everywhere.
    "head_id": "SELECT id FROM {P}checkpoints WHERE ns = ? AND thread_id = ? ORDER BY id DESC LIMIT 1",
    "has_writes": "SELECT 1 FROM {P}writes WHERE ns = ? AND thread_id = ? AND checkpoint_id = ? LIMIT 1",
    "fence": "SELECT {P}fence(?::text, ?::text, ?::text, ?::boolean, ?::text, ?::text, ?::text, ?::boolean)",
    "require_parent": "SELECT {P}require_parent(?::text, ?::text, ?::text)",
    "take_lease": "SELECT {P}take_lease(?::text, ?::text, ?::text, ?::float8)",
    "give_lease": "SELECT {P}give_lease(?::text, ?::text, ?::text)",
    "take_lease_and_get": "SELECT * FROM {P}take_lease_and_get(?::text, ?::text, ?::text, ?::float8, ?::text)",
    "put_checkpoint": """SELECT {P}put_checkpoint(?::text, ?::text, ?::text, ?::boolean, ?::text, ?::text, ?::text,
        ?::boolean, ?::text, ?::text, ?::bigint, ?::float8, ?::text, ?::bytea, ?::bytea, ?::boolean)""",
    "release": "DELETE FROM {P}leases WHERE ns = ? AND thread_id = ? AND owner = ?",
}


def joins(*, lateral: bool) -> dict[str, str]:
    """The joins of the recursive reads (``{parent_join}``, ``{base_join}``, ``{data_join}``).

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
    out = {}
    for name, (kind, table, alias, columns, cond) in specs.items():
        if lateral:
            # LIMIT 1 (a primary-key lookup finds one row anyway) keeps the planner from
            # flattening the subquery back into the plain join it would misplan.
            sub = f"SELECT {columns} FROM {table} x WHERE x.{cond.format(a='x')} LIMIT 1"
            out[name] = f"{kind}JOIN LATERAL ({sub}) {alias} ON true"
        else:
            out[name] = f"{kind}JOIN {table} {alias} ON {alias}.{cond.format(a=alias)}"
    return out
