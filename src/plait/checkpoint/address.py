"""Store addresses: one string names any checkpointer, and :func:`open` opens it.

The forms an address takes:

* a path, or ``sqlite:///relative.db`` / ``sqlite:////absolute/path.db``: a SQLite file
  (:class:`~plait.checkpoint.SqliteCheckpointer`), the embedded default;
* ``postgresql://...`` or ``postgres://...``: a PostgreSQL DSN
  (:class:`~plait.checkpoint.PostgresCheckpointer`), passed on unchanged;
* ``file:///absolute/folder``: the file store (:class:`~plait.checkpoint.FileCheckpointer`);
* ``memory:``: a :class:`~plait.checkpoint.MemoryCheckpointer` (gone with the process).

Why one function: ``compile(checkpointer="plait.db")``, ``plait --db`` and ``PLAIT_DB`` all
take an address, and each used to decide on its own what a string meant (anything that was not
a DSN became a SQLite file, so ``mysql://host/db`` created a file of that name). Here an
address is parsed once, and one that names nothing plait can open is refused before anything
is created, with :class:`~plait.errors.StoreAddressError` saying what is wrong and what an
address can be. A SQLite file that exists is checked by its header, so a file of another kind
(a JSON export, a CSV) is never opened as a database (SQLite would take an empty file as a new
database and turn any other into "file is not a database" on the first read, or, written to,
damage it).

Passwords: :func:`redact` gives the address with its password replaced by ``***``, for
anything that prints one (errors, ``plait db stats``); every error raised here is redacted.
"""

from __future__ import annotations

import builtins
import os
import re
import urllib.parse
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.errors import StoreAddressError, StoreNotFoundError

__all__ = ["SQLITE_HEADER", "coerce_checkpointer", "open", "open_postgres", "redact", "sqlite_path"]

SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
"""A URL scheme of two characters or more (``C:`` is a Windows drive, not a scheme)."""

_LIBPQ_KEYWORDS = re.compile(r"^\s*(host|hostaddr|port|dbname|user|password|service|sslmode)\s*=", re.IGNORECASE)
"""The start of a libpq ``key=value`` connection string, which plait takes only as a URL."""

_POSTGRES = ("postgresql", "postgres")


def open(address: str | os.PathLike[str], *, create: bool = True, **options: Any) -> Checkpointer:
    """Open the checkpointer a store address names.

    Args:
        address: a SQLite path (a str or ``os.PathLike``), ``sqlite:///relative.db``,
            ``sqlite:////absolute/path.db``, a ``postgresql://`` or ``postgres://`` DSN,
            ``file:///folder`` (the file store) or ``memory:``.
        create: whether a SQLite file or file-store folder that does not exist yet may be
            created (on first use). With False such an address raises
            :class:`~plait.errors.StoreNotFoundError` instead: what an inspection tool wants,
            so that a typo does not leave an empty database behind.
        **options: passed to the checkpointer's constructor (``synchronous=`` for SQLite,
            ``schema=`` or ``max_connections=`` for PostgreSQL, ``retention=`` for every
            backend, ...).

    Returns:
        The checkpointer, not yet set up: ``setup()`` (or the first use) creates or migrates
        its storage. The caller owns it and closes it.

    Raises:
        StoreAddressError: an unknown scheme, a malformed URL, a directory where a SQLite file
            was expected (or a file where a folder was), a file that is not a SQLite
            database, a path whose folder does not exist or that cannot be read or written.
        StoreNotFoundError: with ``create=False``, no file or folder at the address.

    Example::

        from plait.checkpoint import open as open_store

        store = open_store("sqlite:///runs.db", synchronous="normal")
    """
    if isinstance(address, os.PathLike):
        return _sqlite(os.fspath(address), os.fspath(address), create, options)
    if not isinstance(address, str):
        raise TypeError(f"a store address is a str or a path, not {type(address).__name__}")
    shown = redact(address)
    if not address.strip():
        raise StoreAddressError(shown, "the address is empty")
    if "\x00" in address:
        raise StoreAddressError(shown, "the address holds a NUL character")
    match = _SCHEME.match(address)
    if match is None:
        if _LIBPQ_KEYWORDS.match(address):
            raise StoreAddressError(
                shown,
                "it looks like a PostgreSQL key=value connection string",
                "Write it as a URL: postgresql://user:password@host:5432/dbname.",
            )
        return _sqlite(address, shown, create, options)
    scheme = match.group(1).lower()
    rest = address[match.end() :]
    if scheme in _POSTGRES:
        return _postgres(address, shown, options)
    if scheme == "sqlite":
        return _sqlite(sqlite_path(address), shown, create, options)
    if scheme == "file":
        return _file(_file_path(rest, shown), shown, create, options)
    if scheme == "memory":
        if rest not in ("", "//"):
            raise StoreAddressError(shown, "memory: takes nothing after the colon")
        from plait.checkpoint.memory import MemoryCheckpointer

        return MemoryCheckpointer(**options)
    raise StoreAddressError(shown, f"plait has no store for the scheme {scheme + ':'!r}")


def sqlite_path(address: str) -> str:
    """The file path a ``sqlite:`` URL names (``sqlite:///x.db`` -> ``x.db``,
    ``sqlite:////abs/x.db`` -> ``/abs/x.db``, percent-escapes decoded).

    Raises:
        StoreAddressError: not of the form ``sqlite:///path``, or with a query or fragment.
    """
    shown = redact(address)
    rest = address.split(":", 1)[1]
    if not rest.startswith("///"):
        raise StoreAddressError(
            shown,
            "a sqlite: URL has three slashes before a relative path and four before an absolute one",
            "Write sqlite:///relative.db or sqlite:////absolute/path.db.",
        )
    if "?" in rest or "#" in rest:
        raise StoreAddressError(shown, "a sqlite: URL takes no query or fragment; pass options as keyword arguments")
    path = urllib.parse.unquote(rest[3:])
    if not path:
        raise StoreAddressError(shown, "the URL names no file")
    return path


def redact(address: str) -> str:
    """``address`` with its password replaced by ``***``: the user-info password of a URL
    and a ``password=`` query or key=value parameter. Anything else is returned unchanged."""
    match = _SCHEME.match(address)
    if match is None:
        return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", address, flags=re.IGNORECASE)
    try:
        parts = urllib.parse.urlsplit(address)
    except ValueError:
        return re.sub(r"://([^:/@]*):[^@/]*@", r"://\1:***@", address)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        if ":" in userinfo:
            netloc = userinfo.split(":", 1)[0] + ":***@" + hostport
    query = re.sub(r"(^|&)(password=)[^&]*", r"\1\2***", parts.query, flags=re.IGNORECASE)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


# -- one function per kind of store --------------------------------------------------------------


def _sqlite(path: str, shown: str, create: bool, options: dict[str, Any]) -> Checkpointer:
    from plait.checkpoint.sqlite import SqliteCheckpointer

    if path != ":memory:":
        _check_sqlite_file(path, shown, create)
    return SqliteCheckpointer(path, **options)


def _check_sqlite_file(path: str, shown: str, create: bool) -> None:
    """Refuse a SQLite path that cannot be a database, before SQLite creates or opens it."""
    if os.path.isdir(path):
        raise StoreAddressError(
            shown,
            "it is a directory, not a SQLite file",
            f"For the file store in that folder, write file://{os.path.abspath(path)}.",
        )
    if os.path.exists(path):
        if not os.access(path, os.R_OK):
            raise StoreAddressError(shown, "the file cannot be read (permission denied)")
        try:
            with builtins.open(path, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise StoreAddressError(shown, f"the file cannot be read ({exc.strerror or exc})") from None
        if head and head != SQLITE_HEADER:
            raise StoreAddressError(shown, "the file exists but is not a SQLite database (its header says otherwise)")
        return
    if not create:
        raise StoreNotFoundError(shown, "SQLite database")
    _check_parent(path, shown)


def _check_parent(path: str, shown: str) -> None:
    """A store to be created needs a folder it can be created in."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise StoreAddressError(shown, f"its folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StoreAddressError(shown, f"its folder {folder!r} is not writable, so the store cannot be created")


def _file_path(rest: str, shown: str) -> str:
    if "?" in rest or "#" in rest:
        raise StoreAddressError(shown, "a file: URL takes no query or fragment")
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise StoreAddressError(shown, f"a file: URL names a folder on this machine, not on {host!r}")
        rest = slash + path
    path = urllib.parse.unquote(rest)
    if not path:
        raise StoreAddressError(shown, "the URL names no folder", "Write file:///absolute/folder.")
    return path


def _file(path: str, shown: str, create: bool, options: dict[str, Any]) -> Checkpointer:
    from plait.checkpoint.file import FileCheckpointer

    if os.path.exists(path):
        if not os.path.isdir(path):
            raise StoreAddressError(
                shown, "it is a file, not a folder", f"For a SQLite database, write sqlite:///{path} or the bare path."
            )
        if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
            raise StoreAddressError(shown, "the folder cannot be read and written (permission denied)")
    elif not create:
        raise StoreNotFoundError(shown, "file-store folder")
    else:
        _check_parent(path, shown)
    return FileCheckpointer(path, **options)


def _postgres(dsn: str, shown: str, options: dict[str, Any]) -> Checkpointer:
    try:
        urllib.parse.urlsplit(dsn)
    except ValueError as exc:
        raise StoreAddressError(shown, f"the DSN is not a valid URL ({exc})") from None
    return open_postgres(dsn, **options)


def open_postgres(conninfo: str, **options: Any) -> Checkpointer:
    """The checkpointer on a PostgreSQL database given by any libpq connection string (a URL or
    ``key=value`` pairs): what the run queue's worker opens on the database its queue is on,
    without naming the backend's class. ``options`` go to its constructor (``schema=``,
    ``lease_ttl=``, ``max_connections=``).

    Raises:
        StoreAddressError: psycopg is not installed.
    """
    try:
        from plait.checkpoint.postgres import PostgresCheckpointer
    except ImportError:
        raise StoreAddressError(
            redact(conninfo),
            "PostgreSQL needs psycopg, which is not installed",
            "Install it: pip install 'plait[postgres]'.",
        ) from None
    return PostgresCheckpointer(conninfo, **options)


def coerce_checkpointer(checkpointer: Checkpointer | str | None) -> Checkpointer | None:
    """A Checkpointer from an instance or a store address (a SQLite path, ``sqlite:///x.db``,
    a ``postgresql://`` DSN, ``file:///folder``, ``memory:``; see :func:`plait.checkpoint.open`).

    Raises:
        StoreAddressError: an address that names no store plait can open.
    """
    if checkpointer is None or isinstance(checkpointer, Checkpointer):
        return checkpointer
    if isinstance(checkpointer, str):
        return open(checkpointer)
    raise TypeError(f"checkpointer must be a Checkpointer or a store address (a str), got {checkpointer!r}")
