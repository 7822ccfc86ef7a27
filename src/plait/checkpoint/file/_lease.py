"""A file thread's lease row: ``<name>.lease`` next to its ``<name>.jsonl``, read and
written in place under ``flock`` by every process sharing the folder."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import orjson

from plait.checkpoint import lease as rules
from plait.checkpoint.file._format import Key
from plait.checkpoint.holder import Holder

__all__ = ["peek_row", "read_row", "unlink_if_empty", "write_row"]

_LEASE_ROOM = 1024
"""Bytes a lease file is padded to: later writes overwrite blocks the file already has, so
giving a lease back works on a full disk."""


def read_row(fd: int) -> rules.LeaseRow | None:
    """The thread row stored in a lease file; None when it is empty or unreadable (a lease
    is run coordination: a damaged one counts as none)."""
    raw = os.pread(fd, 1 << 20, 0).strip()
    if not raw:
        return None
    try:
        data = orjson.loads(raw)
        status = data.get("s", "idle")
        return rules.LeaseRow(
            gen=int(data["g"]),
            owner=data.get("o"),
            holder=Holder.from_json(data.get("h")),
            taken_at=float(data.get("ta", 0.0)),
            expires_at=float(data["e"]),
            held=bool(data["held"]),
            status=rules.stored_rest(status),
            updated_at=float(data.get("u", 0.0)),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


def write_row(fd: int, key: Key, row: rules.LeaseRow) -> None:
    """Store a thread row in its lease file, in place: padded so that the file never shrinks
    and a later write reuses its blocks (a lease given back on a full disk)."""
    body = orjson.dumps(
        {
            "g": row.gen,
            "o": row.owner,
            "h": row.holder.to_json() if row.holder is not None else None,
            "ta": row.taken_at,
            "e": row.expires_at,
            "held": row.held,
            "s": row.status,
            "u": row.updated_at,
            "ns": key[0],
            "t": key[1],
        }
    )
    size = max(_LEASE_ROOM, os.fstat(fd).st_size, len(body))
    os.pwrite(fd, body.ljust(size), 0)


def unlink_if_empty(path: Path, fd: int) -> None:
    """Remove a lease file a failed commit created and left empty."""
    with contextlib.suppress(OSError):
        if os.fstat(fd).st_size == 0:
            path.unlink()


def peek_row(path: Path) -> rules.LeaseRow | None:
    """The lease row in ``path``, read without a lock (for listings); None when absent."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return read_row(fd)
    finally:
        os.close(fd)
