"""WalReserve: zeroed room ahead of SQLite's log. The room appears once the log is worth it,
follows a log that grows, survives the log being truncated or replaced, and never costs a
commit: every acknowledged checkpoint reads back after SIGKILLs landing anywhere, including
in the middle of writing the zeros, and two processes writing one file lose nothing."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import struct
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from plait.checkpoint.model import Checkpoint
from plait.checkpoint.sqlite import SqliteCheckpointer
from plait.checkpoint.sqlite import _wal as _sqlite_wal
from plait.checkpoint.sqlite._wal import WalReserve

from .._backend_helpers import make, same


def _frames_end(wal: Path) -> int:
    """Where the log's valid frames end (header, then frames carrying the header's salt)."""
    data = wal.read_bytes()
    if len(data) < 32:
        return 0
    page_size = struct.unpack(">I", data[8:12])[0]
    salt = data[16:24]
    pos = 32
    while pos + 24 + page_size <= len(data) and data[pos + 8 : pos + 16] == salt:
        pos += 24 + page_size
    return pos


async def _append(cp: SqliteCheckpointer, thread: str, steps: int, size: int) -> list[Checkpoint]:
    parent: Checkpoint | None = None
    written = []
    for i in range(steps):
        w = make(thread, parent, {"blob": "x" * size, "i": i})
        await cp.acommit(checkpoints=[w])
        parent = w.checkpoint
        written.append(parent)
    return written


def test_room_appears_once_the_log_passes_the_start_and_reads_stay_whole(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    wal = Path(str(db) + "-wal")

    async def go() -> None:
        cp = SqliteCheckpointer(db)
        few = await _append(cp, "small", 3, 100)
        # ~60 commits of a page or more each: past the start, room follows, and short of the ~1000
        # pages at which SQLite resets the log (incremental vacuum adds a pointer-map page per commit)
        many = await _append(cp, "big", 60, 3000)
        size, end = wal.stat().st_size, _frames_end(wal)
        assert size > end, "the log has room after its last frame"
        with wal.open("rb") as f:
            f.seek(end)
            assert set(f.read()) == {0}, "the room is zeros"
        for cps in (few, many):
            for c in cps:
                same(await cp.aget(c.thread_id, c.id), c)
        await cp.aclose()

    asyncio.run(go())
    with closing(sqlite3.connect(db)) as conn, conn:  # commits, then closes
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_commits_overwrite_the_room_instead_of_growing_the_log(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    wal = Path(str(db) + "-wal")

    async def go() -> None:
        cp = SqliteCheckpointer(db)
        # Past the start: room reserved. How far the room reaches depends on every frame
        # written so far (the migrations' too), and the 20 commits below must not meet its
        # end (where it would double): 40 warm commits did until schema 10 added tables.
        await _append(cp, "warm", 50, 3000)
        sizes = set()
        parent: Checkpoint | None = None
        for i in range(20):
            w = make("t", parent, {"n": i})
            await cp.acommit(checkpoints=[w])
            parent = w.checkpoint
            sizes.add(wal.stat().st_size)
        assert len(sizes) == 1, "small commits land inside the room: the file keeps its size"
        await cp.aclose()

    asyncio.run(go())


def test_a_log_truncated_by_another_connection_gets_room_again(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    wal = Path(str(db) + "-wal")

    async def go() -> None:
        cp = SqliteCheckpointer(db)
        first = await _append(cp, "a", 60, 3000)
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        other.close()
        assert wal.stat().st_size == 0
        second = await _append(cp, "b", 60, 3000)
        assert wal.stat().st_size > _frames_end(wal)
        for c in (*first, *second):
            same(await cp.aget(c.thread_id, c.id), c)
        await cp.aclose()

    asyncio.run(go())


_PAGE = 4096
_FRAME = _PAGE + 24


def _fake_log(frames: int, zeros: int = 0) -> bytes:
    """A log as SQLite lays it out: a header naming the page size, then frames whose headers
    start with a page number, then ``zeros`` bytes of room."""
    header = b"\x37\x7f\x06\x82" + (3007000).to_bytes(4, "big") + _PAGE.to_bytes(4, "big") + bytes(20)
    frame = (1).to_bytes(4, "big") + b"\x01" * 20 + b"\x02" * _PAGE
    return header + frame * frames + bytes(zeros)


def _room_after(wal: Path, frames: int) -> int:
    data = wal.read_bytes()
    used = 32 + frames * _FRAME
    assert not any(data[used:]), "only zeros after the frames"
    return len(data) - used


def test_room_is_as_much_as_the_log_used_in_whole_frames(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    wal = Path(str(db) + "-wal")
    reserve = WalReserve(str(db))
    reserve.ahead()  # no log yet: nothing created
    assert not wal.exists()
    wal.write_bytes(_fake_log(2))  # below the start: no room
    reserve.ahead()
    assert _room_after(wal, 2) == 0
    wal.write_bytes(_fake_log(40))  # 160 KB used: as much again
    reserve.ahead()
    room = _room_after(wal, 40)
    assert room % _FRAME == 0 and 40 * _FRAME <= room <= 41 * _FRAME
    before = wal.read_bytes()
    reserve.ahead()  # steady: one fstat, nothing written
    assert wal.read_bytes() == before
    reserve.close()


def test_room_another_process_added_is_not_added_again(tmp_path: Path) -> None:
    db = tmp_path / "two.db"
    wal = Path(str(db) + "-wal")
    wal.write_bytes(_fake_log(40))
    a, b = WalReserve(str(db)), WalReserve(str(db))
    a.ahead()
    size = wal.stat().st_size
    for _ in range(5):  # each sees a size it did not plan: neither adds room again
        b.ahead()
        a.ahead()
    assert wal.stat().st_size == size
    with wal.open("r+b") as f:  # SQLite writes through the room and past its end
        f.seek(32 + 40 * _FRAME)
        f.write(_fake_log(45)[32:])
    b.ahead()
    assert wal.stat().st_size > 32 + 85 * _FRAME and _room_after(wal, 85) >= 85 * _FRAME
    a.close()
    b.close()


def test_a_new_log_after_close_is_planned_and_one_that_starts_over_is_not_padded_far(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    wal = Path(str(db) + "-wal")
    reserve = WalReserve(str(db), restart_at=32 + 60 * _FRAME)
    wal.write_bytes(_fake_log(20))
    reserve.ahead()
    assert _room_after(wal, 20) == 21 * _FRAME
    reserve.close()  # the connection closed, and SQLite deleted its log
    wal.unlink()
    wal.write_bytes(_fake_log(50))
    reserve.ahead()
    room = _room_after(wal, 50)
    assert 0 < room <= 10 * _FRAME + sqlite_wal_start(), "room stops near where the log starts over"
    wal.write_bytes(b"\x01" * 200_000)  # not a log this code can read: left alone
    reserve.ahead()
    assert wal.stat().st_size == 200_000
    reserve.close()


def test_a_failed_plan_costs_nothing_until_the_log_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "full.db"
    wal = Path(str(db) + "-wal")
    wal.write_bytes(_fake_log(40))
    tries: list[int] = []

    def disk_full(fd: int, data: bytes, offset: int) -> int:
        tries.append(offset)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", disk_full)
    reserve = WalReserve(str(db))
    for _ in range(3):
        reserve.ahead()  # swallowed, and not tried again while the log stays as it is
    assert len(tries) == 1 and wal.stat().st_size == 32 + 40 * _FRAME
    with wal.open("ab") as f:
        f.write(_fake_log(1)[32:])
    reserve.ahead()
    assert len(tries) == 2
    reserve.close()


def sqlite_wal_start() -> int:
    return _sqlite_wal._START + _FRAME


def test_normal_durability_and_memory_databases_reserve_nothing(tmp_path: Path) -> None:
    db = tmp_path / "n.db"

    async def go() -> None:
        cp = SqliteCheckpointer(db, synchronous="normal")
        await _append(cp, "a", 60, 3000)
        wal = Path(str(db) + "-wal")
        assert wal.stat().st_size == _frames_end(wal)
        await cp.aclose()
        mem = SqliteCheckpointer(":memory:")
        await _append(mem, "a", 3, 10)
        await mem.aclose()

    asyncio.run(go())


_WRITER = r"""
import asyncio, sys
sys.path.insert(0, sys.argv[3])
from _backend_helpers import make
from plait.checkpoint.sqlite import SqliteCheckpointer

async def main() -> None:
    cp = SqliteCheckpointer(sys.argv[1])
    parent = None
    for i in range(int(sys.argv[4])):
        w = make(sys.argv[2], parent, {"blob": "y" * 2500, "i": i})
        await cp.acommit(checkpoints=[w])
        parent = w.checkpoint
        print(parent.id, flush=True)
    await cp.aclose()

asyncio.run(main())
"""


def _writer(db: Path, thread: str, steps: int) -> subprocess.Popen[str]:
    helpers = str(Path(__file__).parent.parent)  # where _backend_helpers is
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db), thread, helpers, str(steps)], stdout=subprocess.PIPE, text=True
    )


def _ids_read_back(db: Path, thread: str, ids: list[str]) -> None:
    async def go() -> None:
        cp = SqliteCheckpointer(db)
        for cid in ids:
            got = await cp.aget(thread, cid)
            assert got is not None and got.id == cid, f"acknowledged checkpoint {cid} of {thread} is lost"
        await cp.aclose()

    asyncio.run(go())
    with closing(sqlite3.connect(db)) as conn, conn:  # commits, then closes
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


_KILLED_IN_PLAN = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[3])
from plait.checkpoint.sqlite import _wal as _sqlite_wal

real_pwrite = os.pwrite
half = sys.argv[5] == "half"
rooms = [0]

def pwrite_then_die(fd, data, offset):
    # At its third room, the process dies while writing it (half of it written) or right
    # after, before the commit that would have flushed it: SIGKILL, as a crash would.
    rooms[0] += 1
    if rooms[0] < 3:
        return real_pwrite(fd, data, offset)
    real_pwrite(fd, data[: len(data) // 2] if half else data, offset)
    os.kill(os.getpid(), signal.SIGKILL)

os.pwrite = pwrite_then_die
""" + _WRITER.split("\n", 1)[1]


@pytest.mark.parametrize("moment", ["half", "whole"])
def test_a_process_killed_while_writing_the_room_loses_no_acknowledged_commit(tmp_path: Path, moment: str) -> None:
    db = tmp_path / "plan.db"
    helpers = str(Path(__file__).parent.parent)  # where _backend_helpers is
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_IN_PLAN, str(db), "t", helpers, "1000", moment],
        capture_output=True,
        text=True,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    ids = child.stdout.split()
    assert len(ids) > 5, "the child committed a while before it died"
    _ids_read_back(db, "t", ids)
    after = _writer(db, "t2", 50)  # the next process recovers the log and commits as usual
    out, _ = after.communicate()
    assert after.returncode == 0
    _ids_read_back(db, "t2", out.split())
    _ids_read_back(db, "t", ids)


@pytest.mark.slow
def test_sigkill_anywhere_loses_no_acknowledged_commit(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    rng = random.Random(int(os.environ.get("PLAIT_CRASH_SEED", "20261129")))
    acknowledged: dict[str, list[str]] = {}
    for kill in range(12):
        thread = f"t{kill}"
        child = _writer(db, thread, 100_000)
        assert child.stdout is not None
        ids: list[str] = []
        # Killed once it has acknowledged a chosen number of commits (an event, not a delay:
        # how fast a loaded machine commits does not matter), somewhere inside the next one.
        wanted = rng.randint(5, 25)
        while len(ids) < wanted:
            line = child.stdout.readline()
            assert line, f"the child {thread} stopped before its {wanted}th commit"
            ids.append(line.strip())
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate()
        ids.extend(rest.split())  # printed after the commit returned: acknowledged too
        acknowledged[thread] = ids
        _ids_read_back(db, thread, ids)
    assert sum(map(len, acknowledged.values())) > 100, "the children committed enough to fill rooms"
    for thread, ids in acknowledged.items():
        _ids_read_back(db, thread, ids)


def test_two_processes_writing_one_file_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "two.db"
    SqliteCheckpointer(db).close()  # create and migrate once
    children = [_writer(db, f"p{i}", 150) for i in range(2)]
    outputs: list[Any] = [c.communicate()[0].split() for c in children]
    assert all(c.returncode == 0 for c in children)
    for i, ids in enumerate(outputs):
        assert len(ids) == 150
        _ids_read_back(db, f"p{i}", ids)
