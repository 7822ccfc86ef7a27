"""The file store: one append-only JSON-lines file per thread in a folder, no database.

The store is :class:`FileCheckpointer` (``_store.py``); the private modules beside it say how a
file is laid out and parsed (``_format``), written (``_io``), leased (``_lease``) and read
(``_read``).
"""

from plait.checkpoint.file._store import FileCheckpointer

__all__ = ["FileCheckpointer"]
