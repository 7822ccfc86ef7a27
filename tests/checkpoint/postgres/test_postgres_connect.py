"""PostgresCheckpointer opening its pool: an address nothing answers at, a database or role
that does not exist fail at once with one CheckpointError saying where (the password left out),
what failed and what to check, without the pool's retries on the log; a server that is still
starting up is waited for, quietly, within connect_timeout.

Time bounds are generous for a loaded machine (the failures take milliseconds when idle)."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from plait.errors import CheckpointError

pytestmark = pytest.mark.postgres
psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("plait.checkpoint.postgres")
from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

BOUND = 5.0
"""Seconds a failure that retrying cannot mend may take, on a loaded machine (the timeout is 30)."""


def _fails(dsn: str, caplog: pytest.LogCaptureFixture, **kwargs: float) -> tuple[CheckpointError, float]:
    """The error ``setup()`` raises on ``dsn`` and the seconds it took; the pool logged nothing."""
    caplog.set_level(logging.INFO, logger="psycopg")
    cp = postgres.PostgresCheckpointer(dsn, **kwargs)
    start = time.monotonic()
    try:
        with pytest.raises(CheckpointError) as info:
            cp.setup()
        took = time.monotonic() - start
    finally:
        cp.close()
    noise = [r.getMessage() for r in caplog.records if r.name.startswith("psycopg") and r.levelno >= logging.WARNING]
    assert noise == [], f"the pool logged its retries: {noise}"
    return info.value, took


def test_an_address_that_refuses_connections_fails_at_once(caplog: pytest.LogCaptureFixture) -> None:
    err, took = _fails("postgresql://postgres:sekrit@127.0.0.1:1/test", caplog)
    assert took < BOUND, f"took {took:.2f}s"
    text = str(err)
    assert "host=127.0.0.1" in text and "port=1" in text and "password=***" in text
    assert "sekrit" not in text
    assert "no PostgreSQL server answered" in text and "listening" in text
    assert isinstance(err.__cause__, psycopg.OperationalError)


def test_a_database_that_does_not_exist_fails_at_once(postgres_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    name = f"plait_no_such_db_{uuid.uuid4().hex[:8]}"
    err, took = _fails(make_conninfo(postgres_dsn, dbname=name), caplog)
    assert took < BOUND, f"took {took:.2f}s"
    assert f"dbname={name}" in str(err) and "does not exist" in str(err) and "createdb" in str(err)


def test_a_role_that_does_not_exist_fails_at_once(postgres_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    role = f"plait_no_such_role_{uuid.uuid4().hex[:8]}"
    err, took = _fails(make_conninfo(postgres_dsn, user=role, password="hunter2-secret"), caplog)
    assert took < BOUND, f"took {took:.2f}s"
    text = str(err)
    assert f"user={role}" in text and "password=***" in text and "hunter2-secret" not in text
    assert "refused the connection" in text and "user name" in text


class StartingServer:
    """Stands in for a PostgreSQL that is starting up, in front of the real one: until
    :attr:`ready` is set it answers each connection as a starting server does (an error with
    SQLSTATE 57P03, "the database system is starting up"), then it relays connections to the
    real server byte for byte. The client side (libpq, psycopg, the pool) is all real."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.ready = threading.Event()
        self.turned_away = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        self.sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        if self.ready.is_set():
            self._relay(conn)
            return
        with conn:
            while True:  # SSL and GSS encryption requests first, answered "no", then the startup message
                length, code = struct.unpack("!ii", _read(conn, 8))
                if code in (80877103, 80877104):
                    conn.sendall(b"N")
                    continue
                _read(conn, length - 8)
                break
            fields = b"SFATAL\0VFATAL\0C57P03\0Mthe database system is starting up\0\0"
            conn.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)
            self.turned_away += 1

    def _relay(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(self.target)
        left = [2]
        lock = threading.Lock()

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            for s in (src, dst):  # one side hung up: end the other's too
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            with lock:
                left[0] -= 1
                if left[0] == 0:  # the last pump to finish closes both
                    conn.close()
                    upstream.close()

        threading.Thread(target=pump, args=(conn, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, conn), daemon=True).start()


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise ConnectionError("the client hung up")
        data += part
    return data


@pytest.fixture
def starting(postgres_dsn: str) -> Iterator[tuple[StartingServer, str]]:
    params = conninfo_to_dict(postgres_dsn)
    server = StartingServer((str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)))
    try:
        yield server, make_conninfo(postgres_dsn, host="127.0.0.1", port=server.port)
    finally:
        server.close()


def test_a_server_that_is_starting_up_is_waited_for_quietly(
    starting: tuple[StartingServer, str], postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    server, dsn = starting
    caplog.set_level(logging.INFO, logger="psycopg")
    threading.Timer(1.0, server.ready.set).start()
    cp = postgres.PostgresCheckpointer(dsn, schema=postgres_schema, connect_timeout=20)
    start = time.monotonic()
    try:
        cp.setup()
        took = time.monotonic() - start
        assert cp.list_threads() == []
    finally:
        cp.close()
    assert server.turned_away >= 1
    assert 0.9 <= took < 1.0 + BOUND, f"took {took:.2f}s"
    noise = [r.getMessage() for r in caplog.records if r.name.startswith("psycopg") and r.levelno >= logging.WARNING]
    assert noise == []


def test_a_server_that_keeps_starting_up_fails_at_the_timeout(
    starting: tuple[StartingServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, dsn = starting
    err, took = _fails(dsn, caplog, connect_timeout=1.5)
    assert 1.4 <= took < 1.5 + BOUND, f"took {took:.2f}s"
    assert "starting up" in str(err) and "1.5s" in str(err)
    assert server.turned_away >= 2
