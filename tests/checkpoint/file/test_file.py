"""FileCheckpointer specifics: torn writes, damage, names that try to escape the folder, several
processes on one folder, and storage that grows with what was written. The protocol contract
itself runs in test_conformance.py."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plait._codec import freeze
from plait.checkpoint.file import FileCheckpointer
from plait.checkpoint.file._format import file_stem
from plait.checkpoint.model import Checkpoint, CheckpointWrite, Lease, WritesBatch, new_checkpoint_id
from plait.errors import (
    MAX_ID_BYTES,
    CheckpointCorruptError,
    InvalidIdError,
    NotSerializableError,
    StoreVersionError,
    ThreadBusyError,
)
from plait.testing import AWKWARD

NAME = re.compile(r"^[th]-[a-z0-9_%~-]+\.(jsonl|lease)$")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def make(folder: Path) -> FileCheckpointer:
    cp = FileCheckpointer(folder)
    run(cp.asetup())
    return cp


def step(thread_id: str, parent: Checkpoint | None, updates: dict[str, Any], namespace: str = "") -> CheckpointWrite:
    values = dict(parent.values) if parent else {}
    values |= {k: freeze(v, k) for k, v in updates.items()}
    cp = Checkpoint(
        thread_id=thread_id,
        namespace=namespace,
        id=new_checkpoint_id(parent.id if parent else None),
        parent_id=parent.id if parent else None,
        step=parent.step + 1 if parent else 0,
        values=values,
        versions=dict.fromkeys(values, 1),
        metadata=freeze({"source": "loop", "step": parent.step + 1 if parent else 0}, "metadata"),
        created_at=1.5,
    )
    return CheckpointWrite(checkpoint=cp, changed=frozenset(updates))


def chain(cp: FileCheckpointer, thread_id: str, n: int, namespace: str = "") -> list[Checkpoint]:
    out: list[Checkpoint] = []
    parent = None
    for i in range(n):
        cw = step(thread_id, parent, {"i": i, "log": [*(parent.values["log"] if parent else []), i]}, namespace)
        run(cp.acommit(checkpoints=[cw]))
        parent = cw.checkpoint
        out.append(parent)
    return out


def thread_file(folder: Path, thread_id: str, namespace: str = "") -> Path:
    return folder / (file_stem(namespace, thread_id) + ".jsonl")


# -- crashes and damage ---------------------------------------------------------------------


def test_torn_last_line_is_ignored_and_cut_off_by_the_next_commit(tmp_path: Path) -> None:
    cp = make(tmp_path)
    cps = chain(cp, "t", 2)
    path = thread_file(tmp_path, "t")
    whole = path.read_bytes()
    last_line = whole.rstrip(b"\n").rsplit(b"\n", 1)[1]
    with open(path, "ab") as f:
        f.write(last_line[: len(last_line) // 2])  # a crash in the middle of a write

    reader = make(tmp_path)
    head = run(reader.aget("t"))
    assert head is not None and head.id == cps[-1].id
    assert [c.id for c in run(reader.ahistory("t"))] == [c.id for c in reversed(cps)]

    nxt = step("t", cps[-1], {"i": 99})
    run(reader.acommit(checkpoints=[nxt]))
    fresh = make(tmp_path)
    assert [c.id for c in run(fresh.ahistory("t"))] == [nxt.checkpoint.id] + [c.id for c in reversed(cps)]
    for line in path.read_bytes().splitlines():
        orjson.loads(line)  # the torn bytes are gone: every line is whole JSON


def test_torn_header_of_a_new_file_is_recovered(tmp_path: Path) -> None:
    cp = make(tmp_path)
    thread_file(tmp_path, "t").write_bytes(b'{"plait": "file-chec')
    assert run(cp.alist_threads()) == []
    assert run(cp.aget("t")) is None
    cps = chain(cp, "t", 2)
    assert [c.id for c in run(make(tmp_path).ahistory("t"))] == [c.id for c in reversed(cps)]


def test_garbage_in_the_middle_is_reported_and_other_threads_stay_listed(tmp_path: Path) -> None:
    cp = make(tmp_path)
    bad = chain(cp, "bad", 3)
    good = chain(cp, "good", 2)
    path = thread_file(tmp_path, "bad")
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], b"\x00\x00garbage}\n", *lines[2:]]))

    reader = make(tmp_path)
    with pytest.raises(CheckpointCorruptError) as info:
        run(reader.aget("bad"))
    assert info.value.thread_id == "bad"
    assert bad[0].id in str(info.value)  # names the last good checkpoint before the damage
    with pytest.raises(CheckpointCorruptError):
        run(reader.ahistory("bad"))
    with pytest.raises(CheckpointCorruptError):
        run(reader.acommit(checkpoints=[step("bad", bad[-1], {"i": 5})]))
    assert [t.thread_id for t in run(reader.alist_threads())] == ["good"]
    head = run(reader.aget("good"))
    assert head is not None and head.id == good[-1].id


def test_a_record_of_unknown_kind_names_its_checkpoint(tmp_path: Path) -> None:
    cp = make(tmp_path)
    chain(cp, "t", 2)
    path = thread_file(tmp_path, "t")
    with open(path, "ab") as f:
        f.write(b'[{"k": "zz", "id": "abc123"}]\n')
    with pytest.raises(CheckpointCorruptError) as info:
        run(make(tmp_path).aget("t"))
    assert info.value.checkpoint_id == "abc123"
    assert "unknown kind" in info.value.reason


def test_a_complete_garbage_last_line_is_damage_not_a_torn_write(tmp_path: Path) -> None:
    cp = make(tmp_path)
    chain(cp, "t", 2)
    with open(thread_file(tmp_path, "t"), "ab") as f:
        f.write(b"not json\n")
    with pytest.raises(CheckpointCorruptError):
        run(make(tmp_path).aget("t"))


def test_a_damaged_thread_can_still_be_deleted(tmp_path: Path) -> None:
    cp = make(tmp_path)
    chain(cp, "t", 2)
    with open(thread_file(tmp_path, "t"), "ab") as f:
        f.write(b'[{"k": "w", "cp": "x", "w": [["task", "no-such-kind", "", 1]]}]\n')
    with pytest.raises(CheckpointCorruptError, match="no-such-kind"):
        run(cp.aget("t"))
    run(cp.adelete_thread("t"))
    assert run(cp.aget("t")) is None
    assert list(tmp_path.iterdir()) == []


def test_a_file_from_a_newer_plait_is_refused_and_skipped_in_listings(tmp_path: Path) -> None:
    cp = make(tmp_path)
    chain(cp, "new", 1)
    chain(cp, "old", 1)
    path = thread_file(tmp_path, "new")
    header, rest = path.read_bytes().split(b"\n", 1)
    path.write_bytes(header.replace(b'"v":1', b'"v":99') + b"\n" + rest)
    reader = make(tmp_path)
    with pytest.raises(StoreVersionError) as info:
        run(reader.aget("new"))
    assert info.value.found == 99
    assert [t.thread_id for t in run(reader.alist_threads())] == ["old"]


def test_a_file_holding_another_thread_is_refused(tmp_path: Path) -> None:
    cp = make(tmp_path)
    chain(cp, "a", 1)
    thread_file(tmp_path, "a").rename(thread_file(tmp_path, "b"))
    with pytest.raises(CheckpointCorruptError, match="holds another thread"):
        run(make(tmp_path).aget("b"))


def test_a_failed_commit_leaves_no_file_behind(tmp_path: Path) -> None:
    cp = make(tmp_path)
    good = step("new", None, {"a": 1})
    bad = step("other", None, {"a": 1})
    poisoned = CheckpointWrite(
        checkpoint=Checkpoint(**{**_fields(bad.checkpoint), "values": {"a": freeze([1], "a") + [object()]}}),
        changed=frozenset({"a"}),
    )
    with pytest.raises(NotSerializableError) as info:
        run(cp.acommit(checkpoints=[good, poisoned]))
    assert info.value.channel == "a"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _fields(cp: Checkpoint) -> dict[str, Any]:
    return {name: getattr(cp, name) for name in Checkpoint.__dataclass_fields__}


# -- names ----------------------------------------------------------------------------------


ESCAPES = ["../../etc/passwd", "/abs", "a/b", "a\x01b", "..", ".", "", "x" * MAX_ID_BYTES, "C:\\x", "a\\..\\b"]


def test_thread_ids_cannot_name_a_path_outside_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    cp = make(folder)
    tids = [e for e in ESCAPES if e]  # "" is a namespace only: a blank thread id is refused
    for i, tid in enumerate(tids):
        for ns in ("", tid):
            chain(cp, tid, 2, namespace=ns)
            run(cp.arelease_lease(run(cp.atake_lease(tid, f"owner{i}", namespace=ns))))
    assert [p.name for p in tmp_path.iterdir()] == ["store"]
    names = [p.name for p in folder.iterdir()]
    assert len(names) == 2 * 2 * len(set(tids))  # a thread file and a lease file per thread
    for name in names:
        assert NAME.match(name), name
        assert len(name) <= 200
    listed = {(t.namespace, t.thread_id) for t in run(make(folder).alist_threads())}
    assert listed == {(ns, tid) for tid in tids for ns in ("", tid)}


@given(st.text(max_size=40), st.text(max_size=40), st.text(max_size=40), st.text(max_size=40))
def test_file_names_are_injective_and_safe(ns1: str, t1: str, ns2: str, t2: str) -> None:
    a, b = file_stem(ns1, t1), file_stem(ns2, t2)
    assert (a == b) == ((ns1, t1) == (ns2, t2))
    assert a.lower() == a and "/" not in a and "\x00" not in a and a not in (".", "..")


def test_names_differing_only_by_case_or_length_get_different_files() -> None:
    stems = {file_stem("", t) for t in AWKWARD}
    assert len(stems) == len(AWKWARD)
    assert file_stem("a~b", "") != file_stem("a", "b")


# -- several processes --------------------------------------------------------------------


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from plait.checkpoint.file import FileCheckpointer
    from plait.errors import ThreadBusyError

    async def main(folder, owner):
        cp = FileCheckpointer(folder)
        await cp.asetup()
        try:
            lease = await cp.atake_lease("t", owner, ttl=60)
        except ThreadBusyError as exc:
            print("busy", exc.owner, flush=True)
            return
        print("held", flush=True)
        sys.stdin.readline()
        await cp.arelease_lease(lease)
        print("released", flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def _child(folder: Path, owner: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder), owner],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_two_processes_contend_for_a_lease(tmp_path: Path) -> None:
    cp = make(tmp_path)
    with _child(tmp_path, "proc-2") as child:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(ThreadBusyError) as info:
            run(cp.atake_lease("t", "proc-1"))
        assert info.value.owner == "proc-2" and 0 < info.value.expires_in <= 60
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "released"
        assert child.wait(timeout=60) == 0
    run(cp.atake_lease("t", "proc-1"))
    with _child(tmp_path, "proc-3") as other:
        out, _ = other.communicate(timeout=60)
    assert out.strip() == "busy proc-1"


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from plait._codec import freeze
    from plait.checkpoint.model import Checkpoint, CheckpointWrite, new_checkpoint_id
    from plait.checkpoint.file import FileCheckpointer

    async def main(folder, tag):
        cp = FileCheckpointer(folder)
        await cp.asetup()
        for i in range(25):
            c = Checkpoint(thread_id="shared", id=new_checkpoint_id(), parent_id=None, step=0,
                           values={"who": tag, "i": i, "pad": freeze(["x" * 100] * 20, "pad")},
                           metadata={"source": "input", "step": 0})
            await cp.acommit(checkpoints=[CheckpointWrite(checkpoint=c, changed=frozenset(c.values))])

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def test_processes_appending_to_one_thread_never_interleave(tmp_path: Path) -> None:
    make(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), f"w{i}"]) for i in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    cp = make(tmp_path)
    (info,) = run(cp.alist_threads())
    assert info.checkpoints == 75
    seen = set()
    for line in thread_file(tmp_path, "shared").read_bytes().splitlines()[1:]:
        for record in orjson.loads(line):
            got = run(cp.aget("shared", record["id"]))
            assert got is not None
            seen.add((got.values["who"], got.values["i"]))
    assert seen == {(f"w{p}", i) for p in range(3) for i in range(25)}


def test_another_instance_sees_appends_and_deletes(tmp_path: Path) -> None:
    a, b = make(tmp_path), make(tmp_path)
    cps = chain(a, "t", 2)
    assert run(b.aget("t")) is not None  # b has it cached now
    nxt = step("t", cps[-1], {"i": 7})
    run(a.acommit(checkpoints=[nxt]))
    head = run(b.aget("t"))
    assert head is not None and head.id == nxt.checkpoint.id and head.values["i"] == 7
    run(a.adelete_thread("t"))
    assert run(b.aget("t")) is None
    again = chain(a, "t", 1)
    head = run(b.aget("t"))
    assert head is not None and head.id == again[0].id


def test_a_new_process_reads_everything_back(tmp_path: Path) -> None:
    cp = make(tmp_path)
    cps = chain(cp, "t", 5)
    run(cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=cps[-1].id, writes=())]))
    script = textwrap.dedent(
        """
        import asyncio, json, sys
        from plait.checkpoint.file import FileCheckpointer
        async def main():
            cp = FileCheckpointer(sys.argv[1])
            print(json.dumps([[c.id, c.values["log"]] for c in await cp.ahistory("t")]))
        asyncio.run(main())
        """
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [[c.id, list(c.values["log"])] for c in reversed(cps)]


# -- storage --------------------------------------------------------------------------------


def _chat_file_size(folder: Path, turns: int) -> int:
    cp = make(folder)
    parent: Checkpoint | None = None
    for i in range(turns):
        messages = [*(parent.values["messages"] if parent else []), freeze({"id": i, "text": "hello " * 10}, "m")]
        cw = step("chat", parent, {"messages": messages, "turn": i})
        run(cp.acommit(checkpoints=[cw]))
        parent = cw.checkpoint
    middle = run(make(folder).ahistory("chat"))[turns // 2]
    assert len(middle.values["messages"]) == turns - turns // 2
    return thread_file(folder, "chat").stat().st_size


def test_a_growing_chat_costs_linear_bytes(tmp_path: Path) -> None:
    # A full copy of the list per step would make twice the turns cost four times the bytes.
    small, large = _chat_file_size(tmp_path / "a", 200), _chat_file_size(tmp_path / "b", 400)
    assert large < 2.5 * small


def test_prune_rewrites_the_file_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    cp = make(tmp_path)
    cps = chain(cp, "t", 20)
    path = thread_file(tmp_path, "t")
    before = path.stat().st_size
    assert run(cp.aprune("t", keep_last=3)) == 17
    assert path.stat().st_size < before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, path.with_suffix(".lease").name])
    reader = make(tmp_path)
    got = run(reader.ahistory("t"))
    assert [c.id for c in got] == [c.id for c in reversed(cps[-3:])]
    assert [list(c.values["log"]) for c in got] == [list(c.values["log"]) for c in reversed(cps[-3:])]
    assert got[-1].parent_id is None
    nxt = step("t", cps[-1], {"i": 100})
    run(reader.acommit(checkpoints=[nxt]))
    head = run(make(tmp_path).aget("t"))
    assert head is not None and head.values["log"] == list(range(20)) and head.values["i"] == 100


# -- ids no store can hold, and lineages that loop ------------------------------------------


@pytest.mark.parametrize("bad", ["\ud800", "a\x00b", "x" * (MAX_ID_BYTES + 1)], ids=["surrogate", "nul", "long"])
def test_an_invalid_thread_id_creates_no_file(tmp_path: Path, bad: str) -> None:
    """Refused before any file is made: no stray lease file, no empty thread file."""
    cp = make(tmp_path)
    for call in (
        lambda: cp.atake_lease(bad, "owner"),
        lambda: cp.atake_lease_and_get(bad, "owner"),
        lambda: cp.acommit(checkpoints=[step(bad, None, {"a": 1})]),
        lambda: cp.arelease_lease(Lease(thread_id=bad, owner="owner", token=1, taken_at=0.0, expires_at=0.0)),
        lambda: cp.adelete_thread(bad),
    ):
        with pytest.raises(InvalidIdError) as info:
            run(call())
        assert info.value.value == bad
    assert list(tmp_path.iterdir()) == []


def test_delta_records_whose_parents_loop_are_corrupt_not_followed_forever(tmp_path: Path) -> None:
    """A record stored again (same id) as a delta on its own descendant: rebuilding its
    values would walk the loop for ever; it is reported instead."""
    cp = make(tmp_path)
    root, child = chain(cp, "t", 2)
    path = thread_file(tmp_path, "t")
    lines = path.read_bytes().splitlines()
    again = orjson.loads(lines[-1])
    again[0] |= {"id": root.id, "p": child.id}  # the root again, now a delta on its child
    path.write_bytes(b"\n".join([*lines, orjson.dumps(again)]) + b"\n")
    reader = make(tmp_path)
    for read in (lambda: reader.aget("t", root.id), lambda: reader.aget("t", child.id), lambda: reader.ahistory("t")):
        with pytest.raises(CheckpointCorruptError, match="cycle") as info:
            run(read())
        assert info.value.thread_id == "t" and info.value.checkpoint_id in (root.id, child.id)
