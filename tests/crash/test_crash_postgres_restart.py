"""A PostgreSQL server that restarts, or goes away, under a running graph.

The server is a private one (a throwaway cluster of this machine's PostgreSQL binaries, on a
loopback port of its own), so these tests may stop it without touching the shared server.
A child runs the loop graph on it; when the child reports a chosen point (a commit, a node
start, an effect not yet recorded) it waits there while the test restarts the server
(``pg_ctl stop -m immediate``, as a crash would, then start) or stops it, and then goes on.

Either the run reconnects and finishes, or it fails with a CheckpointError that names the
store; then, once the server is back, a new process resumes the thread. Either way every
checkpoint reads back whole and equal to the uninterrupted run's, the final state is the
uninterrupted run's, and no ``once`` effect whose result was stored ran again.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from plait._sync import run_sync
from plait.errors import ThreadBusyError

if TYPE_CHECKING:  # for the annotations only: at run time pytest gives them as fixtures
    from ._harness import Launcher, Outcome, Reference

pytestmark = pytest.mark.slow

GIVE_UP_AFTER = 1.0
"""Seconds a child that is to lose its server waits for a connection (its checkpointer's
``connect_timeout``): it gives up after four such waits, so that test stays short."""


def _postgres_unavailable(reason: str) -> None:
    """Skip, or fail under PLAIT_REQUIRE_POSTGRES=1 (as tests/conftest.py does)."""
    if os.environ.get("PLAIT_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL is required (PLAIT_REQUIRE_POSTGRES=1) but {reason}")
    pytest.skip(f"private PostgreSQL server tests skipped: {reason}")


def _postgres_bindir() -> Path | None:
    """The newest of this machine's PostgreSQL server binaries, or the ones on PATH."""

    def version(initdb: str) -> tuple[int, ...]:
        return tuple(int(part) for part in Path(initdb).parts[-3].split(".") if part.isdigit())

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    initdb = found[-1] if found else shutil.which("initdb")
    if initdb is None or not (Path(initdb).parent / "pg_ctl").exists():
        return None
    return Path(initdb).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class PrivatePostgres:
    """A throwaway PostgreSQL cluster: this machine's binaries, a folder of its own, a free
    loopback port, trust authentication. Only the tests that ask for it use it, so they may
    stop and restart it; the shared server is never touched."""

    bindir: Path
    root: Path
    """Owned by the user the server runs as: the data folder, the log and the socket."""
    run_as: list[str] = field(default_factory=list)
    """The command prefix that runs the binaries as that user (PostgreSQL refuses root)."""
    port: int = 0
    running: bool = False

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        cmd = [*self.run_as, str(self.bindir / argv[0]), *argv[1:]]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
        if done.returncode != 0:
            log = self.root / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stdout}{done.stderr}\n{tail}")

    def init(self) -> None:
        self._run("initdb", "-D", str(self.root / "data"), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                  "--locale=C", "--no-sync")  # fmt: skip
        self.port = _free_port()
        # fsync off: a server killed by `stop -m immediate` loses nothing the kernel holds,
        # and these tests kill servers, not machines.
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "fsync": "off",
            "max_connections": "40",
            "shared_buffers": "16MB",
        }
        with (self.root / "data" / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "log"), "-w", "-t", "60", "start")
        self.running = True

    def stop(self) -> None:
        """Stop it the way a crash would: no checkpoint, WAL recovery at the next start."""
        self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "-t", "60", "stop")
        self.running = False

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of this module's own, started (see :class:`PrivatePostgres`);
    skipped, or failed under PLAIT_REQUIRE_POSTGRES=1, when the binaries are missing."""
    try:
        import psycopg
    except ImportError:
        _postgres_unavailable("psycopg is not installed (pip install 'plait[postgres]')")
    bindir = _postgres_bindir()
    if bindir is None:
        _postgres_unavailable("no initdb and pg_ctl under /usr/lib/postgresql/*/bin or on PATH")
        raise AssertionError("unreachable")
    run_as: list[str] = []
    owner: tuple[int, int] | None = None
    if os.geteuid() == 0:
        import pwd

        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            _postgres_unavailable("running as root, and there is no postgres user to run the server as")
            raise AssertionError("unreachable") from None
        if shutil.which("runuser") is None:
            _postgres_unavailable("running as root, and there is no runuser to run the server as postgres")
        run_as, owner = ["runuser", "-u", "postgres", "--"], (user.pw_uid, user.pw_gid)
    root = Path(tempfile.mkdtemp(prefix="plait-pg-"))
    if owner is not None:
        os.chown(root, *owner)
    server = PrivatePostgres(bindir=bindir, root=root, run_as=run_as)
    try:
        server.init()
        for attempt in range(3):  # the free port may be taken before the server binds it
            try:
                server.start()
                break
            except RuntimeError:
                if attempt == 2:
                    raise
                server.port = _free_port()
                with (root / "data" / "postgresql.conf").open("a") as conf:
                    conf.write(f"port = {server.port}\n")
        with psycopg.connect(server.dsn, connect_timeout=10) as conn:
            conn.execute("select 1")
        yield server
    finally:
        if server.running:
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Thread:
    """One thread of the loop graph on the private server, and the files its children write."""

    args: dict[str, Any]
    """A child's arguments for a fresh run (``"fresh": False`` resumes)."""
    reader: Any
    """The test's own checkpointer on the same schema."""
    ledger: Path
    result: Path

    @property
    def name(self) -> str:
        name: str = self.args["thread"]
        return name


@pytest.fixture
def new_thread(
    private_postgres: PrivatePostgres, crash_child: ModuleType, tmp_path: Path
) -> Iterator[Callable[[str], Thread]]:
    """Makes the test's thread: in a fresh schema of the private server (started again if a
    test left it down), run with the given durability."""
    import psycopg

    readers: list[Any] = []

    def make(durability: str) -> Thread:
        if not private_postgres.running:
            private_postgres.start()
        schema = f"plait_restart_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(private_postgres.dsn, autocommit=True) as conn:
            conn.execute(f'create schema "{schema}"')
        reader = crash_child.open_checkpointer("postgres", private_postgres.dsn, schema)
        readers.append(reader)
        run_sync(reader.asetup())
        ledger, result = tmp_path / "restarted.ledger", tmp_path / "restarted.json"
        args = {
            "backend": "postgres",
            "store": private_postgres.dsn,
            "pg_schema": schema,
            "thread": "restarted",
            "ledger": str(ledger),
            "result": str(result),
            "fresh": True,
            "durability": durability,
        }
        return Thread(args=args, reader=reader, ledger=ledger, result=result)

    try:
        yield make
    finally:
        for reader in readers:
            run_sync(reader.aclose())


def _assert_clear_checkpoint_error(outcome: Outcome) -> None:
    """The run failed with a CheckpointError (as raised, or as the cause of what was) that
    names the store."""
    failure = outcome.failure
    assert failure is not None, f"the run failed without saying why: {outcome.describe()}"
    assert "CheckpointError" in failure.errors, f"not a CheckpointError: {' '.join(failure.errors)}: {failure.message}"
    assert "PostgreSQL" in failure.message, f"the error does not name the store: {failure.message}"


def _recorded(thread: Thread) -> tuple[set[str], int]:
    """The tasks the store shows finished or with their effect recorded, and the ledger's
    size now: a later line may not run any of those effects again."""
    head = run_sync(thread.reader.aget(thread.name))
    if head is None:
        return set(), thread.ledger.stat().st_size
    lineage = run_sync(thread.reader.ahistory(thread.name))
    done = {t.id for cp in lineage[1:] for t in cp.next_tasks}
    done |= {p.task_id for p in head.pending_writes if p.kind in ("result", "effect")}
    return done, thread.ledger.stat().st_size


def _effects_after(thread: Thread, offset: int) -> list[str]:
    """The tasks whose ``once`` effect ran at or after ``offset`` in the ledger."""
    later = thread.ledger.read_bytes()[offset:].decode().splitlines()
    return [line.split()[1] for line in later if line.startswith("effect ")]


def _finish(thread: Thread, first: Outcome, launcher: Launcher, reference: Reference, where: str) -> str:
    """After ``first`` ended: resume the thread if it failed, then check it against the
    uninterrupted run. Says how the run ended."""
    if first.exit_code == 0:
        ended = "reconnected and finished"
        effects = _effects_after(thread, 0)
        assert len(effects) == len(set(effects)), f"{where}: a run that never failed ran an effect twice"
    else:
        _assert_clear_checkpoint_error(first)
        ended = f"failed ({first.failure.errors[0]}), then resumed"
        recorded, size = _recorded(thread)
        second = launcher.run({**thread.args, "fresh": False})
        assert second.exit_code == 0, f"{where}: the resumed run: {second.describe()}"
        again = set(_effects_after(thread, size)) & recorded
        assert not again, f"{where}: effects stored before the failure ran again: {again}"
    reference.check_thread(thread.reader, thread.name, where)
    assert json.loads(thread.result.read_text()) == reference.final, f"{where}: invoke() returned another state"
    return ended


RESTART_POINTS = [
    pytest.param({"kind": "commit", "step": 10}, "async", id="after-a-commit-async"),
    pytest.param({"kind": "node", "step": 7, "node": "w1"}, "sync", id="as-a-node-starts-sync"),
    pytest.param({"kind": "effect", "step": 7, "node": "w2"}, "sync", id="between-an-effect-and-its-record-sync"),
]
"""Where the server restarts, and the durability of the run it restarts under."""


@pytest.mark.parametrize(("point", "durability"), RESTART_POINTS)
def test_a_run_under_which_postgres_restarts_finishes_or_fails_clearly_and_resumes(
    crash_child: ModuleType,
    private_postgres: PrivatePostgres,
    new_thread: Callable[[str], Thread],
    launcher: Launcher,
    reference: Reference,
    point: dict[str, Any],
    durability: str,
) -> None:
    thread = new_thread(durability)
    at = crash_child.At(**point)
    with launcher.held(thread.args, at=at) as held:
        private_postgres.restart()  # while the child waits at ``at``; its other threads go on
    assert held.outcome is not None
    ended = _finish(thread, held.outcome, launcher, reference, f"restart at {held.event}")
    print(f"\n[{durability}] restart at {held.event}: {ended}")


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_run_that_loses_postgres_fails_with_a_checkpoint_error_and_resumes_once_it_is_back(
    crash_child: ModuleType,
    private_postgres: PrivatePostgres,
    new_thread: Callable[[str], Thread],
    launcher: Launcher,
    reference: Reference,
    durability: str,
) -> None:
    thread = new_thread(durability)
    args = {**thread.args, "connect_timeout": GIVE_UP_AFTER}
    with launcher.held(args, at=crash_child.At(kind="node", step=7, node="w1")) as held:
        private_postgres.stop()  # and it stays down until the run has given up
    first = held.outcome
    assert first is not None
    private_postgres.start()
    assert first.exit_code == 1, f"a run without its server: {first.describe()}"
    ended = _finish(thread, first, launcher, reference, f"server lost at {held.event}")
    print(f"\n[{durability}] server lost at {held.event}: {ended}")


def test_a_lease_taken_just_before_the_server_crashes_is_never_given_out_again(
    private_postgres: PrivatePostgres,
) -> None:
    """A generation is the fence of every write under it, so the server must not forget one it
    handed out: taken leases survive a crash of the server right after they were taken, and
    the next lease on the thread gets a greater generation, never the same one again."""
    import psycopg

    from plait.checkpoint.postgres import PostgresCheckpointer

    schema = f"lease_{uuid.uuid4().hex[:8]}"
    first = PostgresCheckpointer(private_postgres.dsn, schema=schema, lease_ttl=0.5)
    first.setup()
    taken = [first.take_lease(f"t{i}", "run A") for i in range(5)]
    first.close()
    private_postgres.restart()  # at once: nothing else was written to flush them along
    with psycopg.connect(private_postgres.dsn) as conn:
        rows: dict[str, int] = dict(conn.execute(f'SELECT thread_id, gen FROM "{schema}".plait_threads').fetchall())
    assert rows == {lease.thread_id: lease.token for lease in taken}
    later = PostgresCheckpointer(private_postgres.dsn, schema=schema, lease_ttl=30)
    try:
        deadline = time.monotonic() + 30
        while True:  # A's leases expire on the server's clock (half a second)
            try:
                again = later.take_lease("t0", "run B")
                break
            except ThreadBusyError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert again.token > taken[0].token
    finally:
        later.close()
