"""How a Postgres transaction's statements are shipped: which recorded statements become the
one prepared call, and the recorder that collects them (no database needed here; the
round trips themselves are exercised against a real server in test_postgres.py)."""

from __future__ import annotations

import pytest

from plait.checkpoint.postgres._send import Fusion, NeedsAnswer, Recorder

FUSION = Fusion(fence="FENCE", insert="INSERT", release="RELEASE", settle="SETTLE", put="PUT", fold="FOLD")
FENCE = ("", "t", "owner", 7, False, None, None, "parent", False, None, None)
"""(ns, thread, owner, token, check head, expected, own, parent, no writes, now, quiet parent)"""
ROW = ("", "t", "id", "parent", 3, 1.5, "loop", b"{}", b"{}")


def test_a_fence_and_its_row_become_one_call() -> None:
    assert FUSION.fuse([("FENCE", FENCE), ("INSERT", ROW)]) == ("PUT", (*FENCE, *ROW[2:], False, False, None))


def test_a_fence_its_row_and_the_release_of_its_lease_become_one_call() -> None:
    statements = [("FENCE", FENCE), ("INSERT", ROW), ("RELEASE", ("idle", None, "", "t", 7))]
    assert FUSION.fuse(statements) == ("PUT", (*FENCE, *ROW[2:], True, False, "idle"))


def test_a_one_off_fence_its_row_and_how_it_leaves_the_thread_become_one_call() -> None:
    one_off = ("", "t", "update:x", None, True, "head", "id", None, True, None, None)
    statements = [("FENCE", one_off), ("INSERT", ROW), ("SETTLE", ("", "t", "stale", None))]
    assert FUSION.fuse(statements) == ("PUT", (*one_off, *ROW[2:], False, True, "stale"))


def test_a_commit_that_folds_its_parents_writes_is_one_call_with_the_delete_riding_on_it() -> None:
    fold = ("", "t", "parent")
    statements = [("FENCE", FENCE), ("FOLD", fold), ("INSERT", ROW), ("RELEASE", ("idle", None, "", "t", 7))]
    assert FUSION.fuse(statements) == ("WITH folded AS (FOLD) PUT", (*fold, *FENCE, *ROW[2:], True, False, "idle"))
    assert FUSION.fuse(statements[:3]) == ("WITH folded AS (FOLD) PUT", (*fold, *FENCE, *ROW[2:], False, False, None))


@pytest.mark.parametrize(
    "fence",
    [(*FENCE[:8], True, None, None), (*FENCE[:10], "parent")],
    ids=["head-without-writes", "quiet-parent"],
)
def test_a_fold_under_a_fence_that_reads_pending_writes_keeps_its_statements_in_order(
    fence: tuple[object, ...],
) -> None:
    statements = [("FENCE", fence), ("FOLD", ("", "t", "parent")), ("INSERT", ROW)]
    assert FUSION.fuse(statements) is None
    assert FUSION.fuse([statements[0], statements[2]]) is not None  # (without the fold: one call)


@pytest.mark.parametrize(
    "statements",
    [
        [("FENCE", FENCE), ("FOLD", ("", "other thread", "parent")), ("INSERT", ROW)],
        [("FOLD", ("", "t", "parent")), ("FENCE", FENCE), ("INSERT", ROW)],
        [("FENCE", FENCE), ("INSERT", ROW), ("FOLD", ("", "t", "parent"))],
        [("FENCE", FENCE), ("FOLD", ("", "t", "parent")), ("FOLD", ("", "t", "parent")), ("INSERT", ROW)],
        [("FENCE", FENCE), ("FOLD", ("", "t", "parent"))],
        [("BLOB", ("",)), ("FOLD", ("", "t", "parent")), ("INSERT", ROW)],
    ],
    ids=[
        "fold-of-another-thread",
        "fold-first",
        "fold-after-the-row",
        "two-folds",
        "fold-without-a-row",
        "fold-after-something-else",
    ],
)
def test_a_fold_anywhere_else_is_sent_as_it_is(statements: list[tuple[str, tuple[object, ...]]]) -> None:
    assert FUSION.fuse(statements) is None


@pytest.mark.parametrize(
    "statements",
    [
        [("INSERT", ROW)],
        [("FENCE", FENCE)],
        [("INSERT", ROW), ("FENCE", FENCE)],
        [("FENCE", FENCE), ("INSERT", ("", "other thread", *ROW[2:]))],
        [("FENCE", FENCE), ("OTHER", ROW)],
        [("FENCE", FENCE), ("INSERT", ROW), ("RELEASE", ("idle", None, "", "t", 8))],
        [("FENCE", FENCE), ("INSERT", ROW), ("RELEASE", ("idle", None, "", "other thread", 7))],
        [("FENCE", FENCE), ("INSERT", ROW), ("SETTLE", ("", "other thread", "idle", None))],
        [("FENCE", FENCE), ("INSERT", ROW), ("INSERT", ROW)],
        [("FENCE", FENCE), ("INSERT", ROW), ("RELEASE", ("idle", None, "", "t", 7)), ("INSERT", ROW)],
    ],
    ids=[
        "row-alone",
        "fence-alone",
        "out-of-order",
        "row-of-another-thread",
        "another-statement",
        "release-of-another-lease",
        "release-of-another-thread",
        "settle-of-another-thread",
        "two-rows",
        "four-statements",
    ],
)
def test_anything_else_is_sent_as_it_is(statements: list[tuple[str, tuple[object, ...]]]) -> None:
    assert FUSION.fuse(statements) is None


def test_the_recorder_keeps_statements_in_order_and_refuses_to_answer() -> None:
    rec = Recorder()
    rec.execute("A", (1,)).execute("B")
    rec.executemany("C", [(2,), (3,)])
    assert rec.statements == [("A", (1,)), ("B", ()), ("C", (2,)), ("C", (3,))]
    for read in (rec.fetchone, rec.fetchall, lambda: iter(rec)):
        with pytest.raises(NeedsAnswer):
            read()
