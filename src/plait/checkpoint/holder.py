"""Who holds a lease, and whether that process is provably gone.

A lease records the process that took it: its host name, the machine's boot id, its pid
namespace, its pid and the time it started. A process that finds a lease held by another
can then tell, when the holder ran on the same machine (same boot, same pid namespace),
whether it is still alive: a pid that no longer exists, that belongs to a zombie, or that
belongs to a process started at another time (the pid was reused) is not the holder. Such
a lease is taken over at once instead of being waited out, so a run killed by SIGKILL is
resumed immediately. A holder on another machine (or in another pid namespace) cannot be
checked and is waited out until its lease expires.

Taking over early is safe because leases are fenced by generation: the new lease has a
greater token, and the store refuses every commit made under the old one.

The facts come from Linux's ``/proc``; elsewhere a holder is never provably dead (leases
are then waited out, as on another machine).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

__all__ = ["Holder"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Holder:
    """The process that took a lease."""

    host: str
    """The host name (for people: it identifies the machine only together with ``boot``)."""
    boot: str
    """The machine's boot id (``/proc/sys/kernel/random/boot_id``); empty where unknown."""
    pidns: str
    """The pid namespace's inode: the same pid means the same process only inside one."""
    pid: int
    started: int
    """The process's start time, in clock ticks after boot (``/proc/PID/stat`` field 22):
    with the pid, it names one process even after its pid was reused."""

    @classmethod
    def current(cls) -> Holder:
        """This process (computed once per process; a forked child computes its own)."""
        pid = os.getpid()
        found = _CURRENT.get(pid)
        if found is None:
            found = cls(
                host=socket.gethostname(), boot=_boot_id(), pidns=_pid_namespace(), pid=pid, started=_started(pid)
            )
            _CURRENT.clear()
            _CURRENT[pid] = found
        return found

    def same_machine(self) -> bool:
        """Whether this process can see the holder's process table (same boot, same pid
        namespace, on a system where both are known)."""
        here = Holder.current()
        return bool(self.boot) and self.boot == here.boot and self.pidns == here.pidns and bool(self.pidns)

    def alive(self) -> bool | None:
        """True or False when the holder ran on this machine; None when it cannot be told.

        A stopped process (SIGSTOP) is alive: its lease is waited out.
        """
        if not self.same_machine():
            return None
        if self.pid == os.getpid():
            return self.started == Holder.current().started
        state, started = _stat(self.pid)
        if state is None:
            return False
        return state not in ("Z", "X", "x") and started == self.started

    def describe(self) -> str:
        """``pid 4242 on host-a`` for messages."""
        return f"pid {self.pid} on {self.host}"

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "boot": self.boot, "pidns": self.pidns, "pid": self.pid, "started": self.started}

    @classmethod
    def from_json(cls, data: Any) -> Holder | None:
        """A holder from its stored JSON; None for anything else (a lease with an unreadable
        holder is treated as one on another machine: waited out, never taken early)."""
        if type(data) is not dict:
            return None
        host, boot, pidns, pid, started = (data.get(k) for k in ("host", "boot", "pidns", "pid", "started"))
        if not (type(host) is str and type(boot) is str and type(pidns) is str):
            return None
        if type(pid) is not int or type(started) is not int:
            return None
        return cls(host=host, boot=boot, pidns=pidns, pid=pid, started=started)


_CURRENT: dict[int, Holder] = {}


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def _stat(pid: int) -> tuple[str | None, int]:
    """``(state, start time)`` of a process from ``/proc/PID/stat``; ``(None, 0)`` when it
    does not exist. The command name (field 2) may hold spaces and parentheses, so the
    fields are counted from the last ``)``."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return None, 0
    rest = raw[raw.rfind(")") + 2 :].split()
    try:
        return rest[0], int(rest[19])
    except (IndexError, ValueError):
        return None, 0


def _started(pid: int) -> int:
    return _stat(pid)[1]
