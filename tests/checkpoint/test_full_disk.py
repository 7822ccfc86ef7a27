"""A full disk, for real: each store on a small tmpfs filled to the last byte. A commit that
cannot be written raises CheckpointError (saying the disk is full, the OSError or the
database's error chained), leaves nothing half-written, and once space is freed every
checkpoint committed before reads back and the next commit works.

Mounting needs root (CAP_SYS_ADMIN); elsewhere these tests skip, saying so.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.file import FileCheckpointer
from plait.checkpoint.file._format import file_stem
from plait.checkpoint.model import Checkpoint
from plait.checkpoint.sqlite import SqliteCheckpointer
from plait.errors import CheckpointError

from ._backend_helpers import make, same

pytestmark = pytest.mark.timeout(120)


class Disk:
    """A tmpfs of ``size`` mounted at ``path``, with ballast to fill it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ballast = path / "ballast"

    def fill(self) -> None:
        """Write zeros until no byte is left (ENOSPC)."""
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while True:
                os.write(fd, bytes(1 << 16))  # (a short write first, then ENOSPC)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        finally:
            os.close(fd)

    def free(self) -> None:
        self.ballast.unlink()


def _mount(path: Path, size: str) -> Iterator[Disk]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to fill needs root (CAP_SYS_ADMIN)")
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield Disk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    yield from _mount(tmp_path / "disk", "2m")


def _big(i: int) -> str:
    """About 96 KB that compression cannot shrink (more than a few pages of any store)."""
    return os.urandom(48 * 1024).hex() + str(i)


def _disk_full(exc: CheckpointError) -> None:
    assert "disk is full" in str(exc) and "Free some space" in str(exc), str(exc)
    assert exc.__cause__ is not None


def _chain(cp: Checkpointer, thread: str, n: int) -> list[Checkpoint]:
    written: list[Checkpoint] = []
    parent = None
    for i in range(n):
        cw = make(thread, parent, {"i": i, "log": [*(parent.values["log"] if parent else []), f"entry {i}"]})
        cp.commit(checkpoints=[cw])
        parent = cw.checkpoint
        written.append(parent)
    return written


def _survives_a_full_disk(disk: Disk, open_store: Callable[[], Checkpointer], cause: Callable[[Any], bool]) -> None:
    """The scenario every store goes through: commits, a full disk, failed commits, reads,
    space freed, the next commit, and everything read back by a new instance."""
    cp = open_store()
    written = _chain(cp, "t", 3)
    other = _chain(cp, "u", 2)
    disk.fill()
    for attempt in range(3):  # a failed commit leaves the store able to fail the same way again
        with pytest.raises(CheckpointError) as info:
            cp.commit(checkpoints=[make("t", written[-1], {"big": _big(attempt)})])
        _disk_full(info.value)
        assert cause(info.value.__cause__), repr(info.value.__cause__)
    with pytest.raises(CheckpointError) as info:
        cp.commit(checkpoints=[make("new", None, {"big": _big(9)})])
    _disk_full(info.value)
    same(cp.get("t"), written[-1])  # reads need no space
    assert [c.id for c in cp.history("t")] == [c.id for c in reversed(written)]
    assert cp.get("new") is None
    disk.free()
    nxt = make("t", written[-1], {"big": _big(100)})
    cp.commit(checkpoints=[nxt])
    written.append(nxt.checkpoint)
    cp.commit(checkpoints=[make("new", None, {"v": 1})])
    cp.close()
    fresh = open_store()
    try:
        for want in written:
            same(fresh.get("t", want.id), want)
        assert [c.id for c in fresh.history("t")] == [c.id for c in reversed(written)]
        same(fresh.get("u"), other[-1])
        assert sorted(t.thread_id for t in fresh.list_threads()) == ["new", "t", "u"]
    finally:
        fresh.close()


def test_a_file_store_survives_a_full_disk(disk: Disk) -> None:
    folder = disk.path / "store"

    def open_store() -> Checkpointer:
        cp = FileCheckpointer(folder)
        asyncio.run(cp.asetup())
        return cp

    _survives_a_full_disk(disk, open_store, lambda exc: isinstance(exc, OSError) and exc.errno == errno.ENOSPC)
    for path in folder.iterdir():  # no half-written line was left behind
        for line in path.read_bytes().splitlines():
            orjson.loads(line)


def test_a_file_store_leaves_no_file_for_a_thread_it_could_not_create(disk: Disk) -> None:
    cp = FileCheckpointer(disk.path / "store")
    asyncio.run(cp.asetup())
    _chain(cp, "t", 1)
    disk.fill()
    with pytest.raises(CheckpointError, match="disk is full"):
        cp.commit(checkpoints=[make("new", None, {"big": _big(0)})])
    assert not (disk.path / "store" / (file_stem("", "new") + ".jsonl")).exists()
    assert cp.list_threads()[0].thread_id == "t"


def test_a_sqlite_store_survives_a_full_disk(disk: Disk) -> None:
    db = disk.path / "plait.db"
    _survives_a_full_disk(
        disk,
        lambda: SqliteCheckpointer(db),
        lambda exc: isinstance(exc, sqlite3.Error) and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_FULL,
    )
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_prune_on_a_full_disk_changes_nothing(disk: Disk) -> None:
    cp = FileCheckpointer(disk.path / "store")
    asyncio.run(cp.asetup())
    written = _chain(cp, "t", 6)
    big = make("t", written[-1], {"big": _big(0)})
    cp.commit(checkpoints=[big])
    written.append(big.checkpoint)
    disk.fill()
    with pytest.raises(CheckpointError, match="disk is full"):
        cp.prune("t", keep_last=2)  # the rewritten file does not fit
    assert [c.id for c in cp.history("t")] == [c.id for c in reversed(written)]
    disk.free()
    assert cp.prune("t", keep_last=2) == 5


@pytest.fixture
def pg_disk(tmp_path: Path, postgres_dsn: str) -> Iterator[tuple[Disk, str, str]]:
    """A tablespace on a small tmpfs and a schema whose tables live in it.

    The server is the one the tests share: only this test's tables are in the tablespace (its
    write-ahead log stays on the server's own disk), so only they run out of space. The
    teardown drops the schema and the tablespace before unmounting."""
    import psycopg

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to fill needs root (CAP_SYS_ADMIN)")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        local = conn.execute("SELECT inet_server_addr() IS NULL OR inet_server_addr() = '127.0.0.1'").fetchone()
        superuser = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if not (local and local[0] and superuser and superuser[0]):
        pytest.skip("a tablespace on a tmpfs needs a PostgreSQL on this machine and a superuser")
    try:
        import pwd

        owner = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no 'postgres' system user to own the tablespace's folder")
    # The server runs as another user: the mount point must be reachable by it, and the
    # test's own folder is not (pytest's base folder is private to root).
    top = Path(tempfile.mkdtemp(prefix="plait-full-disk-"))
    top.chmod(0o755)
    for disk in _mount(top / "disk", "4m"):
        os.chown(disk.path, owner.pw_uid, owner.pw_gid)
        name = f"plait_full_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE {name} LOCATION '{disk.path}'")
            conn.execute(f'CREATE SCHEMA "{name}"')
        try:
            yield disk, name, name
        finally:
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
                conn.execute("CHECKPOINT")  # dropped files leave the tablespace at the next checkpoint
                conn.execute(f"DROP TABLESPACE IF EXISTS {name}")
    shutil.rmtree(top)


@pytest.mark.postgres
def test_a_postgres_store_survives_a_full_disk(pg_disk: tuple[Disk, str, str], postgres_dsn: str) -> None:
    from psycopg.conninfo import make_conninfo

    from plait.checkpoint.postgres import PostgresCheckpointer

    disk, tablespace, schema = pg_disk
    dsn = make_conninfo(postgres_dsn, options=f"-c default_tablespace={tablespace}")

    def open_store() -> Checkpointer:
        cp = PostgresCheckpointer(dsn, schema=schema)
        cp.setup()
        return cp

    _survives_a_full_disk(disk, open_store, lambda exc: getattr(exc, "sqlstate", None) == "53100")
