"""Ports on 127.0.0.1 for the servers this project starts, reserved across processes until the picker exits.

A port found free is free only until someone binds it, and the server it is for binds it late: PRIME-RL's
orchestrator binds the ZMQ rollout transport after a minute of imports, when another smoke may have started its
teachers meanwhile. Two guards make a port handed out here stay unused until its server binds it:

- Ports come from below (or, on a machine whose range leaves no room below, above) the kernel's ephemeral range
  (`/proc/sys/net/ipv4/ip_local_port_range`). The kernel hands ports from that range to every `bind(0)` and every
  outgoing connection, so another program's "any free port" (vLLM's and torchrun's own picks, a client socket)
  never lands on one of ours.
- Each port handed out is reserved: an exclusive `flock` on `RESERVATIONS/<port>`, held by the picking process until
  it exits (the kernel drops it however the process ends, `kill -9` included). Every picker here skips a port
  another process holds, so two smokes into different `--out` folders, or a smoke and the realtime demo, never get
  the same port. A process that picked a port keeps it: it is never handed out twice, in any process.

`fcntl` rather than `filelock`: this module runs in every install (the relay, the tests), not only the smoke's.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import threading
from pathlib import Path

RESERVATIONS = Path("/tmp/composer-prime-ports")
"""One lock file per reserved port; shared by every user of the machine (mode 1777, like /tmp itself)."""
LOWEST = 20000
"""The lowest port handed out (below are the well-known and registered services' usual ports)."""

_held: dict[int, int] = {}
"""port -> the open file whose flock reserves it, for this process's lifetime."""
_picking = threading.Lock()


class PortsExhausted(OSError):
    """No free, unreserved port (or block) in the range this module picks from."""


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for `bind(0)` and outgoing connections (Linux's default where it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def candidate_range() -> range:
    """Ports this module hands out: outside the ephemeral range, the larger of the room below and above it."""
    low, high = ephemeral_range()
    below = range(LOWEST, low)
    above = range(max(high + 1, LOWEST), 65536)
    return below if len(below) >= len(above) else above


def port_free(port: int) -> bool:
    """Nothing is bound to `port` on 127.0.0.1 now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _lock_dir() -> Path:
    RESERVATIONS.mkdir(exist_ok=True)
    if RESERVATIONS.stat().st_uid == os.getuid() and RESERVATIONS.stat().st_mode & 0o1777 != 0o1777:
        RESERVATIONS.chmod(0o1777)
    return RESERVATIONS


def _reserve(port: int) -> bool:
    """Take this process's reservation of `port`: False where another process holds it (or it cannot be reserved)."""
    if port in _held:
        return False
    try:
        fd = os.open(_lock_dir() / str(port), os.O_RDONLY | os.O_CREAT, 0o644)
    except PermissionError as err:
        raise OSError(
            err.errno,
            f"cannot reserve port {port} under {RESERVATIONS} ({err.strerror}); make that folder writable for every "
            f"user (chmod 1777 {RESERVATIONS}) or remove it",
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    _held[port] = fd
    return True


def _unreserve(port: int) -> None:
    fd = _held.pop(port, None)
    if fd is not None:
        os.close(fd)  # closing the only descriptor drops the flock


def reserved_by_another(port: int) -> bool:
    """Another process holds `port`'s reservation now."""
    if port in _held:
        return False
    path = RESERVATIONS / str(port)
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def reserve(port: int) -> bool:
    """Reserve a port someone asked for by number (`--port P`): True where it is free and no other process holds it
    (or this process already does)."""
    with _picking:
        if port in _held:
            return True
        if not _reserve(port):
            return False
        if port_free(port):
            return True
        _unreserve(port)
        return False


def free_port() -> int:
    """A free port, reserved for this process until it exits."""
    return free_port_blocks(1)[0]


def free_port_blocks(*sizes: int, avoid: tuple[int, ...] = ()) -> list[int]:
    """For each size n, a port P with P..P+n-1 free on 127.0.0.1 and reserved for this process until it exits; the
    blocks never overlap each other, `avoid`, or any port another process (or an earlier call) reserved."""
    ports = candidate_range()
    bases: list[int] = []
    with _picking:
        for size in sizes:
            start = random.randrange(len(ports))  # smokes starting together scan from different places
            for offset in range(len(ports)):
                base = ports[(start + offset) % len(ports)]
                if base + size > ports.stop or any(base <= port < base + size for port in avoid):
                    continue
                block = range(base, base + size)
                taken: list[int] = []
                for port in block:
                    if not _reserve(port):
                        break
                    taken.append(port)
                if len(taken) == size and all(port_free(port) for port in block):
                    bases.append(base)
                    break
                for port in taken:
                    _unreserve(port)
            else:
                raise PortsExhausted(
                    f"no {size} consecutive free, unreserved ports on 127.0.0.1 in {ports.start}-{ports.stop - 1} "
                    f"(reservations: {RESERVATIONS})"
                )
    return bases
