"""Free ports on 127.0.0.1 for the servers this project starts: one port, or blocks of consecutive ports.

A port found free is only likely to stay free until its server binds it; `free_port_blocks` holds every block it
picks bound until all are chosen, so blocks asked for together never overlap each other.
"""

from __future__ import annotations

import socket


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_blocks(*sizes: int, avoid: tuple[int, ...] = ()) -> list[int]:
    """For each size n, a port P with P..P+n-1 free on 127.0.0.1; every block distinct from the others and from
    `avoid`. Each block stays bound until all are chosen, so the kernel cannot hand a port out twice (the ZMQ pair and
    the env servers' base port once came out overlapping: "Address already in use")."""
    held: list[socket.socket] = []
    bases: list[int] = []
    try:
        for size in sizes:
            for _ in range(200):
                block: list[socket.socket] = []
                try:
                    first = socket.socket()
                    block.append(first)
                    first.bind(("127.0.0.1", 0))
                    base = first.getsockname()[1]
                    for k in range(1, size):
                        probe = socket.socket()
                        block.append(probe)
                        probe.bind(("127.0.0.1", base + k))
                except OSError:
                    for sock in block:
                        sock.close()
                    continue
                if any(base <= port < base + size for port in avoid):
                    for sock in block:
                        sock.close()
                    continue
                held += block
                bases.append(base)
                break
            else:
                raise OSError(f"no {size} consecutive free ports on 127.0.0.1")
        return bases
    finally:
        for sock in held:
            sock.close()
