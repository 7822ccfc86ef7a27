"""Opening PostgreSQL connections and telling failures apart: what retrying can mend (a
server starting up, a connection that broke) and what it cannot (no server at the address, a
database or role that does not exist, a refused password, a full disk), each said with the
address it concerns, its password left out, and what to check; and what plait's own
functions mean when they refuse a commit or a lease (:func:`refusal`).

Part of :class:`~plait.checkpoint.postgres.PostgresCheckpointer`; psycopg is imported inside
functions only, as there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import orjson

from plait.checkpoint.holder import Holder
from plait.checkpoint.sql._commit import StaleCache
from plait.errors import CheckpointError, ConcurrentUpdateError, LeaseLostError, ThreadBusyError

__all__ = ["connection_lost", "failure", "first_connection", "redacted", "refusal", "scrubbed"]


def connection_lost(exc: Exception) -> bool:
    """Whether an OperationalError means the connection broke (retried on a fresh one), not
    that the server refused the statement: no SQLSTATE (libpq lost the connection), class
    08 (connection exception) or 57P (the server is shutting down or restarting). A full
    disk (53100) or a key too long for an index (54000) would fail the same way again.
    Waiting for a free pooled connection (PoolTimeout) already took the whole timeout."""
    from psycopg_pool import PoolTimeout

    if isinstance(exc, PoolTimeout):
        return False
    code = getattr(exc, "sqlstate", None)
    return code is None or code.startswith(("08", "57P"))


def failure(store: str, exc: Exception) -> str:
    """The message of a database error that no retry mends: what happened and what to do."""
    code = getattr(exc, "sqlstate", None)
    if code == "53100":
        return (
            f"{store}: the database server's disk is full ({exc}), so the transaction was rolled back and "
            "nothing of it was stored; every checkpoint committed before stays readable. Free some space "
            "on the server's disk (or its tablespace), then retry."
        )
    if type(exc).__name__ == "PoolTimeout":
        return f"{store}: no pooled connection became free in time ({exc}); raise max_connections or connect_timeout"
    return f"{store}: {type(exc).__name__}: {exc}"


_TRANSIENT = (
    "the database system is starting up",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "the database system is shutting down",
    "too many clients already",
    "remaining connection slots are reserved",
)
"""What a server says (in English) when it will take the connection if asked again soon."""


def first_connection(conninfo: str, store: str, timeout: float, deadline: float) -> None:
    """Connect once, by hand, before the pool does: fail at once, with one clear
    :class:`~plait.errors.CheckpointError`, when connecting cannot succeed (no server at the
    address, a database or role that does not exist, a refused password, a bad connection
    string), and wait quietly, until ``deadline``, while the server says it is starting up,
    recovering or out of connection slots.

    Connection errors carry no SQLSTATE in psycopg, so the kinds are told apart by asking
    the server with libpq's ping (which answers "rejecting" for a server starting up or
    shutting down, "ok" when it is up but our login failed, "no response" when nothing
    answers), and by the server's own words for the cases ping calls "ok".
    """
    import psycopg
    from psycopg import pq

    pause = 0.05
    while True:
        left = deadline - time.monotonic()
        try:
            conn = psycopg.connect(conninfo, connect_timeout=max(2, math.ceil(left)), autocommit=True)
        except psycopg.OperationalError as exc:
            text = str(exc)
            if any(m in text for m in _TRANSIENT):
                transient, ping = True, pq.Ping.REJECT
            elif "timeout expired" in text:  # (the time is up anyway)
                transient, ping = False, pq.Ping.NO_RESPONSE
            elif "connection option" in text or 'missing "="' in text:  # libpq refused the string itself
                transient, ping = False, pq.Ping.NO_ATTEMPT
            else:
                ping = _ping(conninfo)
                transient = ping == pq.Ping.REJECT
            left = deadline - time.monotonic()
            if transient and left > 0.01:  # (the last try comes right at the deadline)
                time.sleep(min(pause, left - 0.01))
                pause = min(pause * 2, 0.5)
                continue
            raise CheckpointError(_connect_failure(store, conninfo, exc, ping, timeout if transient else None)) from exc
        conn.close()
        return


def _ping(conninfo: str) -> Any:
    """libpq's ping of the server ``conninfo`` names, given at most 2 s (a ``pq.Ping``)."""
    import psycopg
    from psycopg import pq
    from psycopg.conninfo import make_conninfo

    try:
        return pq.Ping(pq.PGconn.ping(make_conninfo(conninfo, connect_timeout=2).encode()))
    except (psycopg.Error, ValueError):
        return pq.Ping.NO_ATTEMPT


def _connect_failure(store: str, conninfo: str, exc: Exception, ping: Any, waited: float | None) -> str:
    """What failed when connecting, where (the password left out) and what to check."""
    from psycopg import pq

    text = scrubbed(exc, conninfo)
    where = f"{store}: cannot connect to {redacted(conninfo)}"
    if waited is not None:
        return f"{where}: the server did not accept connections within {waited:g}s ({text}); is it still starting up?"
    if ping == pq.Ping.NO_RESPONSE:
        return (
            f"{where}: no PostgreSQL server answered there ({text}). Check the host and port, that the server is "
            "running and listening on them (listen_addresses), and that no firewall is in the way."
        )
    if ping == pq.Ping.NO_ATTEMPT:
        return f"{where}: the connection string is not valid ({text}). Check its syntax and option names."
    if "does not exist" in text and "database" in text:
        advice = "Check the database name (dbname), or create the database (createdb)."
    elif "role" in text and "does not exist" in text:
        advice = "Check the user name, or create the role (CREATE ROLE ... LOGIN)."
    elif "password" in text or "authentication" in text:
        advice = "Check the user name and password (or PGPASSWORD, ~/.pgpass)."
    else:
        advice = "Check the user name, password and database name, and the server's pg_hba.conf."
    return f"{where}: the server refused the connection ({text}). {advice}"


def redacted(conninfo: str) -> str:
    """The connection string as ``key=value`` pairs, without its password (for messages)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(conninfo)
    except Exception:  # (not even parseable: say so rather than show it)
        return "(a connection string that cannot be parsed)"
    shown = {k: v for k, v in params.items() if k not in ("password", "sslpassword") and v is not None}
    if len(shown) < len(params):
        shown["password"] = "***"
    return make_conninfo("", **shown) or "(the default server)"


def scrubbed(exc: Exception, conninfo: str) -> str:
    """``exc``'s message on one line, with the connection string's password cut out of it."""
    from psycopg.conninfo import conninfo_to_dict

    text = " ".join(str(exc).split())
    try:
        secrets = [v for k, v in conninfo_to_dict(conninfo).items() if k in ("password", "sslpassword") and v]
    except Exception:
        secrets = []
    for secret in secrets:
        text = text.replace(str(secret), "***")
    return text


def refusal(exc: Exception) -> Exception | None:
    """What a refusal raised by one of plait's functions means: ``fence()`` and the lease
    functions (SQLSTATE PLT01, PLT02, PLT04, PLT05) a plait error, ``require_parent()`` (PLT03)
    a stale head cache; facts come as JSON in DETAIL. None for any other database error."""
    diag = getattr(exc, "diag", None)
    code = getattr(diag, "sqlstate", None)
    if code not in ("PLT01", "PLT02", "PLT03", "PLT04", "PLT05"):
        return None
    try:
        facts = orjson.loads(getattr(diag, "message_detail", None) or b"{}")
        if code == "PLT03":
            return StaleCache((str(facts["namespace"]), str(facts["thread_id"])))
        if code == "PLT01":
            holder = Holder.from_json(facts.get("holder"))
            return ThreadBusyError(
                str(facts["thread_id"]),
                str(facts["owner"]),
                max(0.0, float(facts["expires_in"])),
                namespace=str(facts.get("namespace", "")),
                holder=holder,
                alive=holder.alive() if holder is not None else None,
                token=int(facts["gen"]) if facts.get("gen") is not None else None,
            )
        if code == "PLT04":
            return _lost(facts)
        if code == "PLT05":  # the past checkpoint built on (Fence.expect_parent_no_writes)
            parent, writes = str(facts["parent"]), bool(facts["pending_writes"])
            return ConcurrentUpdateError(
                str(facts["thread_id"]), parent, parent if writes else None, pending_writes=writes, parent=True
            )
        return ConcurrentUpdateError(
            str(facts["thread_id"]), facts["expected"], facts["found"], pending_writes=bool(facts.get("pending_writes"))
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def _lost(facts: Mapping[str, Any]) -> LeaseLostError:
    """The LeaseLostError of a PLT04 refusal, from the thread row it reports."""
    thread_id, namespace, token = str(facts["thread_id"]), str(facts.get("namespace", "")), int(facts["token"])
    if not facts.get("found"):
        return LeaseLostError(thread_id, token, namespace=namespace, reason="the thread has no lease any more")
    if facts.get("gen") == token:
        return LeaseLostError(
            thread_id,
            token,
            namespace=namespace,
            reason="the lease was given back",
            taken_at=float(facts["updated_at"]),
        )
    return LeaseLostError(
        thread_id,
        token,
        namespace=namespace,
        taken_by=facts.get("owner"),
        taken_at=float(facts["taken_at"]) if facts.get("taken_at") is not None else None,
        holder=Holder.from_json(facts.get("holder")),
    )
