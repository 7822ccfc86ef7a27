"""The migrations only PostgreSQL runs: which version creates which of its functions, which
check fences and leases server-side so that a commit or a lease is one statement and one
round trip, and the sweep's statements.

Kept apart from :mod:`plait.checkpoint.sql._schema` (the tables and the statements both
engines run), and from :mod:`plait.checkpoint.postgres._functions` (the text of the functions
the store runs now, version 7's and later). A migration is never edited once released:
versions 2 to 6 are kept here as they shipped, so an older store upgrades through them in
order, and version 7 replaces their functions with the ones fenced by lease generation (the
older ones are dropped).

The rules the functions apply are :mod:`plait.checkpoint.lease`'s, which the other backends
apply in Python; SQLSTATEs PLT01 (leased by another owner), PLT02 (another head), PLT03 (a
cached parent is gone) and PLT04 (the lease was lost) carry their facts as JSON in DETAIL.
"""

from __future__ import annotations

from plait.checkpoint.postgres._functions import (
    FENCE_7,
    FENCE_13,
    GIVE_7,
    HEAD_CHECK,
    INSERT_CHECKPOINT,
    LEASE_LOST_7,
    PARENT_CHECK,
    PG_LOCK_KEY,
    PUT_CHECKPOINT_7,
    PUT_CHECKPOINT_13,
    QUIET_HEAD_CHECK,
    RENEW_7,
    REQUIRE_PARENT_3,
    TAKE_7,
    TAKE_8,
    TAKE_AND_GET_7,
)
from plait.checkpoint.sql._base import BatchSql
from plait.checkpoint.sql._memory_sql import PG_MEMORY_TABLES

__all__ = ["PG_MIGRATIONS", "SWEEP_BATCH", "SWEEP_LOCK", "SWEEP_UNLOCK"]

SWEEP_BATCH = BatchSql(
    rows=lambda n: "SELECT " + ", ".join(f"e->>{i}" for i in range(n)) + " FROM json_array_elements(?::json) e",
    hex_bytes="decode(?, 'hex')",
    delete_by_what_stays=True,
    listing_setup="SET LOCAL jit = off",
    lanes=2,
)
"""How a sweep names a batch's rows on PostgreSQL (see :class:`~plait.checkpoint.sql._base.BatchSql`)."""

_FENCE_2 = f"""CREATE OR REPLACE FUNCTION {{P}}fence(
            f_ns text, f_tid text, f_owner text, f_check_head boolean, f_expect text, f_own text) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $fence$
        DECLARE
            held_owner text;
            held_left double precision;
            found_head text;
        BEGIN
            PERFORM pg_advisory_xact_lock({PG_LOCK_KEY}, hashtext(f_ns || '/' || f_tid));
            SELECT l.owner, l.expires_at - {{now}} INTO held_owner, held_left
                FROM {{P}}leases l WHERE l.ns = f_ns AND l.thread_id = f_tid;
            IF held_owner IS NOT NULL AND held_owner <> f_owner AND held_left > 0 THEN
                RAISE EXCEPTION USING ERRCODE = 'PLT01', MESSAGE = 'plait fence: the thread is leased by another owner',
                    DETAIL = json_build_object('thread_id', f_tid, 'owner', held_owner, 'expires_in', held_left)::text;
            END IF;
            IF f_check_head THEN
                {HEAD_CHECK}
            END IF;
            RETURN 1;
        END
        $fence$"""
"""Schema 2's ``fence()``: the lease check, and the head check when asked."""

_FENCE_6 = _FENCE_2.replace(
    "f_own text) RETURNS integer", "f_own text, f_parent text,\n            f_quiet boolean) RETURNS integer"
).replace(
    "                END IF;\n            END IF;\n            RETURN 1;",
    f"""                END IF;
                {QUIET_HEAD_CHECK}
            END IF;
            {PARENT_CHECK}
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
                PERFORM pg_advisory_xact_lock({PG_LOCK_KEY}, hashtext(f_ns || '/' || f_tid));
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
            {INSERT_CHECKPOINT}
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
    # (see _store.py). require_parent: a commit whose deltas were computed against this
    # process's cached head checks that the parent still exists (another process may have
    # deleted the thread meanwhile), SQLSTATE PLT03. A seven-argument fence() is version 2's
    # fence plus that check (one statement for a fenced commit, the common case; NULL: none).
    # acquire_lease: the "lease" statement (insert, renew, or take over an expired lease)
    # that raises PLT01, as fence() does, when another owner holds the lease; a holder that
    # released meanwhile is retried.
    3: (
        REQUIRE_PARENT_3,
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
            PERFORM pg_advisory_xact_lock({PG_LOCK_KEY}, hashtext(f_ns || '/' || f_tid));
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
    # planned at every step.
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
    # (put_checkpoint() -> fence() -> the six-argument fence() and require_parent()), a few
    # per cent of a commit's server time. A commit that checks the head
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

PG_MIGRATIONS[7] = (
    # The functions of versions 2 to 6 named the leases table and took no generation.
    "DROP FUNCTION IF EXISTS {P}put_checkpoint(text, text, text, boolean, text, text, text, boolean, text, text, "
    "bigint, double precision, text, bytea, bytea, boolean)",
    "DROP FUNCTION IF EXISTS {P}put_checkpoint(text, text, text, boolean, text, text, text, text, text, bigint, "
    "double precision, text, bytea, bytea, boolean)",
    "DROP FUNCTION IF EXISTS {P}fence(text, text, text, boolean, text, text, text, boolean)",
    "DROP FUNCTION IF EXISTS {P}fence(text, text, text, boolean, text, text, text)",
    "DROP FUNCTION IF EXISTS {P}fence(text, text, text, boolean, text, text)",
    "DROP FUNCTION IF EXISTS {P}take_lease_and_get(text, text, text, double precision, text)",
    "DROP FUNCTION IF EXISTS {P}take_lease(text, text, text, double precision)",
    "DROP FUNCTION IF EXISTS {P}acquire_lease(text, text, text, double precision)",
    "DROP FUNCTION IF EXISTS {P}give_lease(text, text, text)",
    LEASE_LOST_7,
    TAKE_7,
    TAKE_AND_GET_7,
    RENEW_7,
    GIVE_7,
    FENCE_7,
    PUT_CHECKPOINT_7,
)

PG_MIGRATIONS[8] = (TAKE_8,)

PG_MIGRATIONS[9] = (
    # Every function of version 8 again, as it was, but created by a migration that names
    # its tables with their schema even when the store was set up through the search path
    # (no schema=): an unqualified name in a function body is looked up in the *caller's*
    # search path, so a store set up that way and then used with schema= wrote through its
    # functions into another schema's tables (public's, when they existed). See
    # PostgresCheckpointer.migrate.
    REQUIRE_PARENT_3,
    LEASE_LOST_7,
    TAKE_8,
    TAKE_AND_GET_7,
    RENEW_7,
    GIVE_7,
    FENCE_7,
    PUT_CHECKPOINT_7,
)

PG_MIGRATIONS[10] = PG_MEMORY_TABLES  # the memory store's tables (see plait.checkpoint.sql._memory_sql)

PG_MIGRATIONS[13] = (
    # fence() and put_checkpoint() take the past checkpoint a commit builds on as its caller
    # remembers it (Fence.expect_parent_no_writes), which must still be stored and have no
    # pending writes (PLT05): such an update is then one call, with no read before it or
    # inside it. put_checkpoint() makes every check itself (a head-checked commit called
    # fence(), a query of its own). New overloads: version 7's functions stay, so that a
    # process of the previous version still running during an upgrade commits as it did.
    FENCE_13,
    PUT_CHECKPOINT_13,
)

SWEEP_KEY = "hashtextextended('plait-retention-sweep:' || coalesce(%s, current_schema()), 0)"
SWEEP_LOCK = f"SELECT pg_try_advisory_lock({SWEEP_KEY})"
SWEEP_UNLOCK = f"SELECT pg_advisory_unlock({SWEEP_KEY})"
"""The sweep's advisory lock: one key per schema, so stores in other schemas sweep freely."""
