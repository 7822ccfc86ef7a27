"""The PostgreSQL store: one database shared by many processes and machines.

The store is :class:`PostgresCheckpointer` (``_store.py``), the shared SQL base
(:mod:`plait.checkpoint.sql`) over a connection pool; beside it, its own tables' functions and
migrations (``_schema``), how connections are opened and their failures told apart
(``_connect``), and how a transaction's statements travel in one round trip (``_send``).
psycopg is imported inside functions only, so importing this package never needs it.
"""

from plait.checkpoint.postgres._store import PostgresCheckpointer

__all__ = ["PostgresCheckpointer"]
