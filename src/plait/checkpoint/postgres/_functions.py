"""The plpgsql functions of the checkpoint store as PostgreSQL runs them now (schema 7 on):
the fence of a commit, the commit itself and the lease, each checked server-side so that it
is one statement and one round trip.

Kept apart from :mod:`plait.checkpoint.postgres._schema`, which says which migration creates
which of them (and keeps the older versions' functions as they shipped). A function's text
here is never edited once released: a change is a new constant, created by a new migration.

The rules the functions apply are :mod:`plait.checkpoint.lease`'s, which the other backends
apply in Python; SQLSTATEs PLT01 (leased by another owner), PLT02 (another head), PLT03 (a
cached parent is gone), PLT04 (the lease was lost) and PLT05 (the past checkpoint a commit
builds on is gone or has pending writes) carry their facts as JSON in DETAIL.
"""

from __future__ import annotations

__all__ = [
    "FENCE_13",
    "FENCE_7",
    "GIVE_7",
    "HEAD_CHECK",
    "INSERT_CHECKPOINT",
    "LEASE_LOST_7",
    "PARENT_CHECK",
    "PG_LOCK_KEY",
    "PUT_CHECKPOINT_13",
    "PUT_CHECKPOINT_7",
    "QUIET_HEAD_CHECK",
    "QUIET_PARENT_CHECK",
    "RENEW_7",
    "REQUIRE_PARENT_3",
    "TAKE_7",
    "TAKE_8",
    "TAKE_AND_GET_7",
]

PG_LOCK_KEY = 0x706C6169
"""The first key of the per-thread advisory locks ("plai"); two-key locks live apart from
the one-key lock that ``setup()`` takes.

PostgreSQL's ``fence()`` and ``acquire_lease()`` lock one thread (``ns``, ``thread_id``)
until the transaction ends, so that a fence's reads and the commit it guards are one atomic
step with respect to leases taken and to other fenced commits of the thread (at READ
COMMITTED a plain SELECT would let a lease or a head change between the check and the
COMMIT). A hash collision between two threads only makes them wait for each other."""

REQUIRE_PARENT_3 = """CREATE OR REPLACE FUNCTION {P}require_parent(f_ns text, f_tid text, f_parent text)
        RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $require$
        BEGIN
            PERFORM 1 FROM {P}checkpoints c WHERE c.ns = f_ns AND c.thread_id = f_tid AND c.id = f_parent;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'PLT03', MESSAGE = 'plait: the parent checkpoint is gone',
                    DETAIL = json_build_object('namespace', f_ns, 'thread_id', f_tid, 'parent', f_parent)::text;
            END IF;
            RETURN 1;
        END
        $require$"""
"""Raise PLT03 when a commit's parent checkpoint is gone (another process deleted it)."""

_NOW = "coalesce(f_now, extract(epoch from clock_timestamp())::float8)"
"""The lease clock: the caller's (a checkpointer given a clock, for tests) or the server's,
which every machine sharing the database agrees on."""

_LOCK = f"PERFORM pg_advisory_xact_lock({PG_LOCK_KEY}, hashtext(f_ns || '/' || f_tid));"

LEASE_LOST_7 = """CREATE OR REPLACE FUNCTION {P}lease_lost(f_ns text, f_tid text, f_token bigint) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $lost$
        DECLARE
            r record;
        BEGIN
            SELECT x.gen, x.owner, x.holder, x.taken_at, x.held, x.updated_at INTO r
                FROM {P}threads x WHERE x.ns = f_ns AND x.thread_id = f_tid;
            RAISE EXCEPTION USING ERRCODE = 'PLT04', MESSAGE = 'plait: the lease was lost',
                DETAIL = json_build_object('thread_id', f_tid, 'namespace', f_ns, 'token', f_token,
                    'found', FOUND, 'gen', r.gen, 'owner', r.owner, 'holder', r.holder::json,
                    'taken_at', r.taken_at, 'held', r.held, 'updated_at', r.updated_at)::text;
        END
        $lost$"""
"""Raise PLT04 with what the thread's row says now (who took it over, and when)."""

_BUSY = """RAISE EXCEPTION USING ERRCODE = 'PLT01', MESSAGE = 'plait: the thread is leased by another owner',
                    DETAIL = json_build_object('thread_id', f_tid, 'namespace', f_ns, 'owner', r.owner,
                        'expires_in', r.expires_at - t, 'holder', r.holder::json, 'gen', r.gen)::text;"""

TAKE_7 = f"""CREATE OR REPLACE FUNCTION {{P}}take_lease(
            f_ns text, f_tid text, f_owner text, f_ttl double precision, f_holder text, f_over bigint,
            f_now double precision) RETURNS TABLE (gen bigint, taken_at double precision, expires_at double precision)
        LANGUAGE plpgsql VOLATILE AS $take$
        #variable_conflict use_column
        DECLARE
            r record;
            t double precision := {_NOW};
        BEGIN
            PERFORM set_config('synchronous_commit', 'off', true);
            {_LOCK}
            SELECT x.gen, x.owner, x.holder, x.expires_at, x.held INTO r
                FROM {{P}}threads x WHERE x.ns = f_ns AND x.thread_id = f_tid;
            IF FOUND THEN
                IF r.held = 1 AND r.expires_at > t AND r.gen IS DISTINCT FROM f_over THEN
                    {_BUSY}
                END IF;
                UPDATE {{P}}threads x SET gen = r.gen + 1, owner = f_owner, holder = f_holder, taken_at = t,
                    expires_at = t + f_ttl, held = 1, updated_at = t WHERE x.ns = f_ns AND x.thread_id = f_tid;
                RETURN QUERY SELECT r.gen + 1, t, t + f_ttl;
            ELSE
                INSERT INTO {{P}}threads (ns, thread_id, gen, owner, holder, taken_at, expires_at, held, status,
                    updated_at) VALUES (f_ns, f_tid, 1, f_owner, f_holder, t, t + f_ttl, 1, 'idle', t);
                RETURN QUERY SELECT 1::bigint, t, t + f_ttl;
            END IF;
        END
        $take$"""
"""Take a thread's lease: a new generation, unless a live lease is held (PLT01). ``f_over``:
the generation whose holder the caller found dead on its machine, taken over before it
expires. Not flushed (a lease lost in a crash is harmless, see version 3's take_lease)."""

TAKE_AND_GET_7 = """CREATE OR REPLACE FUNCTION {P}take_lease_and_get(
            f_ns text, f_tid text, f_owner text, f_ttl double precision, f_holder text, f_over bigint,
            f_now double precision, f_id text)
            RETURNS TABLE (gen bigint, taken_at double precision, expires_at double precision, id text,
                           parent_id text, step bigint, created_at double precision, metadata bytea, body bytea,
                           task_id text, kind text, wkey text, value bytea)
        LANGUAGE plpgsql VOLATILE AS $start$
        #variable_conflict use_column
        DECLARE
            l record;
        BEGIN
            SELECT * INTO l FROM {P}take_lease(f_ns, f_tid, f_owner, f_ttl, f_holder, f_over, f_now);
            IF f_id IS NULL THEN
                RETURN QUERY SELECT l.gen, l.taken_at, l.expires_at, c.id, c.parent_id, c.step, c.created_at,
                        c.metadata, c.body, w.task_id, w.kind, w.wkey, w.value
                    FROM (SELECT 1) one
                    LEFT JOIN (SELECT x.id, x.parent_id, x.step, x.created_at, x.metadata, x.body FROM {P}checkpoints x
                          WHERE x.ns = f_ns AND x.thread_id = f_tid ORDER BY x.id DESC LIMIT 1) c ON true
                    LEFT JOIN {P}writes w ON w.ns = f_ns AND w.thread_id = f_tid AND w.checkpoint_id = c.id
                    ORDER BY w.seq;
            ELSE
                RETURN QUERY SELECT l.gen, l.taken_at, l.expires_at, c.id, c.parent_id, c.step, c.created_at,
                        c.metadata, c.body, w.task_id, w.kind, w.wkey, w.value
                    FROM (SELECT 1) one
                    LEFT JOIN {P}checkpoints c ON c.ns = f_ns AND c.thread_id = f_tid AND c.id = f_id
                    LEFT JOIN {P}writes w ON w.ns = c.ns AND w.thread_id = c.thread_id AND w.checkpoint_id = c.id
                    ORDER BY w.seq;
            END IF;
        END
        $start$"""
"""What a run does first, in one round trip: take the lease, then read the checkpoint it
starts from with its pending writes (a row of NULL checkpoint columns when there is none).
The read is a statement of its own after the lease is taken, so it sees every commit made
before (the previous owner's last one included)."""

RENEW_7 = f"""CREATE OR REPLACE FUNCTION {{P}}renew_lease(
            f_ns text, f_tid text, f_token bigint, f_ttl double precision, f_now double precision)
            RETURNS double precision
        LANGUAGE plpgsql VOLATILE AS $renew$
        DECLARE
            t double precision := {_NOW};
        BEGIN
            PERFORM set_config('synchronous_commit', 'off', true);
            {_LOCK}
            UPDATE {{P}}threads x SET expires_at = t + f_ttl
                WHERE x.ns = f_ns AND x.thread_id = f_tid AND x.gen = f_token AND x.held = 1;
            IF NOT FOUND THEN
                PERFORM {{P}}lease_lost(f_ns, f_tid, f_token);
            END IF;
            RETURN t + f_ttl;
        END
        $renew$"""
"""Extend the lease of generation ``f_token``, expired or not; never take a lost one back (PLT04)."""

GIVE_7 = f"""CREATE OR REPLACE FUNCTION {{P}}give_lease(
            f_ns text, f_tid text, f_token bigint, f_status text, f_now double precision) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $give$
        DECLARE
            t double precision := {_NOW};
        BEGIN
            PERFORM set_config('synchronous_commit', 'off', true);
            UPDATE {{P}}threads x SET held = 0, status = coalesce(f_status, x.status), updated_at = t
                WHERE x.ns = f_ns AND x.thread_id = f_tid AND x.gen = f_token AND x.held = 1;
            RETURN 1;
        END
        $give$"""
"""Give the lease of generation ``f_token`` back (nothing when it is no longer current)."""

_CHECK_LEASE = f"""{_LOCK}
            SELECT x.gen, x.owner, x.holder, x.expires_at, x.held INTO r
                FROM {{P}}threads x WHERE x.ns = f_ns AND x.thread_id = f_tid;
            IF f_token IS NOT NULL THEN
                IF NOT FOUND OR r.gen <> f_token OR r.held <> 1 THEN
                    PERFORM {{P}}lease_lost(f_ns, f_tid, f_token);
                END IF;
            ELSIF FOUND AND r.held = 1 THEN
                IF r.expires_at > t THEN
                    {_BUSY}
                END IF;
                UPDATE {{P}}threads x SET gen = r.gen + 1, owner = f_owner, holder = NULL, taken_at = t,
                    expires_at = 0, held = 0 WHERE x.ns = f_ns AND x.thread_id = f_tid;
            END IF;"""
"""A fence's lease condition (see :func:`plait.checkpoint.lease.check_fence`): a run's
token must be the thread's current, held lease; a one-off write is refused by a live lease
and revokes an expired one."""

HEAD_CHECK = """SELECT c.id INTO found_head FROM {P}checkpoints c WHERE c.ns = f_ns AND c.thread_id = f_tid
                    ORDER BY c.id DESC LIMIT 1;
                IF found_head IS DISTINCT FROM f_expect AND found_head IS DISTINCT FROM f_own THEN
                    RAISE EXCEPTION USING ERRCODE = 'PLT02', MESSAGE = 'plait fence: the thread has another head',
                        DETAIL = json_build_object('thread_id', f_tid, 'expected', f_expect, 'found', found_head)::text;
                END IF;"""
"""A head-checked fence's check that the thread's head is the expected one (or the commit's
own, already landed), PLT02."""

QUIET_HEAD_CHECK = """IF f_quiet AND found_head = f_expect AND found_head IS DISTINCT FROM f_own THEN
                    PERFORM 1 FROM {P}writes w
                        WHERE w.ns = f_ns AND w.thread_id = f_tid AND w.checkpoint_id = found_head LIMIT 1;
                    IF FOUND THEN
                        RAISE EXCEPTION USING ERRCODE = 'PLT02',
                            MESSAGE = 'plait fence: the expected head has pending writes',
                            DETAIL = json_build_object('thread_id', f_tid, 'expected', f_expect, 'found', found_head,
                                                       'pending_writes', true)::text;
                    END IF;
                END IF;"""
"""A head-checked fence's check that the expected head has no pending writes (``f_quiet``:
Fence.expect_no_writes), PLT02 with ``pending_writes`` in its DETAIL."""

INSERT_CHECKPOINT = (
    "INSERT INTO {P}checkpoints AS c (ns, thread_id, id, parent_id, step, created_at, source, metadata, body)\n"
    """                VALUES (f_ns, f_tid, c_id, c_parent, c_step, c_created, c_source, c_metadata, c_body)
                ON CONFLICT (ns, thread_id, id) DO UPDATE SET parent_id = excluded.parent_id, step = excluded.step,
                created_at = excluded.created_at, source = excluded.source, metadata = excluded.metadata,
                body = excluded.body;"""
)
"""The commit's checkpoint row (written again, as it was, when a commit is retried)."""

PARENT_CHECK = """IF f_parent IS NOT NULL THEN
                PERFORM 1 FROM {P}checkpoints c WHERE c.ns = f_ns AND c.thread_id = f_tid AND c.id = f_parent;
                IF NOT FOUND THEN
                    RAISE EXCEPTION USING ERRCODE = 'PLT03', MESSAGE = 'plait: the parent checkpoint is gone',
                        DETAIL = json_build_object('namespace', f_ns, 'thread_id', f_tid, 'parent', f_parent)::text;
                END IF;
            END IF;"""

FENCE_7 = f"""CREATE OR REPLACE FUNCTION {{P}}fence(
            f_ns text, f_tid text, f_owner text, f_token bigint, f_check_head boolean, f_expect text, f_own text,
            f_parent text, f_quiet boolean, f_now double precision) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $fence$
        DECLARE
            r record;
            found_head text;
            t double precision := {_NOW};
        BEGIN
            {_CHECK_LEASE}
            IF f_check_head THEN
                {HEAD_CHECK}
                {QUIET_HEAD_CHECK}
            END IF;
            {PARENT_CHECK}
            RETURN 1;
        END
        $fence$"""
"""A fenced commit's checks on one thread, as one statement that raises instead of answering."""

PUT_CHECKPOINT_7 = f"""CREATE OR REPLACE FUNCTION {{P}}put_checkpoint(
            f_ns text, f_tid text, f_owner text, f_token bigint, f_check_head boolean, f_expect text, f_own text,
            f_parent text, f_quiet boolean, f_now double precision, c_id text, c_parent text, c_step bigint,
            c_created double precision, c_source text, c_metadata bytea, c_body bytea, f_release boolean,
            f_settle boolean, f_status text) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $put$
        DECLARE
            r record;
            t double precision := {_NOW};
        BEGIN
            IF f_check_head THEN
                PERFORM {{P}}fence(f_ns, f_tid, f_owner, f_token, f_check_head, f_expect, f_own, f_parent, f_quiet,
                                   f_now);
            ELSE
                {_CHECK_LEASE}
                {PARENT_CHECK}
            END IF;
            {INSERT_CHECKPOINT}
            IF f_release THEN  -- not give_lease(): that would make this commit skip its flush
                UPDATE {{P}}threads x SET held = 0, status = coalesce(f_status, x.status), updated_at = t
                    WHERE x.ns = f_ns AND x.thread_id = f_tid AND x.gen = f_token AND x.held = 1;
            END IF;
            IF f_settle THEN
                INSERT INTO {{P}}threads AS x (ns, thread_id, gen, owner, holder, taken_at, expires_at, held, status,
                    updated_at) VALUES (f_ns, f_tid, 0, NULL, NULL, 0, 0, 0, f_status, t)
                    ON CONFLICT (ns, thread_id) DO UPDATE SET status = excluded.status,
                    updated_at = excluded.updated_at;
            END IF;
            RETURN 1;
        END
        $put$"""
"""The usual commit as one call: its fence (the checks inline for a run's step, the one
commit in a million that checks a head through fence()), its checkpoint row, and for a
run's last commit its lease given back, or for a one-off write how it leaves the thread."""

TAKE_8 = TAKE_7.replace("            PERFORM set_config('synchronous_commit', 'off', true);\n", "")
"""Take a thread's lease, flushed like a commit. Version 7 did not wait for the flush, which
a crash of the server could undo while the run that took the lease lived on: the next run
would then be given the same generation, and the two runs' fences could not tell them apart.
Flushed, a generation is never issued twice. (Renewals and releases stay unflushed: a lost
renewal only shortens a lease, a lost release only makes the next run wait for the expiry.)"""
assert TAKE_8 != TAKE_7

QUIET_PARENT_CHECK = """IF f_quiet_parent IS NOT NULL THEN
                SELECT EXISTS (SELECT 1 FROM {P}writes w WHERE w.ns = f_ns AND w.thread_id = f_tid
                                   AND w.checkpoint_id = f_quiet_parent) INTO parent_writes
                    FROM {P}checkpoints c WHERE c.ns = f_ns AND c.thread_id = f_tid AND c.id = f_quiet_parent;
                IF NOT FOUND OR parent_writes THEN
                    RAISE EXCEPTION USING ERRCODE = 'PLT05', MESSAGE = 'plait fence: the checkpoint built on changed',
                        DETAIL = json_build_object('thread_id', f_tid, 'namespace', f_ns, 'parent', f_quiet_parent,
                                                   'pending_writes', FOUND)::text;
                END IF;
            END IF;"""
"""Fence.expect_parent_no_writes (``f_quiet_parent``: the past checkpoint a commit builds on
as its caller remembers it): that checkpoint must still be stored and have no pending
writes, else PLT05 (ConcurrentUpdateError with ``parent``), its facts as JSON in DETAIL. One
query for both (each query of a function is a call into the executor of its own)."""

_CHECKS_13 = f"""{_CHECK_LEASE}
            IF f_check_head THEN
                {HEAD_CHECK}
                {QUIET_HEAD_CHECK}
            END IF;
            {PARENT_CHECK}
            {QUIET_PARENT_CHECK}"""
"""Every check of a fenced commit on one thread, in the order version 7's fence() makes them,
then the remembered parent's (version 13)."""

_FENCE_ARGS_13 = """f_ns text, f_tid text, f_owner text, f_token bigint, f_check_head boolean, f_expect text,
            f_own text, f_parent text, f_quiet boolean, f_now double precision, f_quiet_parent text"""

_DECLARE_13 = f"""DECLARE
            r record;
            found_head text;
            parent_writes boolean;
            t double precision := {_NOW};"""

FENCE_13 = f"""CREATE OR REPLACE FUNCTION {{P}}fence(
            {_FENCE_ARGS_13}) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $fence$
        {_DECLARE_13}
        BEGIN
            {_CHECKS_13}
            RETURN 1;
        END
        $fence$"""
"""Version 7's fence() with ``f_quiet_parent`` (see :data:`QUIET_PARENT_CHECK`)."""

PUT_CHECKPOINT_13 = (
    PUT_CHECKPOINT_7.replace(
        "f_parent text, f_quiet boolean, f_now double precision, c_id text,",
        "f_parent text, f_quiet boolean, f_now double precision, f_quiet_parent text, c_id text,",
    )
    .replace(
        f"""DECLARE
            r record;
            t double precision := {_NOW};""",
        _DECLARE_13,
    )
    .replace(
        f"""IF f_check_head THEN
                PERFORM {{P}}fence(f_ns, f_tid, f_owner, f_token, f_check_head, f_expect, f_own, f_parent, f_quiet,
                                   f_now);
            ELSE
                {_CHECK_LEASE}
                {PARENT_CHECK}
            END IF;""",
        _CHECKS_13,
    )
)
"""Version 7's put_checkpoint() with ``f_quiet_parent``, and every check written into it, as a
run's step has had its checks since version 5: a head-checked commit (an update) called
fence(), a nested call of its own (measured level for an update of a past checkpoint: server
time 124 µs with version 7's, 132 with this one, medians, within the noise; docs/benchmarks.md)."""
assert PUT_CHECKPOINT_13.count("f_quiet_parent") > 3 and "PERFORM {P}fence" not in PUT_CHECKPOINT_13
