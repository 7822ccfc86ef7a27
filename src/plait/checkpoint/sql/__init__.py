"""The SQL checkpoint store, written once for SQLite and PostgreSQL (both dialects import its
parts from their modules; nothing here is public).

- ``_base``: what every part shares: the cursor, the dialect, the commit request, the head cache;
- ``_schema``: the tables and every statement;
- ``_core``: the statements as a dialect runs them, and the parts that use them, assembled once;
  housekeeping (delete, prune) and the one-statement lease calls;
- ``_commit``, ``_read``, ``_threads``, ``_rows``: the commit path, reads, thread rows (leases,
  statuses, listings), and decoding stored rows;
- ``_checkpointer``: the Checkpointer protocol over those parts and a dialect's hooks;
- ``_caller``: when a blocking call may run on the caller's thread, one rule for both stores.
"""
